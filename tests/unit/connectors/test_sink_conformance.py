"""The sink conformance suite (tests/sink_conformance.py) for the memory sink, which needs no
service; tests/integration/connectors/test_sink_conformance.py runs the same suite for MySQL and Elasticsearch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from connectors.base import ArrowSink, OffsetSink, PrunableSink, Sink
from connectors.memory import MemorySink, MemoryStore
from connectors.mysql.sink import arrow_changes
from tests.sink_conformance import Change, SinkConformance, Subject, frame, table_config

CONFIG = table_config("conformance")


def memory_subject() -> Subject:
    store = MemoryStore()

    def feed(sink: Sink, rows: list[Change]) -> list:
        return sink.write(arrow_changes(frame(rows), CONFIG))  # the Changes the MySQL row path takes

    return Subject(make=lambda: MemorySink("memory", CONFIG.table, store), feed=feed,
                   read=lambda: {key[0]: values for key, values in store.table(CONFIG.table).items()})


class TestMemorySink(SinkConformance):
    @pytest.fixture(params=["memory"])
    def subject(self) -> Iterator[Subject]:
        subject = memory_subject()
        yield subject
        subject.close_all()


def test_the_memory_sink_declares_tombstone_pruning_only() -> None:
    sink = MemorySink("memory", "t")
    assert (isinstance(sink, PrunableSink), isinstance(sink, ArrowSink), isinstance(sink, OffsetSink)) == (
        True, False, False)


def test_only_what_flush_confirmed_is_written() -> None:
    subject = memory_subject()
    sink = subject.open()
    subject.feed(sink, [("upsert", 1, 1, "kept", None, None, None, None)])
    assert sink.flush() == []
    subject.feed(sink, [("upsert", 2, 2, "never flushed", None, None, None, None)])
    sink.close()
    assert list(subject.read()) == [1]


def test_a_rejected_change_is_a_failed_record_and_the_others_are_written() -> None:
    store = MemoryStore()
    sink = MemorySink("memory", "t", store, reject=lambda c: "too long" if len(c.values["name"] or "") > 3 else None)
    sink.open()
    changes = arrow_changes(frame([("upsert", 1, 1, "ok", None, None, None, None),
                                   ("upsert", 1, 2, "too long", None, None, None, None)]), CONFIG)
    failed = sink.write(changes) + sink.flush()
    assert [(f.offset, f.stage, f.component, f.message) for f in failed] == [
        (1, "sink", "memory:memory", "table 't' rejected key [2]: too long")]
    assert list(store.table("t")) == [(1,)] and sink.stats.failed == 1


def test_pruned_tombstones_no_longer_guard() -> None:
    subject = memory_subject()
    subject.apply([("upsert", 1, 1, "a", None, None, None, None)])
    subject.apply([("delete", 5, 1, None, None, None, None, None)])
    sink = subject.open()
    assert isinstance(sink, MemorySink) and sink.prune_tombstones(3600) == 0
    assert sink.prune_tombstones(-1) == 1  # every tombstone is older than a second from now
    subject.apply([("upsert", 3, 1, "after retention", None, None, None, None)], sink)
    assert subject.read() == {1: {"id": 1, "name": "after retention", "amount": None, "day": None, "at": None,
                                  "note": None}}
