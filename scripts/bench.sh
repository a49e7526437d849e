#!/usr/bin/env bash
# Benchmarks (not part of the tests): install (idempotent), start the services, run bench/run.py.
#   ./scripts/bench.sh                                      1M events, every figure (~15 min)
#   ./scripts/bench.sh --scaling                            the memory scaling check (1M vs 3M events)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/services.sh start
source scripts/env.sh
export PYTHONPATH="$CDCFLOW_ROOT${PYTHONPATH:+:$PYTHONPATH}"
python -m bench.run "$@"
