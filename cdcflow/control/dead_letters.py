"""Dead letters: the newest records of a pipeline's dead-letter topic, paged to older ones, one record
with its trace, and a redrive that sends records back to their topic (or another) at most once each (the
offset store's redrive ledger records who sent which, and when)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cdcflow.config import PipelineConfig
from cdcflow.control.base import ControlBase
from cdcflow.control.pipelines import store_for, valid
from cdcflow.errors import BadRequest, CdcflowError, Conflict, NotFound
from cdcflow.state import StateStore
from cdcflow.window import clients


@dataclass
class DlqPage:
    topic: str
    records: list[Any]  # connectors.kafka.dlq.DeadLetter
    total: int
    next_before: dict[int, int] | None
    redriven: dict[tuple[int, int], Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RedriveResult:
    request_id: str
    redriven: list[dict[str, Any]]
    already: list[dict[str, Any]]
    matched: int


class DeadLetters(ControlBase):
    """Read and redrive dead letters."""

    def _dlq(self, name: str) -> tuple[PipelineConfig, str]:
        cfg = valid(name)
        if not cfg.errors.dlq_topic:
            raise BadRequest(f"pipeline {cfg.name!r} has no dead-letter topic (errors.dlq_topic)")
        return cfg, cfg.errors.dlq_topic

    def dlq(self, name: str, limit: int = 20, before: Mapping[int, int] | None = None) -> DlqPage:
        """The newest dead letters, newest first; ``next_before`` pages to older ones."""
        from connectors.kafka.dlq import describe, read_dead_letters  # noqa: PLC0415

        if not 1 <= limit <= 500:
            raise BadRequest(f"limit: expected 1..500, got {limit}")
        cfg, topic = self._dlq(name)
        conf = clients.consumer_conf(cfg)
        parts = describe(conf, topic)
        total = sum(p.end - p.low for p in parts)
        ends = {p.partition: min(p.end, (before or {}).get(p.partition, p.end)) for p in parts}
        ranges = {p.partition: (max(p.low, ends[p.partition] - limit), ends[p.partition]) for p in parts}
        records = read_dead_letters(conf, topic, ranges)
        records.sort(key=lambda d: (d.timestamp or 0, d.partition, d.offset), reverse=True)
        page = records[:limit]
        nxt = dict(ends)
        for d in page:
            nxt[d.partition] = min(nxt[d.partition], d.offset)
        more = any(nxt[p.partition] > p.low for p in parts)
        done = store_for(cfg).operator.redrives(cfg.name, topic)
        return DlqPage(topic, page, total, nxt if more else None,
                       {(d.partition, d.offset): done[(d.partition, d.offset)] for d in page
                        if (d.partition, d.offset) in done
                        and done[(d.partition, d.offset)].fingerprint == d.fingerprint})

    def dlq_record(self, name: str, partition: int, offset: int) -> Any:
        from connectors.kafka.dlq import read_dead_letters  # noqa: PLC0415

        cfg, topic = self._dlq(name)
        found = read_dead_letters(clients.consumer_conf(cfg), topic, {partition: (offset, offset + 1)})
        if not found:
            raise NotFound(f"no record at offset {offset} of partition {partition} of DLQ topic {topic!r}")
        return found[0]

    def redrive(self, name: str, user: str, *, partition: int | None = None, start: int | None = None,
                end: int | None = None, stage: str | None = None, error_class: str | None = None,
                target_topic: str | None = None) -> RedriveResult:
        """Send dead letters back: all (no range), or ``partition`` from ``start`` to ``end``
        (inclusive), optionally only those of a stage or error class; to their original topic or
        ``target_topic``. A record already redriven is never sent again; if that leaves nothing to
        send, Conflict says when and by whom it was."""
        from connectors.kafka.client import producer_config  # noqa: PLC0415
        from connectors.kafka.dlq import REDRIVE_HEADER, republish  # noqa: PLC0415

        cfg, topic = self._dlq(name)
        if (start is not None or end is not None) and partition is None:
            raise BadRequest("a range (start/end) needs its DLQ partition")
        if start is not None and end is not None and end < start:
            raise BadRequest(f"end {end} is before start {start}")
        if target_topic is not None and target_topic == topic:
            raise BadRequest("redriving into the dead-letter topic itself would loop")
        records = _matching(cfg, topic, partition, start, end, stage, error_class)
        store = store_for(cfg)
        already, todo = _not_yet_redriven(store, cfg, topic, records)
        missing = [d for d in todo if not (target_topic or d.original_topic)]
        if missing:
            raise BadRequest(f"{len(missing)} dead letters have no __connect.errors.topic header (e.g. offset "
                             f"{missing[0].offset}); give a target topic")
        request_id = uuid.uuid4().hex[:16]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        plan = [(target_topic or d.original_topic or "", d) for d in todo]
        store.operator.claim_redrives(cfg.name, topic, [(d.partition, d.offset, t, d.fingerprint) for t, d in plan],
                             request_id, user)
        marker = lambda d: (REDRIVE_HEADER, json.dumps(  # noqa: E731
            {"dlq": f"{topic}/{d.partition}/{d.offset}", "request": request_id, "by": user, "at": now}).encode())
        try:
            republish(producer_config(clients.kafka_client(cfg)), [(t, d, marker(d)) for t, d in plan])
        except CdcflowError:
            # nothing confirmed: Kafka's idempotent producer may still have written some, so the claims
            # stay "pending" and a later request reports them instead of sending twice
            raise
        store.operator.finish_redrives(cfg.name, request_id)
        return RedriveResult(request_id, [{"partition": d.partition, "offset": d.offset, "target_topic": t,
                                           "original": f"{d.original_topic}[{d.original_partition}]@{d.original_offset}"}
                                          for t, d in plan], already, len(records))


def _matching(cfg: PipelineConfig, topic: str, partition: int | None, start: int | None, end: int | None,
              stage: str | None, error_class: str | None) -> list[Any]:
    """The dead letters a redrive selects (NotFound when none, or when the partition does not exist)."""
    from connectors.kafka.dlq import describe, read_dead_letters  # noqa: PLC0415

    conf = clients.consumer_conf(cfg)
    parts = {p.partition: p for p in describe(conf, topic)}
    if partition is not None and partition not in parts:
        raise NotFound(f"DLQ topic {topic!r} has no partition {partition} (partitions: {sorted(parts)})")
    ranges = {p.partition: (max(p.low, start if start is not None and p.partition == partition else p.low),
                            min(p.end, end + 1 if end is not None and p.partition == partition else p.end))
              for p in parts.values() if partition is None or p.partition == partition}
    records = [d for d in read_dead_letters(conf, topic, ranges)
               if (stage is None or d.stage == stage) and (error_class is None or d.error_class == error_class)]
    if not records:
        raise NotFound(f"no dead letter in {topic!r} matches {_describe_selection(partition, start, end, stage, error_class)}")
    return records


def _not_yet_redriven(store: StateStore, cfg: PipelineConfig, topic: str,
                      records: list[Any]) -> tuple[list[dict[str, Any]], list[Any]]:
    """The records redriven already (as the answer reports them) and those to send; Conflict when every
    one was redriven already."""
    prints = {(d.partition, d.offset): d.fingerprint for d in records}
    done = {k: r for k, r in store.operator.redrives(cfg.name, topic).items() if prints.get(k) == r.fingerprint}
    already = [{"partition": d.partition, "offset": d.offset, "status": done[(d.partition, d.offset)].status,
                "target_topic": done[(d.partition, d.offset)].target_topic,
                "by": done[(d.partition, d.offset)].requested_by,
                "at": done[(d.partition, d.offset)].updated_at.isoformat() + "Z"}
               for d in records if (d.partition, d.offset) in done]
    todo = [d for d in records if (d.partition, d.offset) not in done]
    if not todo:
        first = already[0]
        raise Conflict(f"all {len(already)} matching dead letters were redriven already (e.g. partition "
                       f"{first['partition']} offset {first['offset']} to {first['target_topic']!r} by "
                       f"{first['by']} at {first['at']}, status {first['status']}); nothing was sent again")
    return already, todo

def _describe_selection(partition: int | None, start: int | None, end: int | None, stage: str | None,
                        error_class: str | None) -> str:
    parts = [f"partition {partition}" if partition is not None else "all partitions"]
    if start is not None or end is not None:
        parts.append(f"offsets {start if start is not None else 'first'}..{end if end is not None else 'last'}")
    if stage:
        parts.append(f"stage {stage!r}")
    if error_class:
        parts.append(f"error class {error_class!r}")
    return ", ".join(parts)

