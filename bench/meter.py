"""Memory and CPU of the benchmark's processes, the same way for every measured path.

:class:`PeakRss` samples, every 0.2 s, the RSS and the CPU ticks (/proc/<pid>/stat) of this process
tree (the harness: driver, in-process Spark JVM, Python workers, subprocesses such as the provider's
``airflow dags test``) and of the services (Kafka, MariaDB, Elasticsearch). Memory is the peak over
the run. CPU is counted over an interval that the path names: the one its rate is measured over
(cdcflow: its first window's start to its last window's end, the Spark session already started; the
provider: its first batch to its last, Airflow's start-up left out; a raw loop: the loop). So the
same process boundaries and no start-up are counted for every path; each process's ticks are
interpolated between the samples around the interval's ends.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

ROOT = Path(__file__).resolve().parent.parent
HARNESS = "harness (driver, Spark, workers, subprocesses)"
HARNESS_TOTAL = "harness: total"


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(root: int) -> list[int]:
    """``root`` and every process under it (also bench/soak.py and tests/integration/spark_jobs/test_health.py)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def service_pids() -> dict[str, int]:
    out = {}
    for name, rel in (("kafka", "kafka.pid"), ("mysql", "mysql.pid"), ("elasticsearch", "elasticsearch/es.pid")):
        path = Path(os.environ.get("CDCFLOW_HOME", ROOT / ".local")) / "services" / rel
        if path.exists():
            out[name] = int(path.read_text().strip())
    return out


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, ValueError, IndexError):
        return -1


def _role(pid: int) -> str:
    """Which part of the harness a process is, for the CPU split."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ")
    except OSError:
        return "harness: other"
    if b"java" in cmd.split(b" ")[0]:
        return "harness: Spark JVM"
    if b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd:
        return "harness: Spark Python workers"
    return "harness: driver and subprocesses" if pid != os.getpid() else "harness: driver"


class PeakRss:
    """Peak RSS of the harness and the services, by group, and their CPU seconds over an interval
    (a process that exits between two samples loses at most 0.2 s of its CPU time)."""

    def __init__(self) -> None:
        self.peak: dict[str, int] = {}
        self._series: dict[int, tuple[str, list[float], list[int]]] = {}  # pid -> (group, times, ticks)
        self._last_sample = 0.0
        self._first_sample = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, first: bool = False) -> None:
        now = time.time()
        trees = {HARNESS: descendants(os.getpid())}
        trees.update({name: descendants(pid) for name, pid in service_pids().items()})
        groups = {name: sum(_rss_kb(p) for p in pids) for name, pids in trees.items()}
        groups["total"] = sum(groups.values())
        for pid in trees[HARNESS]:  # the harness's own peak by role, for where memory goes
            role = f"{_role(pid)} (peak of its own)"
            groups[role] = groups.get(role, 0) + _rss_kb(pid)
        for k, v in groups.items():
            self.peak[k] = max(self.peak.get(k, 0), v)
        for name, pids in trees.items():
            for pid in pids:
                ticks = _cpu_ticks(pid)
                if ticks < 0:
                    continue
                series = self._series.get(pid)
                if series is None:
                    series = (_role(pid) if name == HARNESS else name, [], [])
                    if not first:  # started since the last sample, with no CPU time then
                        series[1].append(self._last_sample)
                        series[2].append(0)
                    self._series[pid] = series
                series[1].append(now)
                series[2].append(ticks)
        if first:
            self._first_sample = now
        self._last_sample = now

    @staticmethod
    def _ticks_at(times: list[float], ticks: list[int], t: float) -> float:
        i = bisect.bisect_left(times, t)
        if i == 0:
            return ticks[0]
        if i == len(times):
            return ticks[-1]
        t0, t1 = times[i - 1], times[i]
        return ticks[i - 1] + (ticks[i] - ticks[i - 1]) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)

    def cpu(self, start: float | None = None, end: float | None = None) -> dict[str, float]:
        """CPU seconds per group from ``start`` to ``end`` (time.time(); default: the whole run), the
        harness's total, the interval's seconds and the cores they amount to."""
        start = self._first_sample if start is None else start
        end = self._last_sample if end is None else end
        hz = os.sysconf("SC_CLK_TCK")
        used: dict[str, float] = {}
        for group, times, ticks in self._series.values():
            spent = (self._ticks_at(times, ticks, end) - self._ticks_at(times, ticks, start)) / hz
            used[group] = used.get(group, 0.0) + spent
        out = {k: round(v, 2) for k, v in sorted(used.items())}
        out[HARNESS_TOTAL] = round(sum(v for k, v in used.items() if k.startswith("harness")), 2)
        seconds = max(end - start, 1e-9)
        out["wall"] = round(seconds, 2)
        out["cores busy"] = round(sum(used.values()) / seconds, 2)
        return out

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def __enter__(self) -> Self:
        self._sample(first=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def mib(self) -> dict[str, float]:
        return {k: round(v / 1024, 1) for k, v in self.peak.items()}


@contextmanager
def timed() -> Iterator[dict[str, float]]:
    """Seconds of the block (``seconds``) and its ends on the wall clock (``start``, ``end``), which
    :meth:`PeakRss.cpu` takes."""
    box: dict[str, float] = {"start": time.time()}
    began = time.perf_counter()
    yield box
    box["seconds"] = time.perf_counter() - began
    box["end"] = time.time()
