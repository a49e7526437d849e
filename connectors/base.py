"""The sink interface: open / write / flush / close.

A sink receives the window's changes, already reduced to the last change per key. ``write`` may
buffer; ``flush`` makes everything written durable. Only what ``flush`` confirmed may be committed.
Records the sink rejects for their data are returned as :class:`FailedRecord` (they go to the DLQ);
anything else (an unreachable server, a missing table) raises and fails the window.

Every change carries a version from a monotonic source; a sink must never replace a newer version
with an older one and must never resurrect a row deleted at a newer version (replays are safe).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import pyarrow as pa

ChangeOp = Literal["upsert", "delete"]
Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class FailedRecord:
    """A record that cannot be processed, with its raw bytes and why (the dead-letter reporter,
    connectors/kafka/dlq.py, re-sends it with these as Kafka Connect's error-context headers)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[Header]
    stage: str  # "converter" | "transform" | "sink"
    component: str  # what was processing it (a sink name, the converter)
    error_class: str
    message: str
    stacktrace: str = ""
    extra_headers: Sequence[Header] = ()  # sink-specific context, e.g. the Elasticsearch error type


@dataclass(frozen=True)
class SourceRef:
    """Where a change came from, with its raw bytes (the DLQ re-sends them)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[Header] = ()


class RecordRef(Protocol):
    """What a change knows of its record: a :class:`SourceRef`, or a row of an Arrow batch read
    only when asked (:meth:`ArrowRecords.ref`)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[Header]: ...


class ArrowRecords:
    """The raw columns (topic, partition, offset, key, value, headers) of an Arrow batch, converted
    to Python only for the rows that ask: a rejected row needs its original bytes for the DLQ, the
    others never do."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch = batch
        self.topic = batch.column("topic").to_pylist()
        self.partition = batch.column("partition").to_pylist()
        self.offset = batch.column("offset").to_pylist()

    def ref(self, i: int) -> RecordRef:
        return _LazyRef(self, i)


class _LazyRef:
    __slots__ = ("_raw", "_i")

    def __init__(self, raw: ArrowRecords, i: int) -> None:
        self._raw, self._i = raw, i

    topic = property(lambda self: self._raw.topic[self._i])
    partition = property(lambda self: self._raw.partition[self._i])
    offset = property(lambda self: self._raw.offset[self._i])
    key = property(lambda self: self._raw.batch.column("key")[self._i].as_py())
    value = property(lambda self: self._raw.batch.column("value")[self._i].as_py())
    headers = property(lambda self: [(h["key"], h["value"])
                                     for h in self._raw.batch.column("headers")[self._i].as_py() or []])


@dataclass(frozen=True)
class Change:
    op: ChangeOp
    key: tuple[Any, ...]
    values: dict[str, Any]
    version: int
    source: RecordRef

    def failed(self, stage: str, component: str, error_class: str, message: str, trace: str = "",
               extra_headers: Sequence[Header] = ()) -> FailedRecord:
        s = self.source
        return FailedRecord(s.topic, s.partition, s.offset, s.key, s.value, s.headers, stage, component,
                            error_class, message, trace, extra_headers)


def newest_per_key(changes: Sequence[Change]) -> tuple[list[Change], int]:
    """The newest change of each key (of equal versions, the later one), in their order, and how many
    others there were. A window gives a sink one change per key; a caller that gives several in one
    write gets them reduced, the others counted as stale, the same in every sink."""
    best: dict[tuple[Any, ...], Change] = {}
    for change in changes:
        held = best.get(change.key)
        if held is None or change.version >= held.version:
            best[change.key] = change
    if len(best) == len(changes):
        return list(changes), 0
    kept = {id(c) for c in best.values()}
    return [c for c in changes if id(c) in kept], len(changes) - len(best)


@dataclass
class SinkStats:
    """What a sink did, as its server reports it. Every change it was given is counted once:

    * ``upserted``: a row or document inserted, or changed (MySQL's affected rows, Elasticsearch's
      ``created`` / ``updated``);
    * ``deleted``: a row or document that was there and is gone;
    * ``stale``: older than what the target holds (a newer row, or the key's tombstone): skipped;
    * ``unchanged``: what the target holds already (the same version and values; a delete of a key
      the target does not hold): a replay of an applied window is all stale or unchanged;
    * ``failed``: rejected for its data (to the DLQ).
    """

    upserted: int = 0
    deleted: int = 0
    stale: int = 0
    failed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    # per target that changed (a table, an index): [upserted, deleted]; the window's asset events
    changed: dict[str, list[int]] = field(default_factory=dict)
    unchanged: int = 0

    def add(self, other: SinkStats) -> None:
        self.upserted += other.upserted
        self.deleted += other.deleted
        self.stale += other.stale
        self.unchanged += other.unchanged
        self.failed += other.failed
        for key, value in other.extra.items():
            self.extra[key] = self.extra.get(key, 0) + value
        for target, (upserted, deleted) in other.changed.items():
            self.count(target, upserted, deleted)

    def count(self, target: str, upserted: int = 0, deleted: int = 0) -> None:
        if not upserted and not deleted:
            return
        mine = self.changed.setdefault(target, [0, 0])
        mine[0] += upserted
        mine[1] += deleted


class Sink(Protocol):
    name: str
    stats: SinkStats

    def open(self) -> None: ...

    def write(self, changes: Sequence[Change]) -> list[FailedRecord]: ...

    def flush(self) -> list[FailedRecord]: ...

    def close(self) -> None: ...


# The optional capabilities of a sink, each a protocol checked with isinstance (runtime_checkable).

@runtime_checkable
class PrunableSink(Sink, Protocol):
    """A sink that keeps tombstones (deleted keys with their version) and can forget old ones."""

    def prune_tombstones(self, older_than_s: float) -> int: ...


@runtime_checkable
class ArrowSink(Sink, Protocol):
    """A sink that takes the window's Arrow batches as they are (typed columns ``c_0``…,
    ``change_op``, ``version`` and the raw columns), for set-based writes with no per-row Python."""

    def write_arrow(self, batch: pa.RecordBatch) -> list[FailedRecord]: ...


@runtime_checkable
class OffsetSink(Sink, Protocol):
    """Exactly-once (``offset_store.sink``): a sink that writes a window's rows and its offsets in
    one transaction (connectors/mysql/offsets.py). ``begin_window`` returns False when this run's
    window committed already; ``commit_window`` commits rows and offsets together."""

    def open_for_offsets(self) -> None:
        """Connected for a window's offsets alone, its table as it is (instead of ``open``)."""

    def begin_window(self, commit: Any) -> bool: ...

    def commit_window(self, commit: Any, before_commit: Any = ...) -> dict[str, Any]: ...
