"""Latency from produce to rows in MySQL: ``schedule: on_data`` against a one-minute cron.

    scripts/bench.sh --latency [--samples 5]      (or: python -m bench.latency)

Starts its own Airflow (api-server, scheduler, dag-processor, triggerer; tests/airflow_server.py) on
the running services, with two pipelines on two fresh topics: one ``schedule: on_data``
(min_records 1, max_wait 5s, poll_interval 1s), one ``schedule: "* * * * *"``. For each sample:
produce 20 change events at a random moment, then poll the MySQL table every 0.2 s until the
events' last state is there; the latency is from the produce's acknowledgement to that moment.
Prints the figures and writes bench/results/<time>-latency.json. Needs scripts/services.sh start.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cdcflow import cdcgen
from cdcflow.config import load_pipeline
from tests.airflow_server import make_server
from tests.helpers import bootstrap, expected, table_rows, unique, write_pipeline

ROOT = Path(__file__).resolve().parent.parent
EVENTS_PER_SAMPLE = 20


def _wait_for_dag(server: Any, dag_id: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while server.request("GET", f"/api/v2/dags/{dag_id}").status != 200:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the dag-processor did not load {dag_id}\n{server.log_tail()}")
        time.sleep(1)


def _wait_for_rows(server: Any, table: str, want: list[Any], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if table_rows(table) == want:
                return
        except Exception:  # noqa: BLE001 - the table does not exist before the first window
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not applied within {timeout:.0f} s\n{server.log_tail()}")
        time.sleep(0.2)


def _samples(server: Any, schedule: str, samples: int, seed: int) -> list[float]:
    tag = unique("lat")
    overrides: dict[str, Any] = {"schedule": schedule}
    if schedule == "on_data":
        overrides["on_data"] = {"min_records": 1, "max_wait": "5s", "poll_interval": "1s"}
    cfg = load_pipeline(write_pipeline(server.config_dir, tag, f"t.{tag}", tag, **overrides))
    topic, table = cfg.source.topics[0], cfg.sinks[0].table
    keys = 10 * samples

    def prefix(n: int) -> cdcgen.Stream:  # the same seed and keys: a longer stream extends a shorter one
        return cdcgen.orders_stream(n, keys, seed=seed, broken=False)

    # the topic exists before the DAG runs (its first events), so the first window is not a sample
    produced = len(first := prefix(8).events)
    cdcgen.produce(bootstrap(), topic, first)
    _wait_for_dag(server, cfg.name)
    server.request("PATCH", f"/api/v2/dags/{cfg.name}", {"is_paused": False})
    _wait_for_rows(server, table, expected(prefix(8).state), "the first window", 180)
    rng = random.Random(seed)
    latencies = []
    for i in range(samples):
        time.sleep(rng.uniform(5, 65))  # a random moment of the cron's minute
        stream = prefix(produced + EVENTS_PER_SAMPLE)
        batch, produced = stream.events[produced:], len(stream.events)
        want = expected(stream.state)
        cdcgen.produce(bootstrap(), topic, batch, create=False)
        sent = time.monotonic()
        _wait_for_rows(server, table, want, f"{schedule}: sample {i}", 300)
        latencies.append(round(time.monotonic() - sent, 2))
        print(f"  {schedule:12} sample {i + 1}/{samples}: {latencies[-1]:.1f} s", flush=True)
    server.request("PATCH", f"/api/v2/dags/{cfg.name}", {"is_paused": True})
    return latencies


def _interrupted(*_args: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--seed", type=int, default=26)
    args = parser.parse_args(argv)
    # a SIGTERM (a killed benchmark) unwinds like Ctrl-C, so the Airflow it started is stopped too
    signal.signal(signal.SIGTERM, _interrupted)
    with tempfile.TemporaryDirectory(prefix="cdcflow-latency-") as tmp:
        server = make_server(Path(tmp))
        server.env["AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC"] = "2"
        server.env["AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL"] = "5"
        try:
            server.start()
            server.start_scheduler(triggerer=True)
            results = {schedule: _samples(server, schedule, args.samples, args.seed)
                       for schedule in ("on_data", "* * * * *")}
        finally:
            server.stop()
    print(f"\nproduce -> rows in MySQL, {args.samples} samples of {EVENTS_PER_SAMPLE} events each")
    print(f"{'schedule':14} {'median s':>9} {'min s':>7} {'max s':>7}")
    for schedule, values in results.items():
        print(f"{schedule:14} {statistics.median(values):>9.1f} {min(values):>7.1f} {max(values):>7.1f}")
    ratio = statistics.median(results["* * * * *"]) / statistics.median(results["on_data"])
    print(f"cron median / on_data median: {ratio:.1f}x")
    out = ROOT / "bench" / "results" / f"{time.strftime('%Y%m%dT%H%M%S')}-latency.json"
    out.write_text(json.dumps({"command": "python -m bench.latency " + " ".join(argv or sys.argv[1:]),
                               "events_per_sample": EVENTS_PER_SAMPLE, "latency_s": results}, indent=2))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
