"""The fault campaigns' windows, run as Airflow's PreloadingLocalExecutor runs tasks: one process
imports the task modules once (cdcflow/airflow/executor.py::preload), then forks a process per
window, which runs ``cdcflow.cli`` with its own arguments, environment and output files and ends
with ``os._exit`` (as a task process ends). A campaign runs ~150 windows; each started as
``python -m cdcflow.cli`` paid about a second of imports and interpreter teardown.

    server = ForkServer(log_path)          # started once per campaign
    run = server.start(args, env, cwd)     # a window's process: pid, poll(), wait(), communicate()

The forked process is a real process: a fault point's SIGKILL kills it alone, its exit status is
what ``subprocess`` would report (-9), and nothing of one window survives into the next. Only
modules exist before the fork: no client, connection, thread or gRPC channel.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any


class ForkedRun:
    """A window's forked process, with the parts of ``subprocess.Popen`` the harness uses."""

    def __init__(self, server: ForkServer, pid: int, out: Path, err: Path, args: list[str]) -> None:
        self.server, self.pid, self.args = server, pid, args
        self._out, self._err = out, err
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_status(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.server.exit_status(self.pid, timeout=timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        out, err = self._out.read_text(errors="replace"), self._err.read_text(errors="replace")
        self._out.unlink(missing_ok=True)
        self._err.unlink(missing_ok=True)
        return out, err

    def completed(self, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        """Wait for the end (as ``subprocess.run``: past ``timeout`` the process is killed, then raised)."""
        try:
            out, err = self.communicate(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):  # it ended at the deadline
                os.kill(self.pid, signal.SIGKILL)
            self.wait()
            raise
        assert self.returncode is not None
        return subprocess.CompletedProcess(self.args, self.returncode, out, err)


class ForkServer:
    """The preloaded process that forks the windows (``python -m tests.faults.forkserver``)."""

    def __init__(self, log: Path, env: dict[str, str], cwd: Path) -> None:
        self._log = log.open("ab")
        self._dir = Path(tempfile.mkdtemp(prefix="cdcflow-forks-"))
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.faults.forkserver"], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        self._ended: dict[int, int] = {}
        self._buffer = b""
        self._runs = itertools.count()
        self._started: list[ForkedRun] = []
        ready = self._reply(timeout=120)
        if ready.get("ready") is not True:
            raise RuntimeError(f"the fork server did not start: {ready} (its log: {log})")

    def start(self, args: list[str], env: dict[str, str], cwd: Path) -> ForkedRun:
        n = next(self._runs)
        out, err = self._dir / f"{n}.out", self._dir / f"{n}.err"
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"args": args, "env": env, "cwd": str(cwd), "stdout": str(out),
                                          "stderr": str(err)}).encode() + b"\n")
        self.proc.stdin.flush()
        reply = self._reply(timeout=60)
        while "returncode" in reply:  # an earlier window's end, not yet asked for
            self._ended[int(reply["pid"])] = int(reply["returncode"])
            reply = self._reply(timeout=60)
        if "pid" not in reply:
            raise RuntimeError(f"the fork server did not start the window {args}: {reply or 'no answer in 60s'}")
        run = ForkedRun(self, int(reply["pid"]), out, err, ["cdcflow", *args])
        self._started.append(run)
        return run

    def run(self, args: list[str], env: dict[str, str], cwd: Path,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return self.start(args, env, cwd).completed(timeout)

    def exit_status(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while pid not in self._ended:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            reply = self._reply(left)
            if not reply:
                return None
            self._ended[int(reply["pid"])] = int(reply["returncode"])
        return self._ended.pop(pid)

    def _reply(self, timeout: float | None) -> dict[str, Any]:
        """The server's next reply line; {} when none came within ``timeout``. Read unbuffered: two
        replies can arrive at once (a window killed at its first fault point)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if left is not None and not select.select([fd], [], [], left)[0]:
                return {}
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"the fork server exited ({self.proc.poll()}); its log: {self._log.name}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        """Stop the server; a window still running (a campaign that ended on an error) is killed, not
        left paused to resume later against the services."""
        for run in self._started:
            if run.returncode is None and run.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(run.pid, signal.SIGKILL)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        for f in self._dir.iterdir():
            f.unlink()
        self._dir.rmdir()


def _child(request: dict[str, Any]) -> None:
    """In the forked process: the window's environment, directory and output files; then the CLI."""
    import atexit  # noqa: PLC0415
    import logging  # noqa: PLC0415
    import traceback  # noqa: PLC0415

    code = 1
    try:
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for handler in logging.root.handlers[:]:  # the preloaded Airflow logs to stdout; the CLI logs to stderr
            logging.root.removeHandler(handler)
        from cdcflow.cli import main  # noqa: PLC0415

        code = main(request["args"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported as an uncaught exception is, exit status 1
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()  # noqa: SLF001 - as an Airflow task process ends
        os._exit(code)


def serve(requests: IO[str], replies: IO[str]) -> None:
    from cdcflow.airflow.executor import preload  # noqa: PLC0415

    preload()
    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        _pid, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        replies.flush()


if __name__ == "__main__":
    # replies on a private copy of stdout; what the modules print (Airflow's logging) goes to stderr
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    serve(sys.stdin, replies)
