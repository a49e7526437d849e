"""How the fault campaign runs its windows (tests/faults/harness.py), behind one small interface:

* ``ForkedWindows``: each window is ``cdcflow run <pipeline> --run-id X``, forked from a preloaded
  process (tests/faults/forkserver.py), the fault in its ``CDCFLOW_FAULTS``; a failed window is
  retried by the harness with the same run id, as Airflow would.
* ``AirflowWindows``: each window is a DAG run on the Celery stack (tests/airflow_server.py::
  make_celery_server: PostgreSQL, Redis, the scheduler and two Celery workers), triggered through
  the REST API with the run id. The workers' environment is fixed when they start, so the fault
  goes through the file ``CDCFLOW_FAULTS_FILE`` names (connectors/faults.py): written before the
  run is triggered, emptied as soon as the faulted try has ended, before Airflow's retry (the
  pipeline's ``retry_delay``) starts. The faulted try dies on one worker (its task process
  SIGKILLed at the point, or failed by an outage) and Airflow retries it, on either worker.

Both give, per window run (``start``), a ``Window``: ``ended()`` (has the first attempt ended?),
``first()`` (that attempt, waited for) and ``retry()`` (the next attempt of the same run id, waited
for), each an ``Attempt``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from connectors import faults
from tests.airflow_server import make_celery_server
from tests.faults.forkserver import ForkedRun, ForkServer

ROOT = Path(__file__).resolve().parents[2]
TASKS = ("plan_window", "process_window", "commit_offsets")
FAILED = ("failed", "up_for_retry")  # a try that ended without success (up_for_retry: a retry follows)
POLL = 1.0  # s between two looks at a DAG run through the REST API


@dataclass
class Attempt:
    """One attempt of a window run: a ``cdcflow run`` process, or an Airflow task try and the tries
    that succeeded before it."""

    run_id: str
    ok: bool
    stats: dict[str, Any] | None = None  # the window's statistics, when it succeeded
    error: str = ""  # how it failed: cdcflow's last error line, the signal, the exception
    where: str = ""  # Airflow: the task's try and the worker it ran on

    @property
    def records(self) -> int:
        return int((self.stats or {}).get("records", 0))

    def line(self) -> str:
        """The attempt in a line: how it ended, records, and per sink what it did (or the error)."""
        at = f" ({self.where})" if self.where else ""
        if not self.ok:
            return f"{self.run_id}{at}: {self.error[:200]}"
        stats = self.stats or {}
        sinks = ", ".join(f"{n} +{s.get('upserted')} -{s.get('deleted')} stale {s.get('stale')} "
                          f"failed {s.get('failed')}" for n, s in stats.get("sinks", {}).items())
        return f"{self.run_id}{at}: {stats.get('records')} records, {sinks}"


class Window(Protocol):
    def ended(self) -> bool: ...

    def first(self, timeout: float = 600) -> Attempt: ...

    def retry(self) -> Attempt: ...


class Windows(Protocol):
    store_url: str  # the pipeline's state store (offsets, ledger), for the campaign's ledger check
    settings: dict[str, Any]  # the pipeline's DAG settings (retries)

    def open(self, pipeline: str) -> None: ...

    def start(self, run_id: str, fault: str | None = None) -> Window: ...

    def close(self) -> None: ...


# -- forked `cdcflow run` ----------------------------------------------------------------------------
def error_line(done: subprocess.CompletedProcess[str]) -> str:
    """How a failed window run ended: cdcflow's last error line, else the end of its stderr (a
    traceback), else its exit status (a SIGKILL leaves no stderr)."""
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("cdcflow: ")]
    return lines[-1] if lines else done.stderr[-200:].strip() or f"exit {done.returncode}"


def _attempt(run_id: str, done: subprocess.CompletedProcess[str]) -> Attempt:
    if done.returncode != 0:
        error = error_line(done)
        return Attempt(run_id, False, error=error, where="" if error.startswith("exit") else f"exit {done.returncode}")
    return Attempt(run_id, True, stats=json.loads(done.stdout[done.stdout.index("{"):]))


class ForkedWindows:
    """Each window a ``cdcflow run`` forked from a preloaded process; its state store SQLite."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.settings: dict[str, Any] = {"retries": 0}  # the harness retries, not Airflow
        self.store_url = f"sqlite:///{directory / 'offsets.db'}"
        self.env = {**os.environ, "CDCFLOW_CONFIG_DIR": str(directory / "pipelines"),
                    "CDCFLOW_OFFSET_STORE_URL": self.store_url}
        for name in ("CDCFLOW_FAULTS", "CDCFLOW_FAULTS_FILE"):
            self.env.pop(name, None)
        self.pipeline = ""
        self.forks: ForkServer | None = None

    def open(self, pipeline: str) -> None:
        self.pipeline = pipeline
        self.forks = ForkServer(self.dir / "forkserver.log", self.env, ROOT)  # windows forked preloaded

    def start(self, run_id: str, fault: str | None = None) -> ForkedWindow:
        return ForkedWindow(self, run_id, self.fork(run_id, fault))

    def fork(self, run_id: str, fault: str | None) -> ForkedRun:
        assert self.forks is not None, "open() first"
        env = {**self.env, **({"CDCFLOW_FAULTS": fault} if fault else {})}
        return self.forks.start(["run", self.pipeline, "--run-id", run_id], env, ROOT)

    def close(self) -> None:
        if self.forks is not None:
            self.forks.close()


