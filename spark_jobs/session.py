"""The one place a SparkSession is created, with settings sized for a small machine."""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
from typing import TYPE_CHECKING

from spark_jobs.config import SparkConfig
from spark_jobs.health import RESTART_HINT, check_reachable, session_url
from spark_jobs.spark_failures import first_line, spark_unavailable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Session SQL settings every window needs, set on every session, the long-lived server's included:
# constraint propagation infers every combination of a plan's aliased predicates, and on a sink of
# more than a dozen columns that grew exponentially (16 columns ran the server out of heap).
SESSION_CONF = {"spark.sql.constraintPropagation.enabled": "false",
                # Spark Connect caches a session's last resolved plans; a window's plans reference its
                # checkpointed read, so the cache kept the last windows' data alive after they ended
                # (300,000 rows, ~400 MiB, with windows of 50,000 records: docs/benchmarks.md)
                "spark.connect.session.planCache.enabled": "false"}
DEFAULT_CONF = {
    **SESSION_CONF,
    "spark.driver.memory": "1g",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.task.maxFailures": "1",  # a failed task fails the window; Airflow owns the retries
    "spark.python.worker.reuse": "true",
    # the status listener keeps every job, stage and SQL execution up to these counts (1,000 each by
    # default), plan texts included, for a UI nobody reads: 60 MB of a long-lived server's heap (issue 22)
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.sql.ui.retainedExecutions": "100",
    # The JVM only schedules tasks and moves Arrow bytes between the Python workers: the client
    # compiler's code does that as fast, and C2's compiling cost 0.25-0.4 CPU-s of every 250k-record
    # window (docs/benchmarks.md, issue 25). scripts/services.sh starts the long-lived Spark the same way.
    # In a process of its own (in-process sessions) the serial collector: G1 grew the heap with every
    # window, 442 -> 552 MiB from 4 to 12 windows of 250k, against 410 -> 445 MiB (docs/benchmarks.md).
    # The long-lived server keeps G1: its heap serves every pipeline, and pauses there delay them all.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    # The Python workers' Arrow memory from jemalloc, not pyarrow's default mimalloc: a read task copies
    # fresh buffers (its records' values, 30 MB per 80k records) and, on this machine's VM, mimalloc's
    # newly mapped pages cost more than the copy; jemalloc reuses its pages. The read tasks of a
    # 250k-record window took 2.25 s with mimalloc, 1.91 s with jemalloc (docs/benchmarks.md, issue 25).
    # The long-lived server's workers get it from their daemon (spark_jobs/daemon.py).
    "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
}


DEFAULT_REMOTE = "sc://127.0.0.1:15002"


def resolve_master(cfg: SparkConfig) -> str:
    return cfg.master or os.environ.get("CDCFLOW_SPARK_MASTER") or "local[*]"


def resolve_remote(cfg: SparkConfig) -> str:
    return cfg.remote or os.environ.get("CDCFLOW_SPARK_REMOTE") or DEFAULT_REMOTE


SHARED_SESSION_SECONDS = 3600  # how long pipelines share one server-side session before the next one


def session_name(cfg: SparkConfig, app_name: str, now: float | None = None) -> str:
    """The server-side session a window attaches to. Pipelines without a ``spark.conf`` of their own
    share one: the server keeps Python workers (~165 MiB) and state per session, so one session per
    pipeline grew the server by every pipeline that ever ran (issue 22). The shared session is
    renewed every hour (``CDCFLOW_SPARK_SESSION_SECONDS``): the server closes the one before when it
    has been idle for its timeout, with anything a killed window left cached in it, so at most two
    or three are alive at a time. A pipeline that sets ``spark.conf`` keeps a session of its own
    (its settings would change the others')."""
    import time  # noqa: PLC0415

    if cfg.conf:
        return app_name
    period = int(os.environ.get("CDCFLOW_SPARK_SESSION_SECONDS", SHARED_SESSION_SECONDS))
    return f"cdcflow-shared-{int((time.time() if now is None else now) // max(period, 1))}"


