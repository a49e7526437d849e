"""spark_jobs/project/partial.py: a partial change takes its key's earlier values within the window (issue 44)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.mysql.config import MySqlSinkConfig
from connectors.partial import DEBEZIUM_UNAVAILABLE as P
from spark_jobs.project.partial import fill_kept
from spark_jobs.project.tables import latest_rows

MYSQL = MySqlSinkConfig(type="mysql", table="t", primary_key=["id"], ignore_null_updates=["qty"],
                        columns=[{"name": "id", "type": "INT"}, {"name": "body", "type": "TEXT"},
                                 {"name": "qty", "type": "INT"}, {"name": "name", "type": "TEXT"}])
ES = ElasticsearchSinkConfig(type="elasticsearch", index="i", id_fields=["id"], ignore_null_updates=["qty"])


def frame(rows: list[tuple[Any, ...]]) -> pa.Table:
    """(op, version, offset, id, body, qty, name): a MySQL target's projected changes."""
    op, version, offset, ids, body, qty, name = (list(c) for c in zip(*rows, strict=True))
    n = len(rows)
    return pa.table({"partition": [0] * n, "offset": offset, "row_index": pa.array([0] * n, pa.int32()),
                     "change_op": op, "version": pa.array(version, pa.int64()), "c_0": pa.array(ids, pa.int32()),
                     "c_1": pa.array(body, pa.string()), "c_2": pa.array(qty, pa.int32()),
                     "c_3": pa.array(name, pa.string()), "error_message": pa.nulls(n, pa.string())})


def values(table: pa.Table) -> list[tuple[Any, ...]]:
    return list(zip(*[table.column(c).to_pylist() for c in ("c_0", "c_1", "c_2", "c_3")], strict=True))


def test_a_partial_update_takes_the_values_of_its_keys_earlier_changes_in_the_window() -> None:
    rows = frame([
        ("upsert", 10, 0, 1, "long text", 5, "a"),
        ("upsert", 20, 1, 1, P, None, "b"),     # body TOASTed, qty missing (MINIMAL): both from the insert
        ("upsert", 30, 2, 1, P, 7, None),       # name: not listed, its null is a value
        ("upsert", 10, 3, 2, P, None, "lone"),  # a key without an earlier change: left to the stored row
        ("upsert", 10, 4, 3, "x", 1, "c"),
        ("delete", 20, 5, 3, None, None, None),
        ("upsert", 30, 6, 3, P, None, "after"),  # after a delete: nothing before it to take
    ])
    filled = fill_kept(rows, MYSQL, ["c_0"])
    assert values(filled) == [(1, "long text", 5, "a"), (1, "long text", 5, "b"), (1, "long text", 7, None),
                              (2, P, None, "lone"), (3, "x", 1, "c"), (3, None, None, None), (3, P, None, "after")]
    assert values(latest_rows(filled, ["c_0"])) == [(1, "long text", 7, None), (2, P, None, "lone"),
                                                    (3, P, None, "after")]


def test_the_keys_changes_are_taken_in_version_order_not_log_order() -> None:
    """Two partitions' changes of one key: the reduction ranks them by version; so does the fill."""
    rows = frame([("upsert", 20, 0, 1, P, None, "newer"), ("upsert", 10, 0, 1, "old body", 3, "older")])
    rows = rows.set_column(0, "partition", pa.array([0, 1]))
    assert values(latest_rows(fill_kept(rows, MYSQL, ["c_0"]), ["c_0"])) == [(1, "old body", 3, "newer")]


def test_a_frame_without_kept_values_is_the_same_frame() -> None:
    rows = frame([("upsert", 10, 0, 1, "a", 1, "a"), ("upsert", 20, 1, 1, "b", 2, None)])
    assert fill_kept(rows, MYSQL, ["c_0"]) is rows
    off = MYSQL.model_copy(update={"unavailable_value": None, "ignore_null_updates": []})
    assert fill_kept(frame([("upsert", 1, 0, 1, "a", 1, "a"), ("upsert", 2, 1, 1, P, None, "b")]), off,
                     ["c_0"]).column("c_1").to_pylist() == ["a", P]


def test_documents_of_one_key_take_the_fields_of_its_earlier_changes() -> None:
    docs = [{"id": 1, "body": "long", "qty": 5, "price": 19.90}, {"id": 1, "body": P, "qty": None, "price": 20.10},
            {"id": 2, "body": P, "qty": None}]
    texts = [json.dumps(d).replace("19.9", "19.90").replace("20.1", "20.10") for d in docs]
    table = pa.table({"partition": [0, 0, 0], "offset": [0, 1, 2], "row_index": pa.array([0, 0, 0], pa.int32()),
                      "change_op": ["upsert"] * 3, "version": pa.array([1, 2, 1], pa.int64()),
                      "c_0": ["i", "i", "i"], "c_1": ["1", "1", "2"], "c_2": texts})
    filled = fill_kept(table, ES, ["c_0", "c_1"]).column("c_2").to_pylist()
    assert filled[0] == texts[0] and filled[2] == texts[2]
    assert filled[1] == '{"id":1,"body":"long","qty":5,"price":20.10}'  # the digits as they came


def test_a_document_that_lacks_a_listed_field_takes_it_from_the_keys_earlier_change() -> None:
    """The per-record decode leaves a field the payload lacks out of the document (a MINIMAL image)."""
    texts = ['{"id":1,"body":"long","qty":5}', '{"id":1,"body":"new"}']
    table = pa.table({"partition": [0, 0], "offset": [0, 1], "row_index": pa.array([0, 0], pa.int32()),
                      "change_op": ["upsert"] * 2, "version": pa.array([1, 2], pa.int64()),
                      "c_0": ["i", "i"], "c_1": ["1", "1"], "c_2": texts})
    assert fill_kept(table, ES, ["c_0", "c_1"]).column("c_2").to_pylist() == [
        texts[0], '{"id":1,"body":"new","qty":5}']
