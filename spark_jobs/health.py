"""Is the long-lived Spark alive? A trivial query on the server, not a port probe.

A Spark Connect server whose SparkContext stopped (out of heap, say) keeps its JVM and its port,
and answers every request with an opaque error (``SparkEnv.get() is null``). Only a query shows it.

    python -m spark_jobs.health [sc://host:port]          exit 0 when healthy, else 1 and why
    python -m spark_jobs.health --supervise PIDFILE ...    restart a dead or context-less server

The probe runs on a session of its own, released after the query, so probes leave nothing behind
on the server. ``--supervise`` is what ``scripts/services.sh`` runs beside the server it starts.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

# What a Spark Connect server without a live SparkContext answers (the server's log says why)
DEAD_CONTEXT_SIGNS = ("SparkEnv.get() is null", "Application error processing RPC", "SparkContext was shut down",
                      "Cannot call methods on a stopped SparkContext", "SparkContext has been shutdown")
RESTART_HINT = "restart it with `scripts/services.sh start spark` (its log: .local/services/spark/connect.log)"
# after the server died under a window: where to see why, and what to do when it was the window
TOO_BIG = ("Make the window smaller (window.max_records), or give the server more heap (CDCFLOW_SPARK_MEMORY, see "
           "docs/operating.md)")
DIED_HINT = ("Why it went: .local/services/spark/supervisor.log (the supervisor restarts it and names the cause; "
             "the dead server's log is connect.log.1). If it ran out of heap (java.lang.OutOfMemoryError), a "
             f"window's work was too big for it. {TOO_BIG}")


def session_url(url: str, app_name: str, generation: int = 0) -> str:
    """``url`` with a ``session_id`` stable per app (pipeline): every window of a pipeline, each in its
    own process, attaches to the same server-side session, so the server's Python workers (which it
    keeps per session) stay warm between windows (measured: a trivial task 2.7 s on a new session,
    0.8 s on a reused one) and idle workers do not pile up one set per window."""
    import uuid  # noqa: PLC0415

    if "session_id=" in url:
        return url
    sid = (uuid.uuid5(uuid.NAMESPACE_URL, f"{url}#{app_name}" + (f"#{generation}" if generation else ""))
           if generation >= 0 else uuid.uuid4())  # generation -1: a new random id
    base, _, params = url.partition("/;")
    return f"{base.rstrip('/')}/;{params + ';' if params else ''}session_id={sid}"


def check_reachable(url: str, timeout: float = 5.0) -> None:
    import socket  # noqa: PLC0415
    from urllib.parse import urlsplit  # noqa: PLC0415

    from connectors.errors import SparkUnavailable  # noqa: PLC0415

    parts = urlsplit(url.partition("/;")[0].replace("sc://", "http://", 1))
    host, port = parts.hostname or "127.0.0.1", parts.port or 15002
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise SparkUnavailable(
            f"Spark Connect at {url} is unreachable ({exc.__class__.__name__}: {exc}). Start the long-lived Spark "
            "with `scripts/services.sh start spark`, or set spark.mode: inprocess to run Spark inside the task; "
            "no offset was moved") from exc


def dead_context(text: str) -> bool:
    return any(sign in text for sign in DEAD_CONTEXT_SIGNS)


def probe(remote: str) -> str | None:
    """None when the server at ``remote`` runs a one-row job; else why not, in a line."""
    from pyspark.sql import SparkSession  # noqa: PLC0415
    from pyspark.sql.connect.client.retries import DefaultPolicy  # noqa: PLC0415

    from connectors.errors import SparkUnavailable  # noqa: PLC0415
    try:
        check_reachable(remote)
    except SparkUnavailable as exc:
        cause = exc.__cause__
        return f"nothing answers at {remote} ({cause.__class__.__name__}: {cause})"

    spark = None
    try:
        spark = SparkSession.builder.remote(session_url(remote, "cdcflow-health", -1)).create()
        spark.client.set_retry_policies([DefaultPolicy(max_retries=2, initial_backoff=200, max_backoff=1000)])
        count = spark.range(1).count()
        return None if count == 1 else f"a one-row job counted {count} rows"
    except Exception as exc:  # noqa: BLE001 - any failure of the query is the answer
        text = str(exc)
        if dead_context(text):
            return ("the server is up but its Spark context has stopped (out of memory, or a fatal error: see its "
                    "log)")
        first = text.strip().splitlines()[0][:300] if text.strip() else exc.__class__.__name__
        return f"a one-row job failed: {first}"
    finally:
        if spark is not None:
            try:
                spark.stop()  # releases the probe's session on the server
            except Exception:  # noqa: BLE001, S110 - the answer is already known
                pass


def _alive(pidfile: Path) -> bool:
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead
    except (OSError, ValueError, IndexError):
        return False


FATAL_SIGNS = ("java.lang.OutOfMemoryError", "Terminating due to")


def last_words(log: Path | None, tail: int = 200_000) -> str:
    """The fatal line at the end of a dead server's log (the JVM prints ``Terminating due to
    java.lang.OutOfMemoryError: Java heap space`` when it exits on running out of heap), or ""."""
    if log is None:
        return ""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    fatal = [line.strip() for line in lines if any(sign in line for sign in FATAL_SIGNS)]
    return fatal[-1][:300] if fatal else ""


def supervise(remote: str, pidfile: Path, restart: list[str], every: float, probe_every: float,
              server_log: Path | None = None) -> None:
    """Restart the server when its process is gone, or when two probes in a row find it unhealthy.
    Checks the process every ``every`` seconds (cheap) and probes every ``probe_every`` seconds.
    A dead server's last fatal log line (out of heap, say) goes into this log with the restart."""
    failures, last_probe = 0, 0.0
    while True:
        time.sleep(every)
        why = None
        if not _alive(pidfile):
            words = last_words(server_log)
            why = f"its process is gone (no live PID in {pidfile})" + (f"; its log ends with: {words}" if words else "")
        if why is None and time.monotonic() - last_probe >= probe_every:
            last_probe = time.monotonic()
            why = probe_in_child(remote)
            failures = failures + 1 if why else 0
            if why and failures < 2:
                _log(f"probe failed ({why}); restarting if the next one fails too")
                continue
        if why is None:
            continue
        _log(f"spark is down: {why}; restarting it: {' '.join(restart)}")
        result = subprocess.run(restart, capture_output=True, text=True, check=False)
        _log(f"restart exited {result.returncode}: {(result.stdout + result.stderr).strip()[-2000:]}")
        failures, last_probe = 0, time.monotonic()


