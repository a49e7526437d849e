#!/usr/bin/env bash
# The test suite: install (idempotent), start the local services, run pytest against them.
# Extra arguments go to pytest, e.g. scripts/test.sh tests/unit -x
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/services.sh start kafka mysql elasticsearch spark  # tests start their own Airflow servers
source scripts/env.sh
python -m pytest "$@"
