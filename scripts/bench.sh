#!/usr/bin/env bash
# Benchmarks (not part of the tests): install (idempotent), start the services, run bench/run.py.
#   ./scripts/bench.sh                                      1M events, every figure (~15 min)
#   ./scripts/bench.sh --scaling                            the memory scaling check (1M vs 3M events)
#   ./scripts/bench.sh --fixed-cost                         a window's fixed cost in a fresh process:
#                                                           long-lived Spark (connect) vs in-process
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/services.sh start
source scripts/env.sh
export PYTHONPATH="$CDCFLOW_ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ "${1:-}" = "--fixed-cost" ]; then shift; exec python -m bench.fixed_cost "$@"; fi
python -m bench.run "$@"
