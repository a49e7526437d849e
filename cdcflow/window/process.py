"""Process: the planned window read, transformed and applied, on Spark.

A retry after the read replays exactly the recorded range. A failure marks the window failed in
the ledger (the breaker and a schema_changes pause also STOP the pipeline); no offset moves.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from datetime import UTC
from typing import Any

from cdcflow.config import PipelineConfig
from cdcflow.errors import CdcflowError, DeadLettersExceeded, SchemaChangePending, WindowFailed
from cdcflow.run_params import RunParams
from cdcflow.state import StateStore, TopicPartition, WindowPlan
from cdcflow.window import compose
from cdcflow.window.clients import Clients
from cdcflow.window.lease import writer_lease
from connectors import faults

log = logging.getLogger("cdcflow.runner")


REPLAY_DEADLINE = 86400.0  # a time range is read whole; a stalled broker still fails it (stall_timeout)


def process(cfg: PipelineConfig, run_id: str, params: Mapping[str, Any] | None = None,
            store: StateStore | None = None, spark: Any = None, clients: Clients | None = None) -> dict[str, Any]:
    """Read, transform and apply the planned window. Returns the window's statistics."""
    p = RunParams.parse(params, cfg)
    clients = clients or Clients(cfg)
    store = store or clients.store()
    window = store.ledger.get_window(cfg.name, run_id)
    if window is None:
        raise WindowFailed(f"run {run_id!r} of pipeline {cfg.name!r} has no planned window; run plan first")
    attempt = store.ledger.begin_attempt(cfg.name, run_id)
    if window.status == "committed":
        log.info("run %s was committed already: re-applying its range %s (sinks are idempotent)",
                 run_id, describe_window(window))
    asked = time.time()
    try:
        with writer_lease(store, cfg.name, run_id):
            held = time.time()
            stats = _process(cfg, window, p, store, spark, clients)
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


def _sent_before(cfg: PipelineConfig, window: WindowPlan, store: StateStore,
                 clients: Clients) -> frozenset[tuple[str, int, int, str]]:
    """The dead letters already in the DLQ for this window's records, so they are not sent twice:
    those of this run's earlier attempts and those of earlier runs over the same records that never
    committed (a run whose retries ran out, a window killed before its commit and then left)."""
    if not cfg.errors.dlq_topic or cfg.errors.tolerance != "all":
        return frozenset()
    earlier = store.ledger.runs_that_may_have_sent_dead_letters(cfg.name, window)
    runs = ([window.run_id] if window.attempt >= 1 else []) + earlier
    if not runs:
        return frozenset()
    from connectors.kafka.dlq import sent_dead_letters  # noqa: PLC0415

    created = min(c for c, _updated in store.ledger.window_times(cfg.name, runs).values())
    since_ms = int(created.replace(tzinfo=UTC).timestamp() * 1000) - 300_000  # producers' clocks may differ
    sent = sent_dead_letters(clients.consumer, cfg.errors.dlq_topic, frozenset(runs), since_ms)
    if sent:
        log.info("run %s: %d dead letters for its records were sent by %s; not sending them again",
                 window.run_id, len(sent), ", ".join(runs))
    return sent


def describe_window(window: WindowPlan) -> str:
    return ", ".join(f"{w.topic}[{w.partition}] {w.start}..{w.end if w.end is not None else '?'}"
                     for w in window.partitions)


def _process(cfg: PipelineConfig, window: WindowPlan, p: RunParams, store: StateStore,
             spark: Any, clients: Clients) -> dict[str, Any]:
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
    def session() -> Any:
        nonlocal spark
        if spark is None:
            from spark_jobs.session import get_spark  # noqa: PLC0415 - an empty window needs no Spark

            spark = get_spark(cfg.spark, app_name=f"cdcflow-{cfg.name}")
        return spark

    if not any(r.max_records > 0 for r in ranges):
        # nothing to read: the plan found every partition at its end (stop_on_empty)
        store.offsets.record_read(cfg.name, window.run_id, {(r.topic, r.partition): (r.start, 0) for r in ranges})
        empty: dict[str, Any] = {"records": 0, "dead_lettered": 0, "sinks": {}}
        if clients.documents:  # a backlog of documents carried over is rebuilt all the same
            empty["documents"] = compose.run_stage(cfg.name, window.run_id, clients.documents, {}, store, session)
        return {**empty, "seconds": round(time.time() - started, 3)}
    from spark_jobs.job import WindowJob  # noqa: PLC0415
    from spark_jobs.session import describe  # noqa: PLC0415
    from spark_jobs.window import run_window_job  # noqa: PLC0415

    job = WindowJob(
        pipeline=cfg.name, run_id=window.run_id, consumer_conf=clients.consumer,
        producer_conf=clients.producer, ranges=ranges,
        sinks=tuple(t for t in clients.targets if not compose.composed(t)),
        documents=compose.document_jobs(clients.documents),
        versioning=cfg.versioning, tolerance=cfg.errors.tolerance, dlq_topic=cfg.errors.dlq_topic,
        context_headers=cfg.errors.context_headers, transforms=tuple(cfg.transforms),
        key_converter=cfg.source.key_converter, value_converter=cfg.source.value_converter, registry=clients.registry,
        dead_letters_sent=_sent_before(cfg, window, store, clients), faults=faults.active(),
        offsets_sink=cfg.offset_store.sink, spark_timeout=cfg.spark.timeout, max_dead_letters=cfg.errors.max_dead_letters,
        source_format=cfg.source.format, truncate=cfg.truncate, schema_changes=cfg.schema_changes,
        schema_decisions=_schema_decisions(cfg, store),
        column_wise_min=int(os.environ["CDCFLOW_COLUMN_WISE_MIN"]) if os.environ.get("CDCFLOW_COLUMN_WISE_MIN") else None,
        offsets_mode=window.offsets_mode)
    faults.checkpoint("before_read")

    def on_read(ends: dict[TopicPartition, tuple[int, int]]) -> None:
        store.offsets.record_read(cfg.name, window.run_id, ends)
        faults.checkpoint("after_read")
        starts = {(r.topic, r.partition): r.start for r in ranges}
        log.info("read %s records: %s", sum(c for _e, c in ends.values()),
                 ", ".join(f"{t}[{p}] {starts[(t, p)]}..{e}" for (t, p), (e, _c) in sorted(ends.items())))

    result = run_window_job(session(), job, on_read)
    if result.sink_offsets and "already" in result.sink_offsets:
        log.info("run %s: its window and offsets were committed in the MySQL sink %r by an earlier attempt; "
                 "nothing written there again", window.run_id, cfg.offset_store.sink)
    stats = result.stats()
    if clients.documents:  # after every other sink, before the commit (cdcflow/window/compose.py)
        with result.timed("documents"):
            stats["documents"] = compose.run_stage(cfg.name, window.run_id, clients.documents, result.seeds, store,
                                                   session)
        stats["stages"] = {k: round(v, 3) for k, v in result.stages.items()}
    stats["seconds"] = round(time.time() - started, 3)
    stats["spark"] = describe(spark)
    log.info("window %s applied: %s", window.run_id, stats)
    return stats