def connect_spark(cfg: SparkConfig, app_name: str = "cdcflow") -> SparkSession:
    """A session on the long-lived Spark Connect server (``spark.mode: connect``): no JVM in this
    process, warm executors and Python workers on the server."""
    from pyspark.errors import PySparkException  # noqa: PLC0415
    from pyspark.sql import SparkSession  # noqa: PLC0415
    from pyspark.sql.connect.client.retries import DefaultPolicy  # noqa: PLC0415

    from connectors.errors import SparkUnavailable  # noqa: PLC0415

    url = resolve_remote(cfg)
    check_reachable(url)  # the client itself retries a refused connection for minutes
    app_name = session_name(cfg, app_name)
    cached = _CONNECT_SESSIONS.get((url, app_name))
    if cached is not None and not cached[1].is_stopped:
        try:
            return _prechecked(activate(cached[1]), url)
        except SparkUnavailable:  # the server restarted since, say: a new session below, checked again
            _close_client(_CONNECT_SESSIONS.pop((url, app_name))[1])
    spark: SparkSession | None = None
    try:
        spark, target = _create_connect_session(SparkSession, url, app_name)
        # the client's default retries a lost server for 10+ minutes (measured: a window hung > 7 min
        # after the server was stopped); ~13 s is enough to ride out a blip, then the window fails
        # clearly and Airflow's retries take over
        spark.client.set_retry_policies([DefaultPolicy(max_retries=6, backoff_multiplier=2.0, initial_backoff=250,
                                                       max_backoff=5000)])
        for key, value in {**SESSION_CONF, **cfg.conf}.items():
            spark.conf.set(key, value)
    except (PySparkException, OSError, ValueError) as exc:
        if spark is not None:
            _close_client(spark)
        first = first_line(exc)
        dead = spark_unavailable(exc)
        if dead is not None:
            raise dead from exc
        raise SparkUnavailable(
            f"Spark Connect at {url} is unreachable ({first}). Start the long-lived Spark with "
            "`scripts/services.sh start spark`, or set spark.mode: inprocess to run Spark inside the task; "
            "no offset was moved") from exc
    _CONNECT_SESSIONS[(url, app_name)] = (target, spark)
    close_at_exit()  # after the client registered its own exit hook, so that ours runs first
    return _prechecked(activate(spark), url)


def _prechecked(spark: SparkSession, url: str) -> SparkSession:
    """The window's pre-check: a one-row job (about 0.06 s). A server whose Spark context stopped
    keeps its port and fails every request; this fails the window at once, before anything is
    read, with what happened and how to restart it."""
    from connectors.errors import SparkUnavailable  # noqa: PLC0415

    try:
        spark.range(1).count()
    except Exception as exc:
        first = first_line(exc)
        raise spark_unavailable(exc) or SparkUnavailable(
            f"the long-lived Spark at {url} cannot run a one-row job ({first}); {RESTART_HINT}; "
            "no offset was moved") from exc
    return spark


MAX_SESSION_GENERATIONS = 50


def _create_connect_session(cls: type[SparkSession], url: str, app_name: str) -> tuple[SparkSession, str]:
    """A session with this pipeline's stable id, or, when the server has closed that id (a session
    idle beyond the server's timeout, 60 min by default, or stopped), the next generation of it:
    the server never reopens a closed id, and every window walks the same chain to the same session.
    create(), not getOrCreate(): that returns any session this process already has, whatever server
    or pipeline it belongs to (a second pipeline, or a cluster, would run on the first). A session
    that is not returned has its client closed at once (see :func:`close_clients`)."""
    for generation in range(MAX_SESSION_GENERATIONS):
        target = session_url(url, app_name, generation)
        try:
            return _opened(cls, target, app_name), target
        except Exception as exc:
            if "INVALID_HANDLE.SESSION_CLOSED" not in str(exc):
                raise
    target = session_url(url, app_name, -1)  # a long-lived server with many closed ids
    return _opened(cls, target, app_name), target


def _opened(cls: type[SparkSession], target: str, app_name: str) -> SparkSession:
    spark = cls.builder.remote(target).create()  # no call to the server yet
    try:
        spark.conf.set("spark.app.name", app_name)  # the first call: the server refuses a closed id
    except BaseException:
        _close_client(spark)  # not handed out: closed now, so that it calls nothing at exit
        raise
    return spark


def read_slots(spark: SparkSession) -> int:
    """How many read tasks run at once (``job.read_pieces``): N of ``local[N]``, this machine's cores
    for ``local[*]`` (the session runs here, or on a Spark Connect server that it starts on this
    machine), else ``spark.cores.max`` or ``spark.default.parallelism`` when set; 0 (unknown: a
    window's ranges are not split) otherwise."""
    master = spark.conf.get("spark.master", None) or ""
    local = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master)
    if local:
        return (os.cpu_count() or 1) if local.group(1) == "*" else int(local.group(1))
    for key in ("spark.cores.max", "spark.default.parallelism"):
        value = spark.conf.get(key, None)
        if value and value.isdigit():
            return int(value)
    return 1 if master == "local" else 0