class ForkedWindow:
    def __init__(self, windows: ForkedWindows, run_id: str, proc: ForkedRun) -> None:
        self.windows, self.run_id, self.proc = windows, run_id, proc
        self._first: Attempt | None = None

    def ended(self) -> bool:
        return self.proc.poll() is not None

    def first(self, timeout: float = 600) -> Attempt:
        if self._first is None:
            self._first = _attempt(self.run_id, self.proc.completed(timeout))
        return self._first

    def retry(self) -> Attempt:
        """The window again with the same run id, without the fault (as Airflow retries a task)."""
        return _attempt(self.run_id, self.windows.fork(self.run_id, None).completed(timeout=600))


# -- DAG runs on the Celery stack -------------------------------------------------------------------
def task_error(log: str) -> str:
    """How an Airflow task try ended, from its log (JSON lines): the signal that killed the task
    process, else the exception it failed with, else its last error line."""
    events = []
    for line in log.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    for event in events:
        if event.get("signal_name"):
            return f"task process killed by {event['signal_name']}"
    for event in reversed(events):
        for detail in event.get("error_detail") or []:  # the exception raised first, then its causes
            if isinstance(detail, dict) and detail.get("exc_type"):
                return f"{detail['exc_type']}: {str(detail.get('exc_value', ''))[:300]}"
    errors = [e for e in events if str(e.get("level", "")).lower() in ("error", "critical")]
    return str(errors[-1].get("event", ""))[:300] if errors else "failed (no error in its log)"


