"""One consume window, in three steps: plan, process, commit.

* ``plan``    fixes the window in the ledger before any record is read: per partition, the start
  offset (stored, initial, or given as ``start_offsets`` / ``start_time``) and its share of
  ``max_records``; for a time range (a backfill run's data interval, ``start_time`` + ``end_time``,
  or an aligned window's interval end) also the offset where the read stops. Idempotent per run id,
  so a cleared or retried run gets the same window.
* ``process`` reads the planned ranges on Spark, records the actual end offsets, sends bad records
  to the DLQ and applies the sinks. A retry after the read replays exactly the recorded range.
* ``commit``  moves the stored offsets (compare-and-set) only after ``process`` succeeded, then
  mirrors them to the pipeline's Kafka consumer group for lag tools.

The Airflow DAG runs these as three tasks; ``run_window`` runs them in one process (CLI, tests).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from cdcflow.config import PipelineConfig
from cdcflow.connections import get_connection
from cdcflow.errors import (
    CdcflowError,
    ConfigError,
    DeadLettersExceeded,
    OffsetOutOfRange,
    PipelineStopped,
    SchemaChangePending,
    WindowFailed,
)
from cdcflow.run_params import RunParams
from cdcflow.state import Origin, PartitionWindow, StateStore, TopicPartition, WindowPlan, default_store_url
from connectors import faults

log = logging.getLogger("cdcflow.runner")
LEASE_SECONDS = 60.0  # a writer's lease; renewed every third of it while the window runs
LEASE_WAIT = 3600.0  # how long a window waits for another window of its pipeline to finish writing
RETENTION_EVERY = 600.0  # retention runs after a commit at most every 10 minutes per pipeline
REPLAY_DEADLINE = 86400.0  # a time range is read whole; a stalled broker still fails it (stall_timeout)


@dataclass(frozen=True)
class AirflowRun:
    """What the Airflow run says about itself: its type and data interval (aware datetimes)."""

    run_type: str  # scheduled, manual, backfill, asset_triggered
    interval_start: datetime | None = None
    interval_end: datetime | None = None

    @property
    def interval(self) -> tuple[datetime, datetime] | None:
        if self.interval_start is None or self.interval_end is None or self.interval_end <= self.interval_start:
            return None
        return (self.interval_start, self.interval_end)


def offset_store_url(cfg: PipelineConfig) -> str:
    if cfg.offset_store.conn_id:
        return get_connection(cfg.offset_store.conn_id).sqlalchemy_url()
    return default_store_url()


def offset_store(cfg: PipelineConfig) -> StateStore:
    return StateStore(offset_store_url(cfg))


def sink_offsets(cfg: PipelineConfig) -> Any:
    """Exactly-once (offset_store.sink): the offsets in that MySQL sink's database, else None."""
    if cfg.offset_store.sink is None:
        return None
    from connectors.mysql.offsets import SinkOffsets  # noqa: PLC0415

    sink = next(s for s in cfg.sinks if s.name == cfg.offset_store.sink)
    return SinkOffsets(get_connection(sink.conn_id).sqlalchemy_url())


@contextmanager
def _held_offsets(cfg: PipelineConfig) -> Iterator[Any]:
    """sink_offsets(cfg) for the block (None when the pipeline is not exactly-once), closed after."""
    held = sink_offsets(cfg)
    try:
        yield held
    finally:
        if held is not None:
            held.close()


def stored_offsets(cfg: PipelineConfig, store: StateStore) -> dict[TopicPartition, int]:
    """Where the next window starts. Exactly-once: the sink's offsets are the authority; the offset
    store is brought up to them when a window's sink transaction committed and its ledger commit did
    not happen (the process died between the two). A partition the sink has no offset for yet (a
    pipeline switched to exactly-once) starts from the store's."""
    stored = store.offsets.load(cfg.name)
    with _held_offsets(cfg) as held:
        if held is None:
            return stored
        in_sink = held.load(cfg.name)
    behind = {tp: (o, run) for tp, (o, run) in in_sink.items() if stored.get(tp) != o}
    if behind:
        log.warning("pipeline %s: the MySQL sink %r holds offsets the offset store does not (%s): taking them; the "
                    "windows that committed them in the sink did not reach their ledger commit", cfg.name,
                    cfg.offset_store.sink, ", ".join(f"{t}[{p}] {stored.get((t, p))} -> {o} (run {run})"
                                                     for (t, p), (o, run) in sorted(behind.items())))
        store.offsets.mirror(cfg.name, behind)
    return {**stored, **{tp: o for tp, (o, _run) in in_sink.items()}}


