"""Soak: many windows against one long-lived Spark; does its memory stay flat, and its windows fast?

    scripts/bench.sh --soak      (or: python -m bench.soak [--windows 1000] [--pipelines 50] [--spread 200]
                                  [--records 500] [--kill-every 25] [--sample-every 100] [--own-sessions])

1. ``--windows`` windows of one pipeline, each over ``--records`` new change events;
2. then ``--spread`` windows spread over ``--pipelines`` pipelines, as a day of a busy deployment.

Every ``--kill-every``-th window runs as ``cdcflow run`` in a fresh process killed at a fault point
(after the read, between sink batches: a Python worker on the server dies, after the sinks), and is
then run again under the same run id, as Airflow's retry would. Every ``--sample-every`` windows it
records the server's heap after a full GC (``jcmd GC.run``, ``GC.heap_info``), the RSS of the server
JVM and of its Python workers, their count, and the median window time. Prints a table and writes
bench/results/<time>-soak.json. Needs the services (scripts/services.sh start).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.meter import descendants
from cdcflow import cdcgen, runner
from cdcflow.config import PipelineConfig, load_pipeline
from tests.helpers import bootstrap, unique, write_pipeline

ROOT = Path(__file__).resolve().parent.parent
KILL_POINTS = ("after_read", "between_sink_batches", "after_sinks")


def server_pid() -> int | None:
    home = Path(os.environ.get("CDCFLOW_HOME", ROOT / ".local"))
    try:
        return int((home / "services" / "spark" / "connect.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def sample() -> dict[str, Any]:
    pid = server_pid()
    if pid is None:
        return {"error": "no server PID"}
    heap = None
    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=120, check=True)
        info = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60,
                              check=False).stdout
        used = re.search(r"used (\d+)K", info)
        heap = round(int(used.group(1)) / 1024, 1) if used else None
    except (OSError, subprocess.SubprocessError):
        pass
    workers = [p for p in descendants(pid)[1:] if "pyspark" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
    return {"server_pid": pid, "heap_after_gc_mib": heap, "server_rss_mib": round(_rss_mib(pid), 1),
            "python_workers": len(workers), "python_workers_rss_mib": round(sum(_rss_mib(p) for p in workers), 1)}


class Soak:
    def __init__(self, directory: Path, records: int, kill_every: int, own_sessions: bool = False) -> None:
        self.directory, self.records, self.kill_every = directory, records, kill_every
        self.own_sessions = own_sessions
        self.count = 0
        self.seconds: list[float] = []
        self.killed = 0

    def pipeline(self) -> PipelineConfig:
        tag = unique("soak")
        # --own-sessions: a spark.conf per pipeline gives each its own server-side session (as every
        # pipeline had before the shared one: spark_jobs/session.session_name), for comparison
        own = {"spark": {"conf": {"spark.sql.shuffle.partitions": "4"}}} if self.own_sessions else {}
        return load_pipeline(write_pipeline(self.directory, tag, f"t.{tag}", tag, **own))

    def window(self, cfg: PipelineConfig) -> None:
        self.count += 1
        stream = cdcgen.orders_stream(self.records, max(1, self.records // 4), seed=self.count, broken=False,
                                      start_ts=1_767_225_600_000 + self.count * 10_000_000)
        cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events, create=False)
        run_id = f"soak-{self.count}"
        if self.kill_every and self.count % self.kill_every == 0:
            point = KILL_POINTS[(self.count // self.kill_every) % len(KILL_POINTS)]
            env = {**os.environ, "CDCFLOW_FAULTS": point, "CDCFLOW_CONFIG_DIR": str(self.directory)}
            subprocess.run([sys.executable, "-m", "cdcflow.cli", "run", cfg.name, "--run-id", run_id], env=env,
                           cwd=ROOT, capture_output=True, timeout=600, check=False)
            self.killed += 1
        started = time.perf_counter()
        stats = runner.run_window(cfg, run_id)
        self.seconds.append(time.perf_counter() - started)
        if stats.get("dead_lettered"):
            raise AssertionError(f"window {run_id} dead-lettered records: {stats}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=1000, help="windows of one pipeline")
    parser.add_argument("--pipelines", type=int, default=50)
    parser.add_argument("--spread", type=int, default=200, help="windows spread over --pipelines pipelines")
    parser.add_argument("--records", type=int, default=500, help="change events per window")
    parser.add_argument("--kill-every", type=int, default=25, help="every Nth window is first killed (0: none)")
    parser.add_argument("--sample-every", type=int, default=100)
    parser.add_argument("--warm-up", type=int, default=10)
    parser.add_argument("--own-sessions", action="store_true",
                        help="a server-side session per pipeline (the design before the shared one), to compare")
    args = parser.parse_args(argv)
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CDCFLOW_CONFIG_DIR"] = tmp
        os.environ.setdefault("CDCFLOW_OFFSET_STORE_URL", f"sqlite:///{tmp}/offsets.db")
        soak = Soak(Path(tmp), args.records, args.kill_every, args.own_sessions)

        def record(phase: str) -> None:
            recent = soak.seconds[-args.sample_every:]
            row = {"phase": phase, "windows": soak.count, "killed": soak.killed, **sample(),
                   "median_window_s": round(statistics.median(recent), 3) if recent else None,
                   "max_window_s": round(max(recent), 3) if recent else None}
            samples.append(row)
            print(json.dumps(row), flush=True)

        one = soak.pipeline()
        cdcgen.produce(bootstrap(), one.source.topics[0], [], partitions=3)
        for _ in range(args.warm_up):
            soak.window(one)
        record("warm")
        for i in range(1, args.windows + 1):
            soak.window(one)
            if i % args.sample_every == 0 or i == args.windows:
                record("one pipeline")
        many = [soak.pipeline() for _ in range(args.pipelines)]
        for cfg in many:
            cdcgen.produce(bootstrap(), cfg.source.topics[0], [], partitions=3)
        for i in range(1, args.spread + 1):
            soak.window(many[(i - 1) % len(many)])
            if i % args.sample_every == 0 or i == args.spread:
                record(f"{args.pipelines} pipelines")
        first, last = soak.seconds[args.warm_up:args.warm_up + 100], soak.seconds[-100:]
    summary = {"first_100_median_s": round(statistics.median(first), 3),
               "last_100_median_s": round(statistics.median(last), 3),
               "last_vs_first": round(statistics.median(last) / statistics.median(first), 3),
               "windows": soak.count, "killed_then_retried": soak.killed}
    print(f"{'phase':>14} {'windows':>8} {'heap MiB':>9} {'JVM RSS':>8} {'workers':>8} {'workers RSS':>12} "
          f"{'median s':>9}")
    for s in samples:
        print(f"{s['phase']:>14} {s['windows']:>8} {s.get('heap_after_gc_mib')!s:>9} {s.get('server_rss_mib')!s:>8} "
              f"{s.get('python_workers')!s:>8} {s.get('python_workers_rss_mib')!s:>12} {s['median_window_s']!s:>9}")
    print(json.dumps(summary))
    out = ROOT / "bench" / "results" / f"{time.strftime('%Y%m%dT%H%M%S')}-soak.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": "python -m bench.soak " + " ".join(argv or sys.argv[1:]),
                               "summary": summary, "samples": samples}, indent=2))
    print(f"written {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # see bench/wide.py: the pipelines' Spark Connect sessions would hang the exit