def probe_in_child(remote: str, timeout: float = 120.0) -> str | None:
    """A probe in a process of its own, so that a server that hangs cannot hang the supervisor."""
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH")
                                               else "")}
    try:
        result = subprocess.run([sys.executable, "-m", "spark_jobs.health", remote], capture_output=True, text=True,
                                timeout=timeout, check=False, cwd=root, env=env)
    except subprocess.TimeoutExpired:
        return f"a one-row job did not finish in {timeout:.0f}s"
    if result.returncode == 0:
        return None
    return (result.stdout.strip().splitlines() or [result.stderr.strip()[-300:]])[-1].partition(": ")[2] or "probe failed"


def _log(message: str) -> None:
    print(f"{datetime.now(UTC).isoformat(timespec='seconds')} {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("remote", nargs="?", default=os.environ.get("CDCFLOW_SPARK_REMOTE", "sc://127.0.0.1:15002"))
    parser.add_argument("--supervise", metavar="PIDFILE", help="watch the server of this PID file and restart it")
    parser.add_argument("--server-log", type=Path, help="the server's log, for why it died")
    parser.add_argument("--restart", default="scripts/services.sh start spark", help="the command that restarts it")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between process checks")
    parser.add_argument("--probe-every", type=float, default=30.0, help="seconds between probes")
    args = parser.parse_args(argv)
    if args.supervise:
        supervise(args.remote, Path(args.supervise), shlex.split(args.restart), args.every, args.probe_every,
                  args.server_log)
        return 0
    why = probe(args.remote)
    print(f"spark at {args.remote}: {'healthy' if why is None else why}")
    return 0 if why is None else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # a released Connect session's __del__ can hang the exit (see bench/wide.py)