def backlog(cfg: PipelineConfig, store: StateStore) -> dict[TopicPartition, int]:
    """Per partition, the records the next window would find: the true end (read to EOF) minus the
    stored offset, or minus initial_offsets' start for a partition with none. Reads ends only: no
    offset is committed and no consumer group moves."""
    from connectors.kafka.reader import discover  # noqa: PLC0415

    stored = stored_offsets(cfg, store)
    waiting = {}
    for s in discover(consumer_conf(cfg), source_topics(cfg), timeout=10):
        start = stored.get((s.topic, s.partition))
        if start is None:
            start = s.low if cfg.initial_offsets == "earliest" else s.end
        waiting[(s.topic, s.partition)] = max(0, s.end - start)
    return waiting


def set_offsets(cfg: PipelineConfig, store: StateStore, offsets: Mapping[TopicPartition, int | None], by: str) -> None:
    """Operator reset of some partitions (None: forget), in the offset store and, exactly-once, in the sink."""
    values = {tp: o for tp, o in offsets.items() if o is not None}
    forget = [tp for tp, o in offsets.items() if o is None]
    with _held_offsets(cfg) as held:
        if held is not None:
            held.set(cfg.name, values, by)
            if forget:
                held.forget(cfg.name, forget)
    if values:
        store.offsets.set(cfg.name, values, run_id=by)
    if forget:
        store.offsets.forget(cfg.name, forget)


def clear_offsets(cfg: PipelineConfig, store: StateStore) -> None:
    """Forget every stored offset of the pipeline (the next window starts from initial_offsets)."""
    with _held_offsets(cfg) as held:
        if held is not None:
            held.forget(cfg.name)
    store.offsets.clear(cfg.name)


def kafka_client(cfg: PipelineConfig) -> dict[str, Any]:
    return get_connection(cfg.source.kafka_conn_id).kafka_config()


def source_topics(cfg: PipelineConfig) -> Any:
    """The topics to discover: the list, or the pattern of source.topics_regex (matched anew at every
    plan, so topics created later are read from initial_offsets)."""
    from connectors.kafka.reader import TopicPattern  # noqa: PLC0415

    return list(cfg.source.topics) if cfg.source.topics else TopicPattern(cfg.source.topics_regex or "")


def consumer_conf(cfg: PipelineConfig) -> dict[str, Any]:
    from connectors.kafka.client import consumer_config  # noqa: PLC0415 - confluent-kafka import

    return consumer_config(kafka_client(cfg), cfg.group_id, dict(cfg.source.consumer_config))


def sink_target(sink: Any) -> Any:
    """Resolve a sink's connection on the driver (executors need no Airflow)."""
    from spark_jobs.sinks import SinkTarget  # noqa: PLC0415

    conn = get_connection(sink.conn_id)
    if sink.type == "elasticsearch":
        auth = (conn.login, conn.password or "") if conn.login else None
        return SinkTarget(sink, conn.http_url(), auth)
    return SinkTarget(sink, conn.sqlalchemy_url())


