"""The fixed cost of a window through a Celery worker, against the LocalExecutor: a window of 1,000
records end to end as Airflow runs it (plan_window, process_window and commit_offsets, each a task
process), triggered through the REST API until its run has succeeded.

    python -m bench.celery_fixed_cost [--runs 5] [--records 1000]

Starts, one after the other, on the running services (Kafka, MariaDB, the long-lived Spark):
* Airflow with the PreloadingLocalExecutor on SQLite, the state store in SQLite (tests/airflow_server.py
  ``make_server``, as scripts/services.sh runs it by default);
* Airflow with the CeleryExecutor, PostgreSQL, Redis and two Celery workers, the state store in
  PostgreSQL (``make_celery_server``: scripts/services.sh with CDCFLOW_AIRFLOW_EXECUTOR=celery, on
  ports of its own).
Each gets one pipeline (bench/fixed_cost.py's), a first window that is not counted (cold), then
``--runs`` windows of ``--records`` records each. Per window: the wall time from the trigger to the
run's success seen through the REST API (polled every 0.1 s), the run's own duration, the three tasks'
durations and the time between them (the executor's share: queueing, sending, picking up, starting).
Prints a table and writes bench/results/<time>-celery-fixed-cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.fixed_cost import pipeline, produce
from tests.airflow_server import AirflowServer, make_celery_server, make_server

ROOT = Path(__file__).resolve().parent.parent
TASKS = ("plan_window", "process_window", "commit_offsets")
DONE = ("success", "failed")


def _t(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _window(server: AirflowServer, name: str, topic: str, run_id: str, records: int, seed: int) -> dict[str, Any]:
    """One window of ``records`` new records, triggered and waited for; its times."""
    produce(topic, records, seed)
    t0 = time.perf_counter()
    r = server.request("POST", f"/api/v2/dags/{name}/dagRuns", {"dag_run_id": run_id, "logical_date": None})
    if r.status != 200:
        raise RuntimeError(f"trigger failed: {r.status} {r.text}")
    deadline = time.monotonic() + 300
    while (run := server.request("GET", f"/api/v2/dags/{name}/dagRuns/{run_id}").body)["state"] not in DONE:
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} still {run['state']} after 300 s\n{server.log_tail()}")
        time.sleep(0.1)
    wall = time.perf_counter() - t0
    if run["state"] != "success":
        raise RuntimeError(f"run {run_id} failed\n{server.log_tail()}")
    tis = {task: server.request("GET", f"/api/v2/dags/{name}/dagRuns/{run_id}/taskInstances/{task}").body
           for task in TASKS}
    stats = server.request("GET", f"/api/v2/dags/{name}/dagRuns/{run_id}/taskInstances/process_window/"
                                  "xcomEntries/return_value").body["value"]
    if stats["records"] != records:
        raise RuntimeError(f"run {run_id} read {stats['records']} records, not {records}")
    tasks = {task: round(_t(ti["end_date"]) - _t(ti["start_date"]), 2) for task, ti in tis.items()}
    run_s = _t(run["end_date"]) - _t(run["start_date"])
    return {"wall_s": round(wall, 2), "run_s": round(run_s, 2), "tasks_s": tasks,
            "between_tasks_s": round(run_s - sum(tasks.values()), 2),
            "hosts": sorted({ti["hostname"] for ti in tis.values()})}


def _measure(server: AirflowServer, label: str, runs: int, records: int) -> dict[str, Any]:
    name, topic = pipeline(server.config_dir, "connect", records)
    try:
        server.start()
        server.start_scheduler()
        deadline = time.monotonic() + 180
        while server.request("GET", f"/api/v2/dags/{name}").status != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the dag-processor did not load {name}\n{server.log_tail()}")
            time.sleep(1)
        server.request("PATCH", f"/api/v2/dags/{name}", {"is_paused": False})
        cold = _window(server, name, topic, "cold", records, seed=0)
        print(f"{label:12} cold window: {cold['wall_s']:.2f} s", flush=True)
        windows = []
        for i in range(runs):
            windows.append(_window(server, name, topic, f"w{i}", records, seed=i + 1))
            w = windows[-1]
            print(f"{label:12} window {i + 1}/{runs}: {w['wall_s']:.2f} s end to end, run {w['run_s']:.2f} s "
                  f"(tasks {', '.join(f'{v:.2f}' for v in w['tasks_s'].values())}; between them "
                  f"{w['between_tasks_s']:.2f}) on {', '.join(w['hosts'])}", flush=True)
    finally:
        server.stop()

    def med(key: str) -> float:
        return round(statistics.median(w[key] for w in windows), 2)

    return {"cold_s": cold["wall_s"], "windows": windows, "median_wall_s": med("wall_s"), "median_run_s": med("run_s"),
            "median_between_tasks_s": med("between_tasks_s"),
            "median_tasks_s": {t: round(statistics.median(w["tasks_s"][t] for w in windows), 2) for t in TASKS}}


def _interrupted(*_args: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--records", type=int, default=1000)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)  # a killed benchmark stops the Airflow it started
    results = {}
    with tempfile.TemporaryDirectory(prefix="cdcflow-celery-cost-") as tmp:
        local = make_server(Path(tmp) / "local")
        local.env["AIRFLOW__CORE__EXECUTOR"] = "cdcflow.airflow.executor.PreloadingLocalExecutor"  # as services.sh
        results["local"] = _measure(local, "local", args.runs, args.records)
        celery = make_celery_server(Path(tmp) / "celery")
        try:
            results["celery"] = _measure(celery, "celery", args.runs, args.records)
        finally:
            shutil.rmtree(celery.env["CDCFLOW_HOME"], ignore_errors=True)
    ratio = round(results["celery"]["median_wall_s"] / results["local"]["median_wall_s"], 2)
    print(f"\n{args.records}-record window, median of {args.runs} (after a cold one)")
    print(f"{'executor':10} {'end to end':>11} {'run':>7} {'plan':>7} {'process':>8} {'commit':>7} {'between':>8}")
    for label, r in results.items():
        t = r["median_tasks_s"]
        print(f"{label:10} {r['median_wall_s']:>10.2f}s {r['median_run_s']:>6.2f}s {t['plan_window']:>6.2f}s "
              f"{t['process_window']:>7.2f}s {t['commit_offsets']:>6.2f}s {r['median_between_tasks_s']:>7.2f}s")
    print(f"celery / local, end to end: {ratio}x (target: at most 1.2x)")
    out = ROOT / "bench" / "results" / f"{time.strftime('%Y%m%dT%H%M%S')}-celery-fixed-cost.json"
    out.write_text(json.dumps({"command": "python -m bench.celery_fixed_cost " + " ".join(argv or sys.argv[1:]),
                               "records": args.records, "runs": args.runs, "cores": os.cpu_count(),
                               "ratio_celery_over_local": ratio, **results}, indent=2))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
