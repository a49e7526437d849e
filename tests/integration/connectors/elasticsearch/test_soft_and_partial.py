"""Issue 44 on a real Elasticsearch 8: ``delete: soft`` and partial updates through the sink, the
documents, their fields and their ``_version`` read back.

Versions are ``source_ts_ms`` versions (ts_ms * 2^20 + offset low bits, docs/semantics.md): the
soft delete's field holds the delete's source time.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from cdcflow.connections import get_connection
from connectors.base import Change, SourceRef
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.elasticsearch.sink import TOMBSTONES, ElasticsearchSink, tombstone_id
from connectors.partial import DEBEZIUM_UNAVAILABLE
from tests.helpers import es_client, es_docs, unique

pytestmark = [pytest.mark.integration, pytest.mark.services("elasticsearch")]

SHIFT = 1 << 20
MAPPING = {"properties": {"id": {"type": "long"}, "name": {"type": "keyword"}, "body": {"type": "text"},
                          "qty": {"type": "integer"}, "blob": {"type": "binary"}}}


def v(ts_ms: int, offset: int = 0) -> int:
    return ts_ms * SHIFT + offset


def upsert(index: str, version: int, **doc: Any) -> Change:
    return Change("upsert", (index, str(doc["id"])), {"doc": json.dumps(doc)}, version,
                  SourceRef("t", 0, version % SHIFT, b"k", b"v"))


def delete(index: str, version: int, doc_id: int) -> Change:
    return Change("delete", (index, str(doc_id)), {"doc": json.dumps({"id": doc_id})}, version,
                  SourceRef("t", 0, version % SHIFT, b"k", b"v"))


def make_sink(index: str, **extra: Any) -> ElasticsearchSink:
    cfg = ElasticsearchSinkConfig(type="elasticsearch", name="e", index=index, id_fields=["id"], mapping=MAPPING,
                                  **extra)
    sink = ElasticsearchSink(cfg, get_connection("cdcflow_elasticsearch").http_url())
    sink.open()
    return sink


def write(sink: ElasticsearchSink, *changes: Change) -> None:
    assert sink.write(list(changes)) + sink.flush() == []


def test_a_soft_delete_keeps_the_document_with_its_source_time_and_only_a_newer_change_brings_it_back() -> None:
    index = unique("soft").replace("_", "-")
    sink = make_sink(index, delete="soft")
    try:
        write(sink, upsert(index, v(10_000), id=1, name="a", body="first body", qty=5),
              upsert(index, v(10_000, 1), id=2, name="b", body="other", qty=6))
        deleted_ms = 1_764_000_000_123  # 2025-11-24T16:00:00.123Z
        write(sink, delete(index, v(deleted_ms, 7), 1), delete(index, v(deleted_ms, 8), 3))  # 3: never held
        docs = es_docs(index)
        assert docs["1"] == {"id": 1, "name": "a", "body": "first body", "qty": 5,
                             "__deleted_at": "2025-11-24T16:00:00.123Z", "_version": v(deleted_ms, 7)}
        assert docs["2"] == {"id": 2, "name": "b", "body": "other", "qty": 6, "_version": v(10_000, 1)}
        assert "3" not in docs and (sink.stats.deleted, sink.stats.unchanged) == (1, 1)
        tomb = es_client().get(index=TOMBSTONES, id=tombstone_id(index, "3"))  # the unseen key's delete stays known
        assert tomb["_version"] == v(deleted_ms, 8)
        mapping = es_client().indices.get_mapping(index=index)[index]["mappings"]["properties"]
        assert mapping["__deleted_at"] == {"type": "date"}
        sink.close()

        # a replay: older upserts of both keys are refused; the same delete again changes nothing
        sink = make_sink(index, delete="soft")
        write(sink, upsert(index, v(20_000), id=1, name="older", body="older body", qty=9),
              upsert(index, v(20_000), id=3, name="older", body="never", qty=1))
        write(sink, delete(index, v(deleted_ms, 7), 1))
        again = es_docs(index)
        assert again["1"] == docs["1"] and "3" not in again
        assert (sink.stats.upserted, sink.stats.deleted, sink.stats.stale, sink.stats.unchanged) == (0, 0, 2, 1)

        # a newer insert of the key replaces the document, the deleted time with it
        write(sink, upsert(index, v(deleted_ms + 5, 9), id=1, name="back", body="new body", qty=1))
        assert es_docs(index)["1"] == {"id": 1, "name": "back", "body": "new body", "qty": 1,
                                       "_version": v(deleted_ms + 5, 9)}
    finally:
        sink.close()


def test_partial_updates_keep_the_stored_fields_of_placeholders_and_listed_nulls() -> None:
    index = unique("partial").replace("_", "-")
    sink = make_sink(index, ignore_null_updates=["qty"])
    # a bytea column's placeholder: its bytes, base64 in the document (binary.handling.mode=bytes)
    blob_placeholder = base64.b64encode(DEBEZIUM_UNAVAILABLE.encode()).decode()
    try:
        write(sink, upsert(index, v(1_000), id=1, name="a", body="a long text", qty=5, blob="AAEC"))
        write(sink, upsert(index, v(2_000), id=1, name="a2", body=DEBEZIUM_UNAVAILABLE, qty=None,
                           blob=blob_placeholder))
        kept = {"id": 1, "name": "a2", "body": "a long text", "qty": 5, "blob": "AAEC", "_version": v(2_000)}
        assert es_docs(index)["1"] == kept
        # an older partial change (a replay) never applies over the newer document
        write(sink, upsert(index, v(1_500), id=1, name="older", body=DEBEZIUM_UNAVAILABLE, qty=99, blob="AA=="))
        assert es_docs(index)["1"] == kept and sink.stats.stale == 1
        # the same partial change again: unchanged, the document as it was
        write(sink, upsert(index, v(2_000), id=1, name="a2", body=DEBEZIUM_UNAVAILABLE, qty=None,
                           blob=blob_placeholder))
        assert es_docs(index)["1"] == kept and sink.stats.unchanged == 1
        # a partial change of a document the index does not hold: the kept fields are left out
        write(sink, upsert(index, v(3_000), id=9, name="new", body=DEBEZIUM_UNAVAILABLE, qty=None, blob="AA=="))
        assert es_docs(index)["9"] == {"id": 9, "name": "new", "blob": "AA==", "_version": v(3_000)}
        # a document that lacks a listed field (decoded record by record from a MINIMAL image) keeps it
        write(sink, upsert(index, v(4_000), id=1, name="a4", body="changed"))
        assert es_docs(index)["1"] == {**kept, "name": "a4", "body": "changed", "_version": v(4_000)}
        assert (sink.stats.upserted, sink.stats.stale, sink.stats.unchanged) == (4, 1, 1)
    finally:
        sink.close()


def test_a_partial_change_after_a_soft_delete_revives_the_document_with_its_stored_fields() -> None:
    index = unique("both").replace("_", "-")
    sink = make_sink(index, delete="soft", deleted_field="removed_at", ignore_null_updates=["qty"])
    try:
        write(sink, upsert(index, v(1_000), id=1, name="a", body="body", qty=5))
        write(sink, delete(index, v(2_000), 1))
        assert es_docs(index)["1"]["removed_at"] == "1970-01-01T00:00:02.000Z"
        write(sink, upsert(index, v(1_500), id=1, name="older", body=DEBEZIUM_UNAVAILABLE, qty=None))
        assert es_docs(index)["1"]["name"] == "a"  # older than the delete: refused
        write(sink, upsert(index, v(3_000), id=1, name="again", body=DEBEZIUM_UNAVAILABLE, qty=None))
        assert es_docs(index)["1"] == {"id": 1, "name": "again", "body": "body", "qty": 5, "_version": v(3_000)}
    finally:
        sink.close()


def test_a_soft_delete_marks_its_before_image_even_when_the_index_never_held_the_document() -> None:
    """A window reduces an insert and its delete to the delete: Debezium's before image is what the
    document held, so the document is there, marked (and an update then a delete: the updated values)."""
    index = unique("soft").replace("_", "-")
    sink = make_sink(index, delete="soft")
    try:
        write(sink, upsert(index, v(10_000), id=2, name="b", body="stored", qty=1))
        before_1 = {"id": 1, "name": "a", "body": "inserted and deleted in one window", "qty": 5}
        before_2 = {"id": 2, "name": "b2", "body": "updated then deleted", "qty": 2}
        write(sink, *[Change("delete", (index, str(d["id"])), {"doc": json.dumps(d)}, v(20_000, d["id"]),
                             SourceRef("t", 0, d["id"], b"k", b"v")) for d in (before_1, before_2)])
        docs = es_docs(index)
        assert docs["1"] == {**before_1, "__deleted_at": "1970-01-01T00:00:20.000Z", "_version": v(20_000, 1)}
        assert docs["2"] == {**before_2, "__deleted_at": "1970-01-01T00:00:20.000Z", "_version": v(20_000, 2)}
        assert (sink.stats.deleted, sink.stats.unchanged) == (2, 0)
    finally:
        sink.close()
