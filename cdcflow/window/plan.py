"""Plan: the window fixed in the ledger before any record is read.

Per partition: the start offset (stored, initial, or given as ``start_offsets`` / ``start_time``)
and its share of ``max_records``; for a time range (a backfill run's data interval, ``start_time`` +
``end_time``, or an aligned window's interval end) also the offset where the read stops.
Idempotent per run id, so a cleared or retried run gets the same window.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cdcflow.config import PipelineConfig
from cdcflow.errors import ConfigError, OffsetOutOfRange, PipelineStopped
from cdcflow.run_params import RunParams
from cdcflow.state import Origin, PartitionWindow, StateStore, TopicPartition, WindowPlan
from cdcflow.window.clients import Clients, source_topics, stored_offsets

log = logging.getLogger("cdcflow.runner")


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
         store: StateStore | None = None, run: AirflowRun | None = None,
         clients: Clients | None = None) -> WindowPlan:
    p = RunParams.parse(params, cfg)
    clients = clients or Clients(cfg)
    store = store or clients.store()
    existing = store.ledger.get_window(cfg.name, run_id)
    if existing is not None:
        log.info("run %s already has a window (status %s): reusing it", run_id, existing.status)
        return existing
    if store.operator.get_state(cfg.name) == "stopped":
        raise PipelineStopped(f"pipeline {cfg.name!r} is STOPPED: no window is planned until an operator "
                              f"resumes it (the cdcflow page, PUT /cdcflow/connectors/{cfg.name}/resume, or "
                              "`cdcflow resume`)")
    from connectors.kafka.reader import discover  # noqa: PLC0415
    from connectors.kafka.time_search import offsets_for_time  # noqa: PLC0415

    conf = clients.consumer
    parts = {(s.topic, s.partition): s for s in discover(conf, source_topics(cfg))}
    stored = stored_offsets(cfg, store, clients)

    def at_time(moment: datetime, froms: Mapping[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
        """Per partition, the first offset whose record time is >= moment (searched from ``froms``)."""
        lows = froms or {tp: state.low for tp, state in parts.items()}
        return offsets_for_time(conf, [(t, q, lows[(t, q)], parts[(t, q)].end) for t, q in sorted(lows)],
                                _ms(moment), source=cfg.source.timestamp)

    origin, interval, starts, stops = _starts(cfg, p, run, parts, stored, at_time)
    _check_in_log(parts, starts)
    _check_replay_horizon(cfg, origin, starts, interval if origin != "stored" else None, at_time)
    shares = _shares(cfg, p, origin, parts, starts, stops)
    windows = [PartitionWindow(t, part, starts[(t, part)], shares[(t, part)], stop=stops.get((t, part)))
               for t, part in sorted(starts)]
    result = store.offsets.plan(cfg.name, run_id, origin, windows, interval)
    store.lag.record(cfg.name, "plan", {tp: (stored.get(tp), state.end) for tp, state in parts.items()}, run_id)
    span = f" (time range {interval[0].isoformat()} .. {interval[1].isoformat()})" if interval else ""
    log.info("planned %s window %s%s: %s", origin, run_id, span, ", ".join(
        f"{w.topic}[{w.partition}] from {w.start} up to {w.max_records}"
        + (f", stop at {w.stop}" if w.stop is not None else "") for w in result.partitions))
    return result


def _starts(cfg: PipelineConfig, p: RunParams, run: AirflowRun | None, parts: Mapping[TopicPartition, Any],
            stored: Mapping[TopicPartition, int], at_time: Any,
            ) -> tuple[Origin, tuple[datetime, datetime] | None, dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Where the window starts and, for a time range or an aligned window, where it stops: from a
    time range, start_offsets, start_time, or the stored offsets (initial_offsets where none)."""
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
    return origin, interval, starts, stops


def _check_in_log(parts: Mapping[TopicPartition, Any], starts: Mapping[TopicPartition, int]) -> None:
    """A start offset must still be in the log: not deleted by retention, not past its end."""
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


def _shares(cfg: PipelineConfig, p: RunParams, origin: Origin, parts: Mapping[TopicPartition, Any],
            starts: Mapping[TopicPartition, int], stops: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Each partition's share of the window's records: a time range is read whole, whatever the
    budget; else ``max_records`` split over the backlogs (:func:`allocate`)."""
    if origin in ("backfill", "time_range"):
        return {tp: max(0, stops[tp] - s) for tp, s in starts.items()}
    budget = p.max_records or cfg.window.max_records
    ends = {tp: stops.get(tp, parts[tp].end) for tp in starts}
    shares = allocate({tp: max(0, ends[tp] - s) for tp, s in starts.items()}, budget)
    if not cfg.window.stop_on_empty and not stops:
        spare = budget - sum(shares.values())
        for tp in sorted(shares):  # partitions may wait for new records until max_duration
            shares[tp] += spare // len(shares)
    return shares


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
