"""An offset store in memory (:class:`cdcflow.state.protocol.OffsetStore`): the twin of the SQL
store for tests and for reasoning about the rule without a database. It keeps what the SQL store
keeps for load / plan / record_read / commit, and commits by the same rule
(connectors/offset_rule.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from cdcflow.state.offsets import committable, conflict_reason, kept_reason
from cdcflow.state.tables import naive_utc
from cdcflow.state.windows import CommitResult, Origin, PartitionWindow, TopicPartition, WindowPlan
from connectors.offset_rule import commit_outcome


class MemoryOffsetStore:
    def __init__(self) -> None:
        self._offsets: dict[str, dict[TopicPartition, tuple[int, str]]] = {}  # pipeline -> tp -> (offset, run)
        self._windows: dict[tuple[str, str], WindowPlan] = {}  # (pipeline, run id) -> window

    def load(self, pipeline: str) -> dict[TopicPartition, int]:
        return {tp: offset for tp, (offset, _run) in self._offsets.get(pipeline, {}).items()}

    def plan(self, pipeline: str, run_id: str, origin: Origin, partitions: list[PartitionWindow],
             interval: tuple[datetime, datetime] | None = None) -> WindowPlan:
        existing = self._windows.get((pipeline, run_id))
        if existing is not None:
            return existing
        window = WindowPlan(
            pipeline=pipeline, run_id=run_id, origin=origin, status="planned",
            # as the SQL store reads them back: without a read's end yet, by topic and partition
            partitions=tuple(replace(p, end=None, records=None) for p in sorted(partitions, key=lambda p: p.tp)),
            interval=(naive_utc(interval[0]), naive_utc(interval[1])) if interval else None)
        self._windows[(pipeline, run_id)] = window
        return window

    def record_read(self, pipeline: str, run_id: str, ends: Mapping[TopicPartition, tuple[int, int]]) -> None:
        window = self._windows.get((pipeline, run_id))
        if window is None:  # the SQL store's UPDATE finds no row either
            return
        parts = tuple(replace(p, end=ends[p.tp][0], records=ends[p.tp][1]) if p.tp in ends else p
                      for p in window.partitions)
        self._windows[(pipeline, run_id)] = replace(window, partitions=parts, status="read", message=None)

    def commit(self, pipeline: str, run_id: str) -> CommitResult:
        plan = committable(self._windows.get((pipeline, run_id)), pipeline, run_id)
        advanced: dict[TopicPartition, int] = {}
        left: dict[TopicPartition, str] = {}
        stored = self._offsets.setdefault(pipeline, {})
        for p in plan.partitions:
            assert p.end is not None
            outcome = commit_outcome(plan.offsets_mode, stored.get(p.tp), p.start, p.end, run_id)
            if outcome == "keep":
                left[p.tp] = kept_reason(plan)
            elif outcome == "conflict":
                left[p.tp] = conflict_reason(stored[p.tp], p.start)
            else:
                if outcome == "move":
                    stored[p.tp] = (p.end, run_id)
                advanced[p.tp] = p.end
        self._windows[(pipeline, run_id)] = replace(plan, status="committed", message=None)
        return CommitResult(advanced, left)
