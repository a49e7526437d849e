"""A sink and a source in memory, for the unit tests: the sink interface's contract (connectors/base.py)
with nothing to connect to.

:class:`MemorySink` keeps what the real sinks promise, as far as the interface says it:

* ``write`` buffers; ``flush`` applies the buffer to the :class:`MemoryStore` (what a database is to
  the MySQL sink). ``close`` without ``flush`` drops what was not flushed: only what ``flush``
  confirmed may be committed.
* Per key, the newest version wins: an upsert replaces a row whose version is not newer (an equal
  version re-applies: unchanged when its values are the same, as in a replayed window, upserted when
  they differ, as in a range re-applied after a transform was fixed), else it is stale. A delete
  removes a row whose version is not newer and leaves a tombstone (the key and its version; a delete
  of a key not held is a success, and unchanged), so an upsert not newer than the key's tombstone is
  stale: a replay never goes back and never resurrects a deleted row. The counts are the real sinks'
  (:class:`connectors.base.SinkStats`). The store outlives the sink, as a table does, so a sink
  opened later on the same store (the next window, a replay) keeps to it.
* A change ``reject`` refuses (its data, as MySQL refuses a value) is returned as a failed record.
* Tombstones are pruned by age (:class:`connectors.base.PrunableSink`).

:class:`MemorySource` yields raw Kafka records as the readers do (the columns of
``connectors.kafka.reader.RAW_SCHEMA``), for the decoders of ``connectors/formats.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from connectors.base import Change, FailedRecord, Header, SinkStats, newest_per_key

Key = tuple[Any, ...]


@dataclass
class Row:
    values: dict[str, Any]
    version: int


@dataclass
class MemoryStore:
    """What the memory sinks write to, per table: its rows and its tombstones (version, when written)."""

    rows: dict[str, dict[Key, Row]] = field(default_factory=dict)
    tombstones: dict[str, dict[Key, tuple[int, float]]] = field(default_factory=dict)

    def table(self, name: str) -> dict[Key, dict[str, Any]]:
        """A table's rows as they are now: key -> values."""
        return {key: dict(row.values) for key, row in self.rows.get(name, {}).items()}

    def versions(self, name: str) -> dict[Key, int]:
        return {key: row.version for key, row in self.rows.get(name, {}).items()}


class MemorySink:
    """Writes changes to one table of a :class:`MemoryStore`; see the module docstring.
    ``reject``: why a change's data is refused (None: it is not), as a real sink's server would."""

    def __init__(self, name: str, table: str, store: MemoryStore | None = None,
                 reject: Callable[[Change], str | None] = lambda change: None) -> None:
        self.name = name
        self.table = table
        self.store = store if store is not None else MemoryStore()
        self.reject = reject
        self.stats = SinkStats()
        self._buffer: list[Change] = []
        self._open = False

    def open(self) -> None:
        self._open = True
        self.store.rows.setdefault(self.table, {})
        self.store.tombstones.setdefault(self.table, {})

    def write(self, changes: Sequence[Change]) -> list[FailedRecord]:
        assert self._open, "open() first"
        self._buffer.extend(changes)
        return []

    def flush(self) -> list[FailedRecord]:
        assert self._open, "open() first"
        batch, superseded = newest_per_key(self._buffer)
        self._buffer = []
        self.stats.stale += superseded
        failed: list[FailedRecord] = []
        for change in batch:
            why = self.reject(change)
            if why is not None:
                self.stats.failed += 1
                failed.append(change.failed("sink", f"memory:{self.name}", "memory.Rejected",
                                            f"table {self.table!r} rejected key {list(change.key)}: {why}"))
            elif change.op == "upsert":
                self._upsert(change)
            else:
                self._delete(change)
        return failed

    def close(self) -> None:
        self._buffer = []  # not flushed: not written
        self._open = False

    def prune_tombstones(self, older_than_s: float) -> int:
        """Forget the tombstones written more than ``older_than_s`` ago; returns how many."""
        tombs = self.store.tombstones.get(self.table, {})
        cutoff = time.time() - older_than_s
        old = [key for key, (_version, at) in tombs.items() if at < cutoff]
        for key in old:
            del tombs[key]
        return len(old)

    def _upsert(self, change: Change) -> None:
        rows, tombs = self.store.rows[self.table], self.store.tombstones[self.table]
        row, tomb = rows.get(change.key), tombs.get(change.key)
        if (row is not None and row.version > change.version) or (tomb is not None and tomb[0] >= change.version):
            self.stats.stale += 1
            return
        if row is not None and row.version == change.version and row.values == change.values:
            self.stats.unchanged += 1
            return
        rows[change.key] = Row(dict(change.values), change.version)
        self.stats.upserted += 1
        self.stats.count(self.table, upserted=1)

    def _delete(self, change: Change) -> None:
        rows, tombs = self.store.rows[self.table], self.store.tombstones[self.table]
        newest = max(change.version, tombs.get(change.key, (change.version, 0.0))[0])
        tombs[change.key] = (newest, time.time())
        row = rows.get(change.key)
        if row is not None and row.version > change.version:  # a newer row stays
            self.stats.stale += 1
            return
        if row is None:  # nothing to delete: older than the key's tombstone, or not held at all
            if newest > change.version:
                self.stats.stale += 1
            else:
                self.stats.unchanged += 1
            return
        rows.pop(change.key)
        self.stats.deleted += 1
        self.stats.count(self.table, deleted=1)


@dataclass(frozen=True)
class Record:
    """A Kafka record as a source holds it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = 0  # Kafka ms
    headers: Sequence[Header] = ()


class MemorySource:
    """Raw records in memory, read in batches as the Kafka readers give them to the decoders."""

    def __init__(self, records: Sequence[Record]) -> None:
        self.records = list(records)

    def batches(self, size: int = 1000) -> Iterator[pa.RecordBatch]:
        for start in range(0, len(self.records), size):
            yield self.batch(start, start + size)

    def batch(self, start: int = 0, end: int | None = None) -> pa.RecordBatch:
        """The records from ``start`` to ``end`` as one batch (empty when there are none)."""
        from connectors.kafka.reader import RAW_SCHEMA  # here: the memory sink alone needs no Kafka client

        part = self.records[start:end]
        return pa.RecordBatch.from_pydict({
            "topic": [r.topic for r in part], "partition": [r.partition for r in part],
            "offset": [r.offset for r in part], "timestamp": [r.timestamp for r in part],
            "key": [r.key for r in part], "value": [r.value for r in part],
            "headers": [[{"key": k, "value": v} for k, v in r.headers] for r in part]}, schema=RAW_SCHEMA)
