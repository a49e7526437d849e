"""tests/faults/windows.py, the fault campaign's window runners: how a failed Airflow try is read from its
task log (JSON lines), how an attempt is told in a line of the campaign's output, and how a DAG run's
tries become the attempts of a window (against a scripted api-server)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from connectors import faults
from tests.airflow_server import Response
from tests.faults import windows
from tests.faults.windows import Attempt, _attempt, task_error


def _log(*events: dict[str, object]) -> str:
    return "\n".join(["not json: a line the supervisor printed", *(json.dumps(e) for e in events)]) + "\n"


def test_a_task_process_killed_by_a_signal_says_which() -> None:
    log = _log({"event": "cdcflow: read 412 records", "level": "info"},
               {"event": "Process terminated by signal. Likely out of memory error (OOM).", "level": "critical",
                "signal": -9, "signal_name": "SIGKILL", "logger": "task"})
    assert task_error(log) == "task process killed by SIGKILL"


def test_a_failed_try_names_the_exception_it_raised_not_its_cause() -> None:
    log = _log({"event": "Task failed with exception", "level": "error", "error_detail": [
        {"exc_type": "SinkUnavailable", "exc_value": "sink 'rows': MySQL at … failed", "frames": []},
        {"exc_type": "OperationalError", "exc_value": "(2003) Can't connect", "frames": []}]})
    assert task_error(log) == "SinkUnavailable: sink 'rows': MySQL at … failed"


def test_without_an_exception_the_last_error_line_else_a_plain_failure() -> None:
    assert task_error(_log({"event": "first", "level": "error"}, {"event": "last", "level": "error"},
                           {"event": "fine", "level": "info"})) == "last"
    assert task_error("") == "failed (no error in its log)"


def test_an_attempt_in_a_line() -> None:
    ok = Attempt("w3", True, stats={"records": 412, "sinks": {"rows": {"upserted": 300, "deleted": 12, "stale": 0,
                                                                     "failed": 1}}},
                 where="process_window #2 worker2")
    assert ok.line() == "w3 (process_window #2 worker2): 412 records, rows +300 -12 stale 0 failed 1"
    assert ok.records == 412
    failed = Attempt("w3", False, error="task process killed by SIGKILL", where="process_window try 1 on worker1@h")
    assert failed.line() == "w3 (process_window try 1 on worker1@h): task process killed by SIGKILL"
    assert failed.records == 0


def test_a_forked_run_becomes_an_attempt() -> None:
    done = subprocess.CompletedProcess(["cdcflow"], 0, 'log line\n{"records": 5, "sinks": {}}', "")
    assert _attempt("w1", done) == Attempt("w1", True, stats={"records": 5, "sinks": {}})
    killed = subprocess.CompletedProcess(["cdcflow"], -9, "", "")
    assert _attempt("w1", killed) == Attempt("w1", False, error="exit -9")
    failed = subprocess.CompletedProcess(["cdcflow"], 1, "", "noise\ncdcflow: sink 'rows' unavailable\n")
    assert _attempt("w1", failed) == Attempt("w1", False, error="cdcflow: sink 'rows' unavailable", where="exit 1")


class _Scripted:
    """A stand-in for the Celery stack's api-server: each GET answers from the current step of a script."""

    def __init__(self, home: Path, steps: list[dict[str, Any]]) -> None:
        self.env = {"AIRFLOW_HOME": str(home)}
        self.steps, self.asked = steps, 0

    def request(self, method: str, path: str, body: Any = None) -> Any:
        step = self.steps[min(self.asked // 4, len(self.steps) - 1)]  # _next asks the run and three tasks' tries
        self.asked += 1
        if path.endswith("/tries"):
            tries = [t for t in step["tries"] if path.endswith(f"/{t['task_id']}/tries")]
            return Response(200 if tries else 404, {"task_instances": tries}, "")
        return Response(200, {"state": step["run"]}, "")

    def xcom(self, dag_id: str, run_id: str, task: str = "process_window") -> Any:
        return {"records": 7, "sinks": {}}

    def log_tail(self) -> str:
        return ""


def _try(task: str, n: int, state: str, worker: str, start: str) -> dict[str, Any]:
    return {"task_id": task, "try_number": n, "state": state, "hostname": f"{worker}@h", "start_date": start}


def test_a_dag_runs_first_attempt_ends_at_its_failed_try_which_disarms_the_fault_and_the_retry_follows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(windows, "POLL", 0)
    plan = _try("plan_window", 1, "success", "worker2", "1")
    steps = [{"run": "running", "tries": [plan, _try("process_window", 1, "running", "worker1", "2")]},
             {"run": "running", "tries": [plan, _try("process_window", 1, "up_for_retry", "worker1", "2")]},
             {"run": "running", "tries": [plan, _try("process_window", 1, "up_for_retry", "worker1", "2"),
                                          _try("process_window", 2, "running", "worker2", "3")]},
             {"run": "success", "tries": [plan, _try("process_window", 1, "up_for_retry", "worker1", "2"),
                                          _try("process_window", 2, "success", "worker2", "3"),
                                          _try("commit_offsets", 1, "success", "worker1", "4")]}]
    log = tmp_path / "logs" / "dag_id=p" / "run_id=w1" / "task_id=process_window" / "attempt=1.log"
    log.parent.mkdir(parents=True)
    log.write_text(json.dumps({"event": "Process terminated by signal.", "signal_name": "SIGKILL"}) + "\n")
    armed = tmp_path / "faults"
    faults.write_file(armed, ["after_read"])
    runner = SimpleNamespace(server=_Scripted(tmp_path, steps), pipeline="p",
                             disarm=lambda: faults.write_file(armed))
    window = windows.DagRunWindow(runner, "w1")  # type: ignore[arg-type]

    first = window.first()
    assert first == Attempt("w1", False, error="task process killed by SIGKILL",
                            where="process_window try 1 on worker1@h")
    assert faults.read_file(armed) == ()  # disarmed before the retry
    assert window.first() is first and window.ended()
    retried = window.retry()
    assert (retried.ok, retried.records) == (True, 7)
    assert retried.where == "plan_window #1 worker2, process_window #2 worker2, commit_offsets #1 worker1"
