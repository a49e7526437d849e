#!/usr/bin/env bash
# Benchmarks (not part of the tests): install (idempotent), start the services, run bench/run.py.
#   ./scripts/bench.sh                                      1M events, every figure (~15 min)
#   ./scripts/bench.sh --scaling                            the memory scaling check (1M vs 3M events)
#   ./scripts/bench.sh --fixed-cost                         a window's fixed cost in a fresh process:
#                                                           long-lived Spark (connect) vs in-process
#   ./scripts/bench.sh --only cdcflow --connect             cdcflow -> MySQL on the long-lived Spark and
#                                                           in-process, same data, same run
#   ./scripts/bench.sh --cluster-read                       read throughput on a standalone cluster,
#                                                           1 worker vs 2 workers, 6 partitions
#   ./scripts/bench.sh --wide [--columns 5,50,200]          a window against the table's width
#   ./scripts/bench.sh --decode [--events 20000]            the read task's decode alone per converter: JSON, Avro, JSON Schema
#   ./scripts/bench.sh --tables [--tables 1,50]             a window against the number of tables
#   ./scripts/bench.sh --latency [--samples 5]              produce -> rows in MySQL: on_data vs a 1-minute cron
#   ./scripts/bench.sh --soak [--windows 1000 --spread 200]  one long-lived Spark through many windows:
#                                                           heap after GC, RSS, window times
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/services.sh start
source scripts/env.sh
export PYTHONPATH="$CDCFLOW_ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ "${1:-}" = "--fixed-cost" ]; then shift; exec python -m bench.fixed_cost "$@"; fi
if [ "${1:-}" = "--wide" ]; then shift; exec python -m bench.wide "$@"; fi
if [ "${1:-}" = "--decode" ]; then shift; exec python -m bench.decode "$@"; fi
if [ "${1:-}" = "--tables" ]; then shift; exec python -m bench.tables "$@"; fi
if [ "${1:-}" = "--soak" ]; then shift; exec python -m bench.soak "$@"; fi
if [ "${1:-}" = "--latency" ]; then shift; exec python -m bench.latency "$@"; fi
if [ "${1:-}" = "--cluster-read" ]; then shift; exec python -m bench.cluster_read "$@"; fi
python -m bench.run "$@"
