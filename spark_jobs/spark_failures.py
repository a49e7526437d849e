"""A failed Spark call -> the error a window fails with, saying what happened and what to do.

Spark Connect reports a lost server as a gRPC UNAVAILABLE, a restarted one as a missing session, a
server whose Spark context stopped with opaque errors (spark_jobs/health.py names them), and a
driver out of heap as a java.lang.OutOfMemoryError somewhere in a long JVM trace. These functions
tell those apart from a job that failed on a healthy server (they return None then), and name the
cause, the fix and that no offset moved. The session code (spark_jobs/session.py) and the window
(spark_jobs/window.py) raise what they return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.health import DIED_HINT, RESTART_HINT, TOO_BIG, dead_context

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from connectors.errors import SparkUnavailable, WindowFailed


def spark_unavailable(exc: BaseException) -> SparkUnavailable | None:
    """The clear error for a Spark Connect failure that is the server being gone (gRPC UNAVAILABLE),
    as opposed to a job failing on it; None for anything else."""
    from connectors.errors import SparkUnavailable  # noqa: PLC0415

    text = str(exc)
    if dead_context(text):
        return SparkUnavailable(
            "the long-lived Spark (Spark Connect) is up but its Spark context has stopped (out of memory, or a fatal "
            f"error: see its log); {RESTART_HINT} (the supervisor does it within a minute); no offset was moved")
    if any(sign in text for sign in ("SESSION_NOT_FOUND", "NO_ACTIVE_SESSION", "SESSION_CHANGED")):
        return SparkUnavailable(
            "the long-lived Spark (Spark Connect) restarted while the window ran: its session, and the window's "
            "checkpointed read with it, are gone. Nothing of the window was committed and no offset moved: the "
            f"retry runs it again. {DIED_HINT}")
    if exc.__class__.__name__ != "SparkConnectGrpcException" or "UNAVAILABLE" not in text:
        return None
    import re  # noqa: PLC0415

    details = re.search(r'details = "([^"]*)"', text)
    why = details.group(1) if details else text.strip().splitlines()[0]
    return SparkUnavailable(
        f"the long-lived Spark (Spark Connect) became unreachable during the window ({why[:300]}). Check it with "
        "`scripts/services.sh status spark`, and start it with `scripts/services.sh start spark` (its supervisor "
        f"does within seconds); no offset was moved. {DIED_HINT}")


def server_lost(spark: SparkSession) -> SparkUnavailable | None:
    """After a window's Spark call failed with an error that names no cause (the client can fail
    with a bare AssertionError when the server dies mid-stream): the server restarted or went away
    when the session can no longer run a one-row job; None when it still can (the job itself failed)."""
    from connectors.errors import SparkUnavailable  # noqa: PLC0415

    try:
        spark.range(1).count()
    except Exception as exc:  # noqa: BLE001 - any failure here means the server is not what it was
        first = first_line(exc)
        return spark_unavailable(exc) or SparkUnavailable(
            f"the long-lived Spark stopped answering during the window ({first}); nothing of the window was "
            f"committed and no offset moved: the retry runs it again. {DIED_HINT}")
    return None


def out_of_memory(exc: BaseException, what: str) -> WindowFailed | None:
    """The clear error for a window whose work ran the Spark driver (the long-lived server, in local
    mode) out of heap. The server runs with ExitOnOutOfMemoryError: it exits rather than go on
    without its context, and its supervisor starts it again within seconds (issue 22)."""
    from connectors.errors import WindowFailed  # noqa: PLC0415

    if "java.lang.OutOfMemoryError" not in str(exc):
        return None
    return WindowFailed(
        f"{what} ran Spark out of memory (java.lang.OutOfMemoryError). The long-lived Spark exits on it and its "
        "supervisor starts it again within seconds (`scripts/services.sh status spark`); the other pipelines' "
        f"windows retry. Nothing was committed and no offset moved. {TOO_BIG}")


def first_line(exc: BaseException) -> str:
    """An exception's first line (Spark's carry a JVM stack trace after it), or its class name."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else exc.__class__.__name__
