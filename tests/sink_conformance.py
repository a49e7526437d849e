"""The sink conformance suite: what connectors/base.py promises, asserted the same way for every sink
through its own read-back (the values it holds, never counts).

A sink passes by subclassing :class:`SinkConformance` in a test module and giving a ``subject``
fixture: a :class:`Subject` that opens sinks on one target (a table, an index, a memory store) and
reads that target back. tests/unit/connectors/test_sink_conformance.py runs it for the memory sink;
tests/integration/connectors/test_sink_conformance.py for MySQL (both apply paths) and Elasticsearch.

The suite's changes are rows ``(op, version, id, name, amount, day, at, note)``; each subject turns
them into its sink's own input, the window's sink frame as the writer task gives it to that sink
(:func:`frame`: the raw columns, ``change_op``, ``version`` and the typed columns ``c_0``…).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any, NamedTuple

import pyarrow as pa

from connectors.base import FailedRecord, Sink
from connectors.mysql.config import MySqlSinkConfig

COLUMNS = [{"name": "id", "type": "BIGINT"}, {"name": "name", "type": "VARCHAR(64)"},
           {"name": "amount", "type": "DECIMAL(12,4)"}, {"name": "day", "type": "DATE"},
           {"name": "at", "type": "DATETIME(6)"}, {"name": "note", "type": "TEXT"}]
NAMES = [c["name"] for c in COLUMNS]
TYPES = [pa.int64(), pa.string(), pa.decimal128(12, 4), pa.date32(), pa.timestamp("us"), pa.string()]
# Elasticsearch: the same fields in a document (decimals as their text, dates and times in ISO 8601)
MAPPING = {"properties": {"id": {"type": "long"}, "name": {"type": "keyword"}, "amount": {"type": "keyword"},
                          "day": {"type": "date"}, "at": {"type": "date_nanos"}, "note": {"type": "text"}}}

Change = tuple[Any, ...]  # (op, version, id, name, amount, day, at, note)


class Counts(NamedTuple):
    """What a sink counted (connectors.base.SinkStats): every change exactly once."""

    upserted: int = 0
    deleted: int = 0
    stale: int = 0
    unchanged: int = 0


def counts(sink: Sink) -> Counts:
    s = sink.stats
    return Counts(s.upserted, s.deleted, s.stale, s.unchanged)


def table_config(table: str, **extra: Any) -> MySqlSinkConfig:
    return MySqlSinkConfig(type="mysql", name="conformance", table=table, primary_key=["id"], columns=COLUMNS,
                           create_table=True, **extra)


def _raw(n: int) -> dict[str, Any]:
    """The raw Kafka columns every sink frame carries (a rejected change's bytes for the DLQ)."""
    return {"topic": ["t"] * n, "partition": [0] * n, "offset": list(range(n)),
            "key": pa.array([b"k"] * n, pa.binary()), "value": pa.array([b"v"] * n, pa.binary()),
            "headers": pa.array([[]] * n, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))}


def frame(rows: list[Change]) -> pa.RecordBatch:
    """A MySQL table's sink frame (tests/integration/test_mysql_sink.batch, with these columns)."""
    cols = list(zip(*rows, strict=True)) if rows else [()] * (2 + len(COLUMNS))
    return pa.RecordBatch.from_pydict({
        **_raw(len(rows)), "change_op": pa.array(cols[0], pa.string()), "version": pa.array(cols[1], pa.int64()),
        **{f"c_{i}": pa.array(cols[2 + i], t) for i, t in enumerate(TYPES)}})


def document(row: Change) -> str:
    values = dict(zip(NAMES, row[2:], strict=True))
    return json.dumps({k: (str(v) if isinstance(v, Decimal) else v.isoformat() if isinstance(v, date) else v)
                       for k, v in values.items()}, ensure_ascii=False)


def document_frame(index: str, rows: list[Change]) -> pa.RecordBatch:
    """An index's sink frame: c_0 the index, c_1 the document id, c_2 the document (JSON)."""
    return pa.RecordBatch.from_pydict({
        **_raw(len(rows)), "change_op": pa.array([r[0] for r in rows], pa.string()),
        "version": pa.array([r[1] for r in rows], pa.int64()), "c_0": pa.array([index] * len(rows), pa.string()),
        "c_1": pa.array([str(r[2]) for r in rows], pa.string()),
        "c_2": pa.array([document(r) if r[0] == "upsert" else None for r in rows], pa.string())})