def allocate(backlogs: Mapping[TopicPartition, int], budget: int) -> dict[TopicPartition, int]:
    """Split the window's record budget over partitions: equal shares, capped by each backlog,
    with what a short partition leaves redistributed to the others (water-filling)."""
    share = dict.fromkeys(backlogs, 0)
    open_tps = sorted(tp for tp, b in backlogs.items() if b > 0)
    remaining = budget
    while open_tps and remaining > 0:
        each = max(1, remaining // len(open_tps))
        for tp in list(open_tps):
            give = min(each, backlogs[tp] - share[tp], remaining)
            share[tp] += give
            remaining -= give
            if share[tp] >= backlogs[tp]:
                open_tps.remove(tp)
            if remaining == 0:
                break
    return share


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def time_range(cfg: PipelineConfig, p: RunParams,
               run: AirflowRun | None) -> tuple[Origin, tuple[datetime, datetime]] | None:
    """The time range a run replays, if it is one: start_time + end_time, a backfill run's data
    interval, or the data interval of a manual run of an aligned pipeline."""
    if p.start_time is not None and p.end_time is not None:
        return "time_range", (_at(p.start_time), _at(p.end_time))
    if run is None or p.start_offsets or p.start_time is not None:
        return None
    if run.run_type == "backfill":
        if run.interval is None:
            raise ConfigError(
                f"backfill run of pipeline {cfg.name!r} has no data interval ({run.interval_start} .. "
                f"{run.interval_end}); a pipeline without a schedule with intervals is backfilled with "
                "`cdcflow run <pipeline> --from <time> --to <time>` or trigger params start_time/end_time")
        return "backfill", run.interval
    if cfg.window.align == "data_interval" and run.run_type == "manual" and run.interval is not None:
        return "time_range", run.interval
    return None


def plan(cfg: PipelineConfig, run_id: str, params: Mapping[str, Any] | None = None,
         store: StateStore | None = None, run: AirflowRun | None = None) -> WindowPlan:
    p = RunParams.parse(params, cfg)
    store = store or offset_store(cfg)
    existing = store.ledger.get_window(cfg.name, run_id)
    if existing is not None:
        log.info("run %s already has a window (status %s): reusing it", run_id, existing.status)
        return existing
    if store.operator.get_state(cfg.name) == "stopped":
        raise PipelineStopped(f"pipeline {cfg.name!r} is STOPPED: no window is planned until an operator "
                              f"resumes it (the cdcflow page, PUT /cdcflow/connectors/{cfg.name}/resume, or "
                              "`cdcflow resume`)")
    from connectors.kafka.reader import discover, offsets_for_time  # noqa: PLC0415

    conf = consumer_conf(cfg)
    parts = {(s.topic, s.partition): s for s in discover(conf, source_topics(cfg))}
    stored = stored_offsets(cfg, store)

    def at_time(moment: datetime, froms: Mapping[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
        """Per partition, the first offset whose record time is >= moment (searched from ``froms``)."""
        lows = froms or {tp: state.low for tp, state in parts.items()}
        return offsets_for_time(conf, [(t, q, lows[(t, q)], parts[(t, q)].end) for t, q in sorted(lows)],
                                _ms(moment), source=cfg.source.timestamp)

    replay = time_range(cfg, p, run)
    interval: tuple[datetime, datetime] | None = None
    starts: dict[TopicPartition, int] = {}
    stops: dict[TopicPartition, int] = {}
    origin: Origin
    if replay is not None:
        origin, interval = replay
        starts = at_time(interval[0])
        stops = at_time(interval[1], starts)
    elif p.start_offsets:
        origin = "params"
        for topic, offsets in p.start_offsets.items():
            for part, off in offsets.items():
                if (topic, part) not in parts:
                    n = sum(1 for t, _ in parts if t == topic)
                    raise ConfigError(f"start_offsets.{topic}.{part}: topic {topic!r} has partitions 0..{n - 1}")
                starts[(topic, part)] = off
    elif p.start_time is not None:
        origin = "params"
        starts = at_time(_at(p.start_time))
    else:
        origin = "stored"
        for tp, state in parts.items():
            starts[tp] = stored.get(tp, state.low if cfg.initial_offsets == "earliest" else state.end)
        if (cfg.window.align == "data_interval" and run is not None and run.run_type == "scheduled"
                and run.interval is not None):
            interval = run.interval
            stops = at_time(interval[1], {tp: min(s, parts[tp].end) for tp, s in starts.items()})
    for tp, start in starts.items():
        state = parts[tp]
        if start < state.low:
            raise OffsetOutOfRange(
                f"{tp[0]}[{tp[1]}]: start offset {start} is before the first offset still in the log "
                f"({state.low}); records {start}..{state.low - 1} were deleted by retention. Replay from "
                f"start_offsets >= {state.low} or reset with `cdcflow offsets set` once the gap is accepted")
        if start > state.end:
            raise OffsetOutOfRange(
                f"{tp[0]}[{tp[1]}]: start offset {start} is beyond the end of the log ({state.end}); the topic "
                "was probably recreated. Reset the offsets with `cdcflow offsets set` or replay with start_offsets")
    _check_replay_horizon(cfg, origin, starts, interval if origin != "stored" else None, at_time)
    if origin in ("backfill", "time_range"):  # the slice is read whole, whatever the window's budget
        shares = {tp: max(0, stops[tp] - s) for tp, s in starts.items()}
    else:
        budget = p.max_records or cfg.window.max_records
        ends = {tp: stops.get(tp, parts[tp].end) for tp in starts}
        shares = allocate({tp: max(0, ends[tp] - s) for tp, s in starts.items()}, budget)
        if not cfg.window.stop_on_empty and not stops:
            spare = budget - sum(shares.values())
            for tp in sorted(shares):  # partitions may wait for new records until max_duration
                shares[tp] += spare // len(shares)
    windows = [PartitionWindow(t, part, starts[(t, part)], shares[(t, part)], stop=stops.get((t, part)))
               for t, part in sorted(starts)]
    result = store.offsets.plan(cfg.name, run_id, origin, windows, interval)
    store.lag.record(cfg.name, "plan", {tp: (stored.get(tp), state.end) for tp, state in parts.items()}, run_id)
    span = f" (time range {interval[0].isoformat()} .. {interval[1].isoformat()})" if interval else ""
    log.info("planned %s window %s%s: %s", origin, run_id, span, ", ".join(
        f"{w.topic}[{w.partition}] from {w.start} up to {w.max_records}"
        + (f", stop at {w.stop}" if w.stop is not None else "") for w in result.partitions))
    return result


def process(cfg: PipelineConfig, run_id: str, params: Mapping[str, Any] | None = None,
            store: StateStore | None = None, spark: Any = None) -> dict[str, Any]:
    """Read, transform and apply the planned window. Returns the window's statistics."""
    p = RunParams.parse(params, cfg)
    store = store or offset_store(cfg)
    window = store.ledger.get_window(cfg.name, run_id)
    if window is None:
        raise WindowFailed(f"run {run_id!r} of pipeline {cfg.name!r} has no planned window; run plan first")
    attempt = store.ledger.begin_attempt(cfg.name, run_id)
    if window.status == "committed":
        log.info("run %s was committed already: re-applying its range %s (sinks are idempotent)",
                 run_id, _describe(window))
    asked = time.time()
    try:
        with writer_lease(store, cfg.name, run_id):
            held = time.time()
            stats = _process(cfg, window, p, store, spark)
            stats["writer"] = {"waited_s": round(held - asked, 3), "from": held, "to": time.time()}
    except Exception as exc:
        store.ledger.mark(cfg.name, run_id, "failed", f"attempt {attempt}: {exc.__class__.__name__}: {exc}")
        if isinstance(exc, DeadLettersExceeded):  # the breaker: no window runs until an operator resumes
            store.operator.set_state(cfg.name, "stopped", "cdcflow: errors.max_dead_letters")
        if isinstance(exc, SchemaChangePending):  # schema_changes pause: no window runs until an operator decides
            store.operator.record_schema_pending(cfg.name, run_id, {c["key"]: c for c in exc.changes})
            store.operator.set_state(cfg.name, "stopped", "cdcflow: schema_changes pause")
        if isinstance(exc, CdcflowError):
            raise
        raise WindowFailed(f"window {run_id} failed unexpectedly: {exc.__class__.__name__}: {exc}") from exc
    store.ledger.mark(cfg.name, run_id, "applied", None, stats)
    return stats


def _schema_decisions(cfg: PipelineConfig, store: StateStore) -> tuple[tuple[str, str], ...]:
    """schema_changes pause: the changes an operator approved or rejected (by change key)."""
    if cfg.schema_changes != "pause":
        return ()
    return tuple((c["key"], c["decision"]) for c in store.operator.schema_changes(cfg.name) if c["decision"] != "pending")


def _dead_holder(run_id: str, holder: str) -> bool:
    """Whether the lease's holder (``<run id>@<host>:<pid>:<nonce>``) is a killed attempt, so that
    its lease is taken at once instead of after it expires (up to LEASE_SECONDS):
    an earlier attempt of this same window (Airflow starts a retry only once the attempt before has
    ended, killed or failed), or a process on this host that no longer exists."""
    run, _, where = holder.rpartition("@")
    if run == run_id:
        return True
    host, _, rest = where.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


@contextmanager
def writer_lease(store: StateStore, pipeline: str, run_id: str, wait: float = LEASE_WAIT,
                 seconds: float = LEASE_SECONDS) -> Iterator[None]:
    """Hold the pipeline's writer lease while the block runs: a live window and a backfill window of
    one pipeline never write at the same time. Waits up to ``wait`` seconds for the holder."""
    holder = f"{run_id}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    deadline, told = time.monotonic() + wait, 0.0
    while (other := store.leases.try_take(pipeline, holder, seconds, dead=partial(_dead_holder, run_id))) is not None:
        if time.monotonic() > deadline:
            raise WindowFailed(
                f"pipeline {pipeline!r}: window {other.split('@')[0]!r} has been writing to the sinks for over "
                f"{wait:.0f}s, and windows of one pipeline never write at the same time; this window did not "
                "start (no offset moved). Retry it when that window has ended, or fail that one if it is stuck")
        if time.monotonic() - told > 30:
            log.info("waiting for window %s of pipeline %s to finish writing before this window starts",
                     other.split("@")[0], pipeline)
            told = time.monotonic()
        time.sleep(1.0)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(seconds / 3):
            try:
                other = store.leases.try_take(pipeline, holder, seconds)
            except Exception as exc:  # noqa: BLE001 - a missed renewal is retried; the lease still runs
                log.warning("renewing the writer lease of %s failed: %s", pipeline, exc)
                continue
            if other is not None:
                log.error("the writer lease of %s was taken by %s while this window ran (it stalled for over "
                          "%.0fs); the sinks' version guards keep the result right", pipeline, other, seconds)

    keeper = threading.Thread(target=renew, name=f"cdcflow-lease-{pipeline}", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join()
        store.leases.release(pipeline, holder)


def _sent_before(cfg: PipelineConfig, window: WindowPlan, store: StateStore) -> frozenset[tuple[str, int, int, str]]:
    """The dead letters already in the DLQ for this window's records, so they are not sent twice:
    those of this run's earlier attempts and those of earlier runs over the same records that never
    committed (a run whose retries ran out, a window killed before its commit and then left)."""
    if not cfg.errors.dlq_topic or cfg.errors.tolerance != "all":
        return frozenset()
    runs = ([window.run_id] if window.attempt >= 1 else []) + store.ledger.uncommitted_overlapping(cfg.name, window)
    if not runs:
        return frozenset()
    from connectors.kafka.dlq import sent_dead_letters  # noqa: PLC0415

    created = min(c for c, _updated in store.ledger.window_times(cfg.name, runs).values())
    since_ms = int(created.replace(tzinfo=UTC).timestamp() * 1000) - 300_000  # producers' clocks may differ
    sent = sent_dead_letters(consumer_conf(cfg), cfg.errors.dlq_topic, frozenset(runs), since_ms)
    if sent:
        log.info("run %s: %d dead letters for its records were sent by %s; not sending them again",
                 window.run_id, len(sent), ", ".join(runs))
    return sent


def _describe(window: WindowPlan) -> str:
    return ", ".join(f"{w.topic}[{w.partition}] {w.start}..{w.end if w.end is not None else '?'}"
                     for w in window.partitions)


def _process(cfg: PipelineConfig, window: WindowPlan, p: RunParams, store: StateStore,
             spark: Any) -> dict[str, Any]:
    from connectors.kafka.client import producer_config  # noqa: PLC0415
    from connectors.kafka.reader import ReadRange  # noqa: PLC0415

    started = time.time()
    duration = REPLAY_DEADLINE if not window.moves_offsets else p.max_duration or cfg.window.max_duration
    replay = window.read_done
    ranges = tuple(
        ReadRange(w.topic, w.partition, w.start,
                  max_records=(w.end - w.start) if replay and w.end is not None else w.max_records,
                  stop=w.end if replay else w.stop, deadline=started + duration,
                  stop_on_eof=cfg.window.stop_on_empty)
        for w in window.partitions)
    if not any(r.max_records > 0 for r in ranges):
        # nothing to read: the plan found every partition at its end (stop_on_empty)
        store.offsets.record_read(cfg.name, window.run_id, {(r.topic, r.partition): (r.start, 0) for r in ranges})
        return {"records": 0, "dead_lettered": 0, "sinks": {}, "seconds": round(time.time() - started, 3)}
    from spark_jobs.job import WindowJob  # noqa: PLC0415
    from spark_jobs.session import describe, get_spark  # noqa: PLC0415
    from spark_jobs.window import run_window_job  # noqa: PLC0415

    job = WindowJob(
        pipeline=cfg.name, run_id=window.run_id, consumer_conf=consumer_conf(cfg),
        producer_conf=producer_config(kafka_client(cfg)), ranges=ranges,
        sinks=tuple(sink_target(s) for s in cfg.sinks),
        versioning=cfg.versioning, tolerance=cfg.errors.tolerance, dlq_topic=cfg.errors.dlq_topic,
        context_headers=cfg.errors.context_headers, transforms=tuple(cfg.transforms),
        key_converter=cfg.source.key_converter, value_converter=cfg.source.value_converter,
        dead_letters_sent=_sent_before(cfg, window, store), faults=faults.active(),
        offsets_sink=cfg.offset_store.sink, spark_timeout=cfg.spark.timeout, max_dead_letters=cfg.errors.max_dead_letters,
        source_format=cfg.source.format, truncate=cfg.truncate, schema_changes=cfg.schema_changes,
        schema_decisions=_schema_decisions(cfg, store),
        column_wise_min=int(os.environ["CDCFLOW_COLUMN_WISE_MIN"]) if os.environ.get("CDCFLOW_COLUMN_WISE_MIN") else None,
        offsets_mode=window.offsets_mode)
    spark = spark or get_spark(cfg.spark, app_name=f"cdcflow-{cfg.name}")
    faults.checkpoint("before_read")

    def on_read(ends: dict[TopicPartition, tuple[int, int]]) -> None:
        store.offsets.record_read(cfg.name, window.run_id, ends)
        faults.checkpoint("after_read")
        starts = {(r.topic, r.partition): r.start for r in ranges}
        log.info("read %s records: %s", sum(c for _e, c in ends.values()),
                 ", ".join(f"{t}[{p}] {starts[(t, p)]}..{e}" for (t, p), (e, _c) in sorted(ends.items())))

    result = run_window_job(spark, job, on_read)
    if result.sink_offsets and "already" in result.sink_offsets:
        log.info("run %s: its window and offsets were committed in the MySQL sink %r by an earlier attempt; "
                 "nothing written there again", window.run_id, cfg.offset_store.sink)
    stats = result.stats()
    stats["seconds"] = round(time.time() - started, 3)
    stats["spark"] = describe(spark)
    log.info("window %s applied: %s", window.run_id, stats)
    return stats


def apply_retention(cfg: PipelineConfig, store: StateStore) -> dict[str, Any]:
    """Forget what retention allows (after a commit): old ledger windows and lag samples, old sink
    tombstones. A failure here is logged, never a failed window: nothing of the window depends on it."""
    out: dict[str, Any] = {}
    try:
        out["ledger"] = store.chores.prune(cfg.name, cfg.retention.ledger)
    except Exception as exc:  # noqa: BLE001
        log.warning("retention: pruning the ledger of %s failed: %s", cfg.name, exc)
    with _held_offsets(cfg) as held:
        try:
            if held is not None:
                out["sink_commits"] = held.prune(cfg.name, cfg.retention.ledger)
        except Exception as exc:  # noqa: BLE001
            log.warning("retention: pruning the run records in the MySQL sink of %s failed: %s", cfg.name, exc)
    if cfg.retention.tombstones is not None:
        from connectors.base import PrunableSink  # noqa: PLC0415
        from spark_jobs.sinks import SINK_TYPES  # noqa: PLC0415

        for sink in cfg.sinks:
            target = SINK_TYPES[sink.type].open(sink_target(sink))
            if not isinstance(target, PrunableSink):
                continue
            try:
                out[f"tombstones:{sink.name}"] = target.prune_tombstones(cfg.retention.tombstones)
            except Exception as exc:  # noqa: BLE001
                log.warning("retention: pruning the tombstones of sink %s failed: %s", sink.name, exc)
    return out


def _check_replay_horizon(cfg: PipelineConfig, origin: str, starts: Mapping[TopicPartition, int],
                          interval: tuple[datetime, datetime] | None,
                          at_time: Any) -> None:
    """Refuse a replay that reaches records older than retention.tombstones: the sinks may have
    forgotten deletes from that time, and replaying older changes would bring those rows back."""
    keep = cfg.retention.tombstones
    if keep is None or origin == "stored":
        return
    horizon = datetime.now(UTC).timestamp() - keep
    since = datetime.fromtimestamp(horizon, UTC).isoformat(timespec="seconds")
    advice = (f"tombstones older than retention.tombstones ({keep / 86400:g} days) are pruned from the sinks, so "
              "replaying older changes could bring back rows deleted since. Replay from later, or raise "
              "retention.tombstones (keep it above the topics' retention.ms) and replay once the tombstones "
              "written from then on cover it")
    if interval is not None:
        if interval[0].timestamp() < horizon:
            raise ConfigError(f"pipeline {cfg.name!r}: the time range starts at {interval[0].isoformat()}, before "
                              f"{since}; {advice}")
        return
    first_kept = at_time(datetime.fromtimestamp(horizon, UTC), starts)
    early = {tp: (s, first_kept[tp]) for tp, s in starts.items() if s < first_kept[tp]}
    if early:
        where = ", ".join(f"{t}[{p}] from {s} (records from {since} start at {k})" for (t, p), (s, k) in sorted(early.items()))
        raise ConfigError(f"pipeline {cfg.name!r}: the replay starts at records older than {since}: {where}; {advice}")


def commit(cfg: PipelineConfig, run_id: str, store: StateStore | None = None) -> dict[str, Any]:
    store = store or offset_store(cfg)
    result = store.offsets.commit(cfg.name, run_id)
    for tp, reason in result.left.items():
        log.warning("%s[%s]: %s", tp[0], tp[1], reason)
    faults.checkpoint("after_commit")
    if result.advanced:
        from connectors.kafka.groups import mirror_offsets  # noqa: PLC0415

        mirror_offsets({**kafka_client(cfg), "group.id": cfg.group_id}, result.advanced)
    log.info("committed %s", {f"{t}[{p}]": o for (t, p), o in result.advanced.items()})
    pruned = apply_retention(cfg, store) if store.chores.due(cfg.name, "retention", RETENTION_EVERY) else {}
    return {"advanced": {f"{t}:{p}": o for (t, p), o in result.advanced.items()},
            "left": {f"{t}:{p}": r for (t, p), r in result.left.items()}, "pruned": pruned}


def asset_events(cfg: PipelineConfig, run_id: str, store: StateStore | None = None) -> list[Any]:
    """The asset events of a committed window: one per sink target it changed (cdcflow/assets.py)."""
    from cdcflow.assets import window_events  # noqa: PLC0415

    window = (store or offset_store(cfg)).ledger.get_window(cfg.name, run_id)
    return window_events(cfg, window) if window is not None and window.status == "committed" else []


def run_window(cfg: PipelineConfig, run_id: str, params: Mapping[str, Any] | None = None,
               store: StateStore | None = None, spark: Any = None) -> dict[str, Any]:
    """plan + process + commit in this process (CLI and tests; the DAG runs them as tasks)."""
    store = store or offset_store(cfg)
    plan(cfg, run_id, params, store)
    stats = process(cfg, run_id, params, store, spark)
    faults.checkpoint("after_sinks")
    stats["commit"] = commit(cfg, run_id, store)
    return stats