def describe(spark: SparkSession) -> str:
    """Where this session runs its work, for the window's statistics: ``connect sc://host:port`` or
    ``inprocess <master>``."""
    for target, session in _CONNECT_SESSIONS.values():
        if session is spark:
            return f"connect {target.partition('/;')[0]}"
    context = getattr(spark, "sparkContext", None)
    return f"inprocess {context.master}" if context is not None else "connect"


def release_sessions(remote: str) -> None:
    """Stop this process's sessions on the server at ``remote`` (before that server stops: a session
    left open retries its release at exit)."""
    for key in [k for k, (target, _s) in _CONNECT_SESSIONS.items() if target.startswith(remote.rstrip("/") + "/")]:
        _CONNECT_SESSIONS.pop(key)[1].stop()


def activate(spark: SparkSession) -> SparkSession:
    """Make ``spark`` this thread's active session. PySpark 4.0's Connect client binds the result of
    ``localCheckpoint`` to ``SparkSession.active()`` (pyspark.sql.connect.conversion.
    proto_to_remote_cached_dataframe), and only the first session of a process becomes active: in a
    process with two sessions the checkpoint would be looked up on the wrong server
    (DATAFRAME_NOT_FOUND). There is no public setter. PySpark's functions (``F.col`` …) build
    Connect columns only while SPARK_CONNECT_MODE_ENABLED is set, which the builder sets once and a
    classic session started since clears (``get_spark``): set again for a cached session."""
    holder = getattr(type(spark), "_active_session", None)
    if holder is not None:  # a Connect session (a classic one keeps its own, JVM-side)
        holder.session = spark
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    return spark


class Checkpoints:
    """A window's checkpointed frames (``localCheckpoint``), released on the server when the window
    ends. Spark Connect keeps a checkpoint in the server's block manager until its session closes, or
    until the client's DataFrame is garbage collected (a ``__del__`` that a task process exiting never
    runs): with sessions shared by every pipeline for an hour, windows of 50,000 records grew the
    server's heap by ~30 MiB each (issue 22). A classic session's checkpoints go with its process."""

    def __init__(self) -> None:
        self.frames: list[DataFrame] = []

    def __call__(self, frame: DataFrame) -> DataFrame:
        held = frame.localCheckpoint(eager=True)
        self.frames.append(held)
        return held

    def release(self) -> None:
        import logging  # noqa: PLC0415

        while self.frames:
            plan = getattr(self.frames.pop(), "_plan", None)
            if type(plan).__name__ != "CachedRemoteRelation" or getattr(plan, "_relation_id", None) is None:
                continue
            from pyspark.sql.connect.plan import RemoveRemoteCachedRelation  # noqa: PLC0415

            client = plan._spark_session.client  # noqa: SLF001 - the relation's own session
            try:
                client.execute_command(RemoveRemoteCachedRelation(plan).command(session=client))
            except Exception as exc:  # noqa: BLE001 - a server gone took its checkpoints with it
                logging.getLogger("cdcflow.spark").warning("releasing a checkpoint failed: %s", exc)
            plan._relation_id = None  # noqa: SLF001 - released: its __del__ has nothing left to do


# (server url, app) -> (session url, session): one per server and pipeline, for processes that run many windows
_CONNECT_SESSIONS: dict[tuple[str, str], tuple[str, SparkSession]] = {}