def from_document(doc: dict[str, Any]) -> dict[str, Any]:
    """A document read back, with the suite's types."""
    out = {name: doc.get(name) for name in NAMES}
    out["amount"] = None if out["amount"] is None else Decimal(out["amount"])
    out["day"] = None if out["day"] is None else date.fromisoformat(out["day"])
    out["at"] = None if out["at"] is None else datetime.fromisoformat(out["at"])
    return out


@dataclass
class Subject:
    """A sink under test: ``make`` opens a new sink on the subject's one target (each call is a later
    window, or a replay, on the same table); ``feed`` writes the suite's rows to a sink in its own
    input (without flushing); ``read`` is the target as the sink's system holds it: id -> values."""

    make: Callable[[], Sink]
    feed: Callable[[Sink, list[Change]], list[FailedRecord]]
    read: Callable[[], dict[int, dict[str, Any]]]
    opened: list[Sink] = field(default_factory=list)

    def open(self) -> Sink:
        sink = self.make()
        sink.open()
        self.opened.append(sink)
        return sink

    def apply(self, rows: list[Change], sink: Sink | None = None) -> Counts:
        """``rows`` written and flushed by ``sink`` (else by a new one, closed after), none rejected;
        returns what the sink counted of them (:data:`Counts`)."""
        own = sink is None
        sink = sink or self.open()
        before = counts(sink)
        try:
            assert self.feed(sink, rows) + sink.flush() == []
        finally:
            if own:
                sink.close()
        after = counts(sink)
        return Counts(*(a - b for a, b in zip(after, before, strict=True)))

    def close_all(self) -> None:
        for sink in self.opened:
            sink.close()


def values(row: Change) -> dict[str, Any]:
    return dict(zip(NAMES, row[2:], strict=True))


AT = datetime(2024, 2, 29, 23, 59, 58, 123456)
FIRST = ("upsert", 10, 1, "Zoë 日本 \U0001F600", Decimal("12345678.9012"), date(2024, 2, 29), AT, "it's \"quoted\"")
SECOND = ("upsert", 11, 2, "plain", Decimal("-0.0001"), date(1970, 1, 1), datetime(2000, 1, 1, 0, 0, 0, 1), None)
NULLS = ("upsert", 12, 3, None, None, None, None, None)  # every nullable column null


