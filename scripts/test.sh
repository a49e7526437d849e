#!/usr/bin/env bash
# The test suite: install (idempotent), start the local services, run pytest against them.
# Extra arguments go to pytest, e.g. scripts/test.sh tests/unit -x. When every path given is under
# tests/unit (no service, no JVM) or tests/spark (an in-process Spark), no service is started.
# Markers select within the rest: -m "not faults", -m system (Airflow itself), -m spark (pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
no_services=0
for arg in "$@"; do
  case "$arg" in
    -*) ;;
    tests/unit|tests/unit/*|tests/spark|tests/spark/*) no_services=1 ;;
    *) no_services=0; break ;;
  esac
done
if [ "$no_services" = 0 ]; then
  scripts/services.sh start kafka mysql elasticsearch spark  # tests start their own Airflow servers
fi
source scripts/env.sh
python -m pytest "$@"
