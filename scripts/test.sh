#!/usr/bin/env bash
# The test suite: install (idempotent), start the local services, run pytest against them.
# Extra arguments go to pytest, e.g. scripts/test.sh tests/unit -x. When every path given is under
# tests/unit, no service is started (unit tests need none; some start an in-process Spark).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
only_unit=0
for arg in "$@"; do
  case "$arg" in
    -*) ;;
    tests/unit|tests/unit/*) only_unit=1 ;;
    *) only_unit=0; break ;;
  esac
done
if [ "$only_unit" = 0 ]; then
  scripts/services.sh start kafka mysql elasticsearch spark  # tests start their own Airflow servers
fi
source scripts/env.sh
python -m pytest "$@"
