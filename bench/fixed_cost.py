"""Fixed cost of a window as Airflow runs it: a fresh Python process per window, measured for the
long-lived Spark (spark.mode connect) and for a Spark started in the process (inprocess), in one run.

    scripts/bench.sh --fixed-cost        (or: python -m bench.fixed_cost [--rounds 3])

Prints a table and writes bench/results/<time>-fixed-cost.json. Needs the services (scripts/services.sh
start, with spark).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from cdcflow import cdcgen
from cdcflow.connections import get_connection

ROOT = Path(__file__).resolve().parent.parent
def produce(topic: str, records: int, seed: int) -> None:
    if records:
        bootstrap = get_connection("cdcflow_kafka").kafka_config()["bootstrap.servers"]
        cdcgen.produce(bootstrap, topic, cdcgen.orders_stream(records, max(10, records // 5), seed=seed,
                                                               broken=False).events, partitions=3)


def pipeline(directory: Path, mode: str, records: int) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    name, topic = f"fc_{mode}_{records}_{tag}", f"bench.fc.{tag}"
    data = {"name": name, "source": {"topics": [topic], "kafka_conn_id": "cdcflow_kafka"},
            "window": {"max_records": 100_000, "max_duration": "120s", "stop_on_empty": True},
            "initial_offsets": "earliest", "spark": {"mode": mode},
            "sinks": [{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": f"fc_{tag}",
                       "create_table": True, "primary_key": ["id"],
                       "columns": [{"name": "id", "type": "BIGINT"}, {"name": "customer", "type": "VARCHAR(32)"},
                                   {"name": "status", "type": "VARCHAR(16)"},
                                   {"name": "amount", "type": "DECIMAL(10,2)"},
                                   {"name": "updated_at", "type": "BIGINT", "field": "updated_ms"}]}],
            "errors": {"tolerance": "all", "dlq_topic": f"{topic}.dlq"}}
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(data))
    bootstrap = get_connection("cdcflow_kafka").kafka_config()["bootstrap.servers"]
    cdcgen.produce(bootstrap, topic, [], partitions=3)
    return name, topic


def run_once(directory: Path, name: str, run_id: str, step: str = "all", fork: bool = False) -> dict[str, float]:
    """One window step in a fresh process: a new interpreter, or (``fork``) a process forked from one
    that preloaded the task modules, as the PreloadingLocalExecutor runs Airflow tasks."""
    env = {**os.environ, "CDCFLOW_CONFIG_DIR": str(directory)}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "bench.window_once", *(["--fork"] if fork else []), name, run_id,
                          step], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"window failed:\n{out.stderr[-3000:]}")
    lines = [json.loads(line) for line in out.stdout.strip().splitlines() if line.startswith("{")]
    child = next(x for x in lines if "records" in x)
    if fork:
        wall = next(x for x in lines if "forked_wall" in x)["forked_wall"]
    return {"wall": wall, "inside": child["inside"], "records": child["records"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        os.environ["CDCFLOW_OFFSET_STORE_URL"] = f"sqlite:///{d / 'offsets.db'}"
        for mode in ("connect", "connect, forked from a preloaded worker", "inprocess"):
            fork = "forked" in mode
            spark_mode = mode.split(",")[0]
            for records in (0, 1000):
                # one pipeline, one window after another, each in a fresh process (as a scheduled DAG runs):
                # the first window is the cold one, the median is over the following ones
                name, topic = pipeline(d, spark_mode, records)
                walls = []
                for r in range(args.rounds + 1):
                    produce(topic, records, seed=r)
                    res = run_once(d, name, f"fc-{r}", fork=fork)
                    assert res["records"] == records, res
                    walls.append(res["wall"])
                warm = walls[1:]
                rows.append({"mode": mode, "records": records, "first_s": round(walls[0], 2),
                             "median_s": round(statistics.median(warm), 2), "runs_s": [round(w, 2) for w in warm]})
                print(f"{mode:40} {records:>6} records: first {walls[0]:6.2f} s, then median "
                      f"{statistics.median(warm):6.2f} s  (runs {', '.join(f'{w:.2f}' for w in warm)})", flush=True)
                if spark_mode == "connect" and records:
                    # as the DAG runs it: plan_window, process_window and commit_offsets, each its own process
                    per_step: dict[str, list[float]] = {"plan": [], "process": [], "commit": []}
                    for r in range(args.rounds):
                        produce(topic, records, seed=100 + r)
                        for step in per_step:
                            res = run_once(d, name, f"fc-steps-{r}", step, fork=fork)
                            per_step[step].append(res["wall"])
                    steps = {k: round(statistics.median(v), 2) for k, v in per_step.items()}
                    rows.append({"mode": f"{mode}, three task processes", "records": records, "steps_s": steps,
                                 "median_s": round(sum(steps.values()), 2)})
                    print(f"{'':40} {'':>6}          as three task processes (medians): "
                          + ", ".join(f"{k} {v:.2f} s" for k, v in steps.items()), flush=True)
    by = {(r["mode"], r["records"]): r["median_s"] for r in rows}
    ratio = round(by[("inprocess", 1000)] / by[("connect", 1000)], 2)
    forked_key = ("connect, forked from a preloaded worker", 1000)
    print(f"1,000-record window in a fresh process: connect {by[('connect', 1000)]} s (forked from a preloaded "
          f"worker {by[forked_key]} s) vs inprocess {by[('inprocess', 1000)]} s ({ratio}x)")
    out = ROOT / "bench" / "results" / f"{time.strftime('%Y%m%dT%H%M%S')}-fixed-cost.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "ratio_inprocess_over_connect_1000": ratio,
                               "cores": os.cpu_count()}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
