"""The offset store's core interface: where a pipeline's windows start, and how a window is
planned, read and committed. In the spirit of Kafka Connect's OffsetBackingStore, with an
in-memory twin beside it (cdcflow/state/memory.py) as Connect has MemoryOffsetBackingStore: the
same unit tests run against both, so the twin stays a faithful stand-in for the SQL store."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from cdcflow.state.windows import CommitResult, Origin, PartitionWindow, TopicPartition, WindowPlan


class OffsetStore(Protocol):
    def load(self, pipeline: str) -> dict[TopicPartition, int]:
        """The next offset to read of each partition that has one."""
        ...

    def plan(self, pipeline: str, run_id: str, origin: Origin, partitions: list[PartitionWindow],
             interval: tuple[datetime, datetime] | None = None) -> WindowPlan:
        """Record the window before any record is read; a run planned already keeps its window."""
        ...

    def record_read(self, pipeline: str, run_id: str, ends: Mapping[TopicPartition, tuple[int, int]]) -> None:
        """The (end offset, records) each partition's read reached: a retry reads up to there, no further."""
        ...

    def commit(self, pipeline: str, run_id: str) -> CommitResult:
        """Move the offsets to the window's ends by connectors/offset_rule.py (WindowFailed when the
        window was not planned or not read completely)."""
        ...