def get_spark(cfg: SparkConfig, app_name: str = "cdcflow") -> SparkSession:
    if cfg.mode == "connect" and not os.environ.get("CDCFLOW_SPARK_SUBMITTED"):
        return connect_spark(cfg, app_name)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # a Spark Connect session earlier in this process leaves this flag set, and the classic builder
    # would then refuse to start a local Spark (CONNECT_URL_NOT_SET); the flag steers builders only
    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    from pyspark.sql import SparkSession  # noqa: PLC0415 - heavy; only when a window runs

    builder = SparkSession.builder.appName(app_name)
    if not os.environ.get("CDCFLOW_SPARK_SUBMITTED"):  # under spark-submit the master comes from it
        builder = builder.master(resolve_master(cfg))
    for key, value in {**DEFAULT_CONF, **_local_daemon(cfg), **cfg.conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    close_at_exit()
    spark.sparkContext.setLogLevel(os.environ.get("CDCFLOW_SPARK_LOG_LEVEL", "WARN"))
    return spark


def _local_daemon(cfg: SparkConfig) -> dict[str, str]:
    """A local Spark's Python workers forked from spark_jobs/daemon.py, as the long-lived server's are
    (scripts/services.sh; ``CDCFLOW_SPARK_DAEMON_MODULE``, empty: PySpark's own): a worker started
    mid-window (a Spark stage runs two at once per task: the frame in, the rows back) has the window's
    modules imported already, instead of importing them in the window (~1 CPU-s each)."""
    module = os.environ.get("CDCFLOW_SPARK_DAEMON_MODULE", "spark_jobs.daemon")
    if not module or os.environ.get("CDCFLOW_SPARK_SUBMITTED") or not resolve_master(cfg).startswith("local"):
        return {}
    return {"spark.python.daemon.module": module}


# -- a clean end -------------------------------------------------------------------------------------
# Left to the interpreter's shutdown, the Spark clients spoke after the user's terminal was done with
# them (issue 40): py4j's connections log "Closing down clientserver connection" from __del__, into a
# handler whose stream was closed by then (pytest's capture, which Airflow's logging writes to:
# "--- Logging error --- ValueError: I/O operation on closed file"); a Spark Connect client's own exit
# hook, and a checkpoint's __del__, call a server that may be gone (a restarted or stopped one), retry
# for ~13 s and warn [RETRIES_EXCEEDED]. Closed here first, at exit, they have nothing left to say.
_EXIT_PID: int | None = None  # the process whose clients the exit hook closes (a forked child's are its parent's)


def close_at_exit() -> None:
    """Have :func:`close_clients` run when this process exits, before the Spark clients' own exit hooks:
    atexit runs the last registered first, and each Spark Connect client registers one when it is made,
    so this is registered again after every new session."""
    global _EXIT_PID  # noqa: PLW0603 - one hook per process
    _EXIT_PID = os.getpid()
    atexit.unregister(_close_at_exit)
    atexit.register(_close_at_exit)


def _close_at_exit() -> None:
    if os.getpid() == _EXIT_PID:  # not in a forked child: the clients, sockets and JVM are the parent's
        close_clients()


def close_clients() -> None:
    """Close this process's Spark clients: the Spark Connect channels, without releasing their
    server-side sessions (pipelines share them, and their Python workers stay warm for the next
    window; the server closes an idle one), and the in-process Spark: its SparkContext stopped and
    its py4j gateway's connections closed. A later :func:`get_spark` starts afresh."""
    for _target, session in list(_CONNECT_SESSIONS.values()):
        _close_client(session)
    _CONNECT_SESSIONS.clear()
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext  # noqa: PLC0415 - imported already

    context, gateway = SparkContext._active_spark_context, SparkContext._gateway  # noqa: SLF001
    if context is None and gateway is None:
        return
    # py4j logs each connection it closes at INFO, from close() and again from __del__: at exit that is
    # noise in a terminal (`cdcflow run` logs at INFO), and in pytest it goes to a closed stream
    py4j = logging.getLogger("py4j")
    py4j.setLevel(max(py4j.getEffectiveLevel(), logging.WARNING))
    try:
        if context is not None:
            context.stop()
        if gateway is not None:
            gateway.close()  # the connections to the JVM and the callback server; the JVM exits with
            # this process (its stdin closes), or spark-submit's with it
    except Exception as exc:  # noqa: BLE001 - a JVM already gone: nothing left to close
        logging.getLogger("cdcflow.spark").debug("closing the in-process Spark failed: %s", exc)
    SparkContext._gateway = SparkContext._jvm = None  # noqa: SLF001 - a later session launches its own


def _close_client(spark: SparkSession) -> None:
    """Close a Spark Connect session's channel, leaving its server-side session to the server (see
    :func:`close_clients`); its client's exit hook and its checkpoints' __del__ then call nothing."""
    try:
        spark.client.close()
    except Exception as exc:  # noqa: BLE001 - closing is best effort
        logging.getLogger("cdcflow.spark").debug("closing a Spark Connect client failed: %s", exc)