class AirflowWindows:
    """Each window a DAG run on a Celery stack of its own (its CDCFLOW_HOME, ports, PostgreSQL with the
    state store), with Kafka, MariaDB, Elasticsearch and the long-lived Spark shared as usual."""

    def __init__(self, directory: Path) -> None:
        # Airflow retries the faulted try itself; the delay leaves the harness time to empty the faults
        # file, and a server taken away time to come back (doubled per try: 8-16 s, 16-32 s, 32-64 s)
        self.settings: dict[str, Any] = {"schedule": None, "retries": 3, "retry_delay": "8s"}
        self.server = make_celery_server(directory)
        self.store_url = self.server.store_url
        self.faults = directory / "faults"
        faults.write_file(self.faults)
        self.server.env.pop("CDCFLOW_FAULTS", None)
        self.server.env.update({
            "CDCFLOW_FAULTS_FILE": str(self.faults),  # read by every task process of both workers
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2", "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2"})
        self.pipeline = ""
        self.current: DagRunWindow | None = None
        self.started = False

    def open(self, pipeline: str) -> None:
        """Start the stack (the pipeline file is written: the dag-processor parses it at once)."""
        self.pipeline = pipeline
        self.started = True
        self.server.start()
        self.server.unpause(pipeline)

    def start(self, run_id: str, fault: str | None = None) -> DagRunWindow:
        if self.current is not None:  # one run at a time (as max_active_runs): a failed drain's retries end first
            self.current.wait_for_end()
        faults.write_file(self.faults, [fault] if fault else [])
        self.server.trigger(self.pipeline, run_id)
        self.current = DagRunWindow(self, run_id)
        return self.current

    def disarm(self) -> None:
        faults.write_file(self.faults)

    def close(self) -> None:
        try:
            if self.started:
                self.server.stop()
        finally:
            shutil.rmtree(self.server.env["CDCFLOW_HOME"], ignore_errors=True)


class DagRunWindow:
    """A window's DAG run: its attempts are the task tries, read through the REST API. The first attempt
    ends when a try fails or the run ends; each retry() ends at the next failed try or the run's end."""

    def __init__(self, windows: AirflowWindows, run_id: str) -> None:
        self.windows, self.server, self.run_id = windows, windows.server, run_id
        self.dag = windows.pipeline
        self.reported: set[tuple[str, int]] = set()  # failed tries already returned as attempts
        self._first: Attempt | None = None
        self._asked = 0.0  # when ended() last asked the api-server

    def _run(self) -> dict[str, Any]:
        return self.server.request("GET", f"/api/v2/dags/{self.dag}/dagRuns/{self.run_id}").body

    def _tries(self) -> list[dict[str, Any]]:
        """Every try of the run's tasks so far (ended and current), in the order they started."""
        tries = []
        for task in TASKS:
            r = self.server.request("GET", f"/api/v2/dags/{self.dag}/dagRuns/{self.run_id}/taskInstances/{task}/tries")
            if r.status == 200:
                tries += r.body["task_instances"]
        return sorted(tries, key=lambda t: (t.get("start_date") or "9", t["try_number"]))

    def _next(self, timeout: float) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """Wait for a failed try not reported yet (returned with the run), or the run's end (None)."""
        deadline = time.monotonic() + timeout
        while True:
            run = self._run()
            failed = [t for t in self._tries() if t["state"] in FAILED
                      and (t["task_id"], t["try_number"]) not in self.reported]
            if failed:
                self.reported.add((failed[0]["task_id"], failed[0]["try_number"]))
                return failed[0], run
            if run["state"] in ("success", "failed"):
                return None, run
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {self.run_id}: no try ended in {timeout:.0f}s ({run['state']})\n"
                                   f"{self.server.log_tail()}")
            time.sleep(POLL)

    def _attempt(self, failed: dict[str, Any] | None, run: dict[str, Any]) -> Attempt:
        if failed is not None:
            where = f"{failed['task_id']} try {failed['try_number']} on {failed.get('hostname') or '?'}"
            return Attempt(self.run_id, False, error=task_error(self._log(failed)), where=where)
        if run["state"] != "success":
            return Attempt(self.run_id, False, error=f"the run {run['state']}, no try left")
        tries = self._tries()
        on = ", ".join(f"{t['task_id']} #{t['try_number']} {str(t.get('hostname')).split('@')[0]}"
                       for t in tries if t["state"] == "success")
        return Attempt(self.run_id, True, stats=self.server.xcom(self.dag, self.run_id), where=on)

    def _log(self, ti: dict[str, Any]) -> str:
        path = (Path(self.server.env["AIRFLOW_HOME"]) / "logs" / f"dag_id={self.dag}" / f"run_id={self.run_id}"
                / f"task_id={ti['task_id']}" / f"attempt={ti['try_number']}.log")
        deadline = time.monotonic() + 10  # the supervisor writes the end of the try after it reports it
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        return path.read_text(errors="replace") if path.exists() else ""

    def ended(self) -> bool:
        """Has the first attempt ended? One request at most every POLL seconds (a failed try is
        up_for_retry until its retry starts, seconds later)."""
        if self._first is not None or time.monotonic() - self._asked < POLL:
            return self._first is not None
        self._asked = time.monotonic()
        r = self.server.request("GET", f"/api/v2/dags/{self.dag}/dagRuns/{self.run_id}/taskInstances")
        states = {ti["state"] for ti in r.body["task_instances"]} if r.status == 200 else set()
        return bool(states & set(FAILED)) or (bool(states) and states <= {"success", "skipped", "upstream_failed"})

    def first(self, timeout: float = 600) -> Attempt:
        """The faulted attempt, waited for; then the fault is disarmed, before Airflow's retry starts."""
        if self._first is None:
            failed, run = self._next(timeout)
            self.windows.disarm()
            self._first = self._attempt(failed, run)
        return self._first

    def retry(self) -> Attempt:
        """Airflow's next try (on either worker), waited for: a failure, or the run's success."""
        return self._attempt(*self._next(600))

    def wait_for_end(self) -> None:
        self.server.wait_for_runs(self.dag, [self.run_id], timeout=600)
