"""connectors/partial.py: which values keep the stored ones (issue 44)."""

from __future__ import annotations

import base64

import pyarrow as pa
import pytest

from connectors.changes import VERSION_SHIFT
from connectors.elasticsearch import documents
from connectors.mysql import sql
from connectors.partial import DEBEZIUM_UNAVAILABLE, PartialRule

PLACEHOLDER_BYTES = DEBEZIUM_UNAVAILABLE.encode()


def kept(rule: PartialRule, name: str, values: pa.Array | pa.ChunkedArray) -> list[bool]:
    mask = rule.kept(name, values)
    assert mask is not None, f"{name} can keep no value"
    return mask.to_pylist()


def test_the_placeholder_keeps_a_text_or_binary_value_and_listed_nulls_keep_theirs() -> None:
    rule = PartialRule(DEBEZIUM_UNAVAILABLE, frozenset({"qty"}), frozenset({"id"}))
    assert rule.active
    assert rule.keeps("body", DEBEZIUM_UNAVAILABLE) and rule.keeps("blob", PLACEHOLDER_BYTES)
    assert rule.keeps("qty", None) and not rule.keeps("name", None)  # only listed columns keep a null
    assert not rule.keeps("body", "text") and not rule.keeps("qty", 0) and not rule.keeps("body", 5)
    assert not rule.keeps("id", DEBEZIUM_UNAVAILABLE)  # the key is never kept
    assert rule.kept_fields({"id": 1, "body": DEBEZIUM_UNAVAILABLE, "qty": None, "name": None}) == {"body", "qty"}
    assert not PartialRule().active and not PartialRule().keeps("x", None)


def test_a_column_s_kept_values_in_arrow() -> None:
    rule = PartialRule(DEBEZIUM_UNAVAILABLE, frozenset({"qty", "body"}))
    texts = pa.array(["a", DEBEZIUM_UNAVAILABLE, None], pa.string())
    assert kept(rule, "body", texts) == [False, True, True]  # placeholder, and a listed null
    assert kept(rule, "name", texts) == [False, True, False]  # a null of a column not listed: written
    assert kept(rule, "blob", pa.array([PLACEHOLDER_BYTES, b"x", None])) == [True, False, False]
    assert kept(rule, "qty", pa.array([1, None], pa.int32())) == [False, True]
    assert rule.kept("n", pa.array([1, None], pa.int32())) is None  # cannot hold the placeholder, not listed
    assert kept(rule, "body", pa.chunked_array([texts, texts])) == [False, True, True] * 2


def test_a_hex_placeholder_is_its_bytes_as_debezium_reads_it() -> None:
    rule = PartialRule("hex:00ff", frozenset())
    assert rule.keeps("blob", b"\x00\xff") and not rule.keeps("blob", b"hex:00ff")
    assert kept(rule, "blob", pa.array([b"\x00\xff", b"\x00"])) == [True, False]


def test_documents_keep_the_placeholder_its_base64_and_listed_nulls() -> None:
    rule = PartialRule(DEBEZIUM_UNAVAILABLE, frozenset({"qty"}), frozenset({"id"}))
    b64 = base64.b64encode(PLACEHOLDER_BYTES).decode()
    assert rule.document_keeps("body", DEBEZIUM_UNAVAILABLE) and rule.document_keeps("blob", b64)
    assert rule.document_keeps("qty", None) and not rule.document_keeps("name", None)
    assert not rule.document_keeps("id", DEBEZIUM_UNAVAILABLE)
    assert rule.may_keep_in('{"qty": null}') and rule.may_keep_in(f'{{"b": "{b64}"}}')
    assert not rule.may_keep_in('{"qty": 1, "name": "a"}')
    # a listed field the document lacks (the per-record decode leaves out what the payload lacks) keeps too
    assert rule.may_keep_in('{"id": 1, "name": "a"}')
    assert rule.document_kept({"id": 1, "name": "a"}) == {"qty"}
    assert rule.document_kept({"id": 1, "qty": None, "body": DEBEZIUM_UNAVAILABLE}) == {"qty", "body"}
    assert rule.document_kept({"id": 1, "qty": 2, "body": "b"}) == frozenset()


def test_a_partial_document_lies_over_the_stored_one_and_clears_the_soft_delete() -> None:
    stored = {"id": 1, "body": "long", "qty": 5, "gone": "2025-01-01T00:00:00.000Z", "extra": True}
    doc = {"id": 1, "body": DEBEZIUM_UNAVAILABLE, "qty": 7, "name": "n"}
    assert documents.merged(stored, doc, frozenset({"body"}), "gone") == {
        "id": 1, "body": "long", "qty": 7, "extra": True, "name": "n"}
    assert documents.merged(None, doc, frozenset({"body"}), None) == {"id": 1, "qty": 7, "name": "n"}


@pytest.mark.parametrize(("ts_ms", "text"), [(0, "1970-01-01T00:00:00.000Z"),
                                             (1_764_000_000_123, "2025-11-24T16:00:00.123Z")])
def test_the_soft_delete_time_is_the_source_time_in_the_version(ts_ms: int, text: str) -> None:
    assert documents.deleted_at(ts_ms * VERSION_SHIFT + 12345) == text
    assert sql.SOURCE_MS == documents.SOURCE_MS == VERSION_SHIFT  # the three agree on a version's layout
