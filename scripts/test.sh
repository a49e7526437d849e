#!/usr/bin/env bash
# The test suite: install (idempotent), then pytest; extra arguments go to pytest, e.g.
# scripts/test.sh tests/unit -x, or -m "not faults", -m system (Airflow itself), -m spark (pyproject.toml).
# pytest starts the services the selected tests need, and only those (tests/conftest.py: each test
# says which with pytest.mark.services): tests/unit starts none, test_mysql_sink.py MariaDB alone.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
export CDCFLOW_START_SERVICES=1
python -m pytest "$@"