class SinkConformance:
    """The contract every sink keeps (connectors/base.py). Subclasses give a ``subject`` fixture.
    Each write's counts are asserted exactly: they are what the sink's server reports (issue 40)."""

    def test_upserts_read_back_with_their_values(self, subject: Subject) -> None:
        assert subject.apply([FIRST, SECOND, NULLS]) == Counts(upserted=3)
        assert subject.read() == {1: values(FIRST), 2: values(SECOND), 3: values(NULLS)}

    def test_a_newer_upsert_replaces_every_column(self, subject: Subject) -> None:
        assert subject.apply([FIRST, SECOND]) == Counts(upserted=2)
        newer = ("upsert", 20, 1, "renamed", Decimal("1.5000"), date(2025, 1, 2), None, None)
        assert subject.apply([newer]) == Counts(upserted=1)
        assert subject.read() == {1: values(newer), 2: values(SECOND)}

    def test_a_delete_removes_the_row_and_a_delete_of_an_unknown_key_is_a_success(self, subject: Subject) -> None:
        subject.apply([FIRST, SECOND])
        deletes = [("delete", 20, 1, None, None, None, None, None), ("delete", 20, 99, None, None, None, None, None)]
        assert subject.apply(deletes) == Counts(deleted=1, unchanged=1)  # key 99 was not there: no deletion
        assert subject.read() == {2: values(SECOND)}
        assert subject.apply(deletes) == Counts(unchanged=2)  # the same deletes again

    def test_an_older_version_never_overwrites_a_newer_one(self, subject: Subject) -> None:
        assert subject.apply([FIRST]) == Counts(upserted=1)
        older = ("upsert", 5, 1, "older", Decimal(1), None, None, None)  # a replay of an older window
        assert subject.apply([older]) == Counts(stale=1)
        assert subject.read() == {1: values(FIRST)}
        assert subject.apply([FIRST]) == Counts(unchanged=1)  # the same version again: a replay of the same window
        assert subject.read() == {1: values(FIRST)}

    def test_an_equal_version_with_other_values_is_a_change(self, subject: Subject) -> None:
        """A range re-applied after a transform was fixed: the same versions, other values."""
        subject.apply([FIRST, SECOND])
        fixed = (*FIRST[:3], "fixed by a transform", *FIRST[4:])
        assert subject.apply([fixed, SECOND]) == Counts(upserted=1, unchanged=1)
        assert subject.read() == {1: values(fixed), 2: values(SECOND)}

    def test_an_older_delete_leaves_a_newer_row(self, subject: Subject) -> None:
        subject.apply([FIRST])
        assert subject.apply([("delete", 5, 1, None, None, None, None, None)]) == Counts(stale=1)
        assert subject.read() == {1: values(FIRST)}

    def test_a_replay_never_resurrects_a_deleted_row(self, subject: Subject) -> None:
        subject.apply([FIRST, SECOND])
        assert subject.apply([("delete", 30, 1, None, None, None, None, None)]) == Counts(deleted=1)
        same = ("upsert", 30, 1, "same version as the delete", None, None, None, None)
        assert subject.apply([FIRST]) == Counts(stale=1)
        assert subject.apply([same]) == Counts(stale=1)
        assert subject.read() == {2: values(SECOND)}
        later = ("upsert", 31, 1, "inserted again, later", Decimal("2.0000"), None, None, None)
        assert subject.apply([later]) == Counts(upserted=1)
        assert subject.read() == {1: values(later), 2: values(SECOND)}
        # the delete replayed after the row came back: older than the row
        assert subject.apply([("delete", 30, 1, None, None, None, None, None)]) == Counts(stale=1)
        assert subject.read() == {1: values(later), 2: values(SECOND)}

    def test_a_full_replay_changes_nothing_and_counts_no_change(self, subject: Subject) -> None:
        """Every window of a topic applied, then all of them again, in order: 0 upserted, 0 deleted,
        each change stale (the target holds a newer state of its key) or unchanged (the same)."""
        windows = [
            [FIRST, SECOND, NULLS],
            [("upsert", 20, 1, "second version", Decimal("2.0000"), None, None, None),
             ("delete", 21, 2, None, None, None, None, None)],
            [("delete", 22, 3, None, None, None, None, None),
             ("upsert", 23, 4, "four", None, None, None, None)],
            [("upsert", 24, 2, "two again", None, None, None, None)],
        ]
        applied = [subject.apply(w) for w in windows]
        assert applied == [Counts(upserted=3), Counts(upserted=1, deleted=1), Counts(upserted=1, deleted=1),
                           Counts(upserted=1)]
        state = subject.read()
        replayed = [subject.apply(w) for w in windows]
        assert replayed == [Counts(stale=3), Counts(unchanged=1, stale=1), Counts(unchanged=2),
                            Counts(unchanged=1)]
        assert subject.read() == state

    def test_several_changes_of_one_key_in_one_batch_keep_the_newest(self, subject: Subject) -> None:
        v1 = ("upsert", 1, 1, "one", None, None, None, None)
        v3 = ("upsert", 3, 1, "three", Decimal("3.0000"), date(2024, 3, 3), AT, "last")
        v2 = ("upsert", 2, 1, "two", None, None, None, None)
        # reduced to the newest per key; the others are stale (connectors.base.newest_per_key)
        assert subject.apply([v1, v3, v2, SECOND]) == Counts(upserted=2, stale=2)
        assert subject.read() == {1: values(v3), 2: values(SECOND)}

    def test_a_flushed_write_outlives_its_sink_and_flush_and_close_repeat(self, subject: Subject) -> None:
        sink = subject.open()
        assert subject.feed(sink, [FIRST]) + sink.flush() == []
        assert sink.flush() == []  # nothing left to flush
        sink.close()
        sink.close()
        assert subject.read() == {1: values(FIRST)}
        again = subject.open()  # a later window on the same target
        assert again.flush() == []
        assert subject.apply([SECOND], again) == Counts(upserted=1)
        again.close()
        assert subject.read() == {1: values(FIRST), 2: values(SECOND)}
