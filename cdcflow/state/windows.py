"""A window as the state records it: the partitions it reads (start, budget, stop), what the read
reached, its status, and what its commit did to the stored offsets."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from connectors.offset_rule import Mode

TopicPartition = tuple[str, int]
WindowStatus = Literal["planned", "read", "applied", "committed", "failed"]
Origin = Literal["stored", "params", "backfill", "time_range"]
MOVES_OFFSETS: frozenset[str] = frozenset({"stored", "params"})


@dataclass(frozen=True)
class PartitionWindow:
    topic: str
    partition: int
    start: int
    max_records: int
    end: int | None = None  # actual end (exclusive) once the read finished
    records: int | None = None
    stop: int | None = None  # the read stops here (exclusive) whatever the budget (a time range's end)

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class WindowPlan:
    pipeline: str
    run_id: str
    origin: Origin
    status: WindowStatus
    partitions: tuple[PartitionWindow, ...]
    attempt: int = 0
    message: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    interval: tuple[datetime, datetime] | None = None  # UTC, naive

    @property
    def moves_offsets(self) -> bool:
        """False for a backfill or time-range window: a replay of a slice, the live position stays."""
        return self.origin in MOVES_OFFSETS

    @property
    def offsets_mode(self) -> Mode:
        """How its commit moves the offsets (connectors/offset_rule.py): compare-and-set from offsets
        it was planned from, set for start offsets given explicitly, kept for a time-range replay."""
        return "keep" if not self.moves_offsets else "advance" if self.origin == "stored" else "set"

    @property
    def read_done(self) -> bool:
        return all(p.end is not None for p in self.partitions)

    @property
    def total_records(self) -> int:
        return sum(p.records or 0 for p in self.partitions)


@dataclass(frozen=True)
class CommitResult:
    advanced: dict[TopicPartition, int]
    left: dict[TopicPartition, str]  # partitions not moved, with the reason
