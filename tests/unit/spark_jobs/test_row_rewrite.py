"""ExtractNewRecordState's delete_handling rewrite and add_fields op, table, db on the per-partition path
(spark_jobs/transform/row_transforms.py), without Spark: Debezium's own records (tests/fixtures/debezium/orders.py)
decoded as the read task decodes them, then the chain. Debezium's "delete.handling.mode=rewrite" (the
delete's before image with __deleted "true") is what these tests expect; the MySQL rows:
tests/integration/spark_jobs/test_row_transforms.py."""

from __future__ import annotations

import json
from typing import Any

from cdcflow.config import MySqlSinkConfig
from spark_jobs.transform import row_transforms as rt
from spark_jobs.project import tables
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.unit.spark_jobs.test_row_transforms import CHAIN, MYSQL, _env, decoded, job, rows

# fx.events(): 0-2 inserts of ids 1-3, 3-4 updates of 1 and 2, then 3 -> 4 (5 delete of 3, 6 its
# tombstone, 7 insert of 4), 2 -> 3 (8 delete of 2, 9 its tombstone, 10 insert of 3), 11 delete of 1, 12 its tombstone
DELETES, TOMBSTONES = [5, 8, 11], [6, 9, 12]


def _unwrap(**options: Any) -> list[Any]:
    return CHAIN.validate_python([{"type": "ExtractNewRecordState", **options}])


def test_a_rewritten_delete_is_an_upsert_of_its_before_image_marked_deleted() -> None:
    steps = _unwrap(delete_handling="rewrite", drop_tombstones=False, add_fields=["op", "table"])
    assert rt.unserved(job(MYSQL, transforms=steps)) is None
    for column_wise in (True, False):
        out = rows(rt.apply(decoded(fx.events(), column_wise), steps, "source_ts_ms"))
        assert [r["change_op"] for r in out] == ["delete" if i in TOMBSTONES else "upsert" for i in range(len(out))]
        marks = [(r["image"]["id"], r["image"]["__deleted"], r["image"]["__op"]) for i, r in enumerate(out)
                 if i not in TOMBSTONES]
        assert marks == [("1", "false", "c"), ("2", "false", "c"), ("3", "false", "c"), ("1", "false", "u"),
                         ("2", "false", "u"), ("3", "true", "d"), ("4", "false", "c"), ("2", "true", "d"),
                         ("3", "false", "c"), ("1", "true", "d")]
        # the before image, whole: the row as it was when it was deleted
        assert out[11]["image"]["customer"] == o.ROW_1B["customer"] and out[11]["image"]["amount"] == "-0.01"
        assert {out[i]["image"]["__table"] for i in DELETES} == {o.TABLE}
        assert [r["error_message"] for r in out] == [None] * len(out)


def test_a_rewritten_delete_is_the_last_change_of_its_row_and_its_tombstone_deletes_it() -> None:
    sink = MySqlSinkConfig(type="mysql", name="m", table="orders", primary_key=["id"], columns=[
        {"name": "id", "type": "INT"}, {"name": "customer", "type": "VARCHAR(64)"},
        {"name": "deleted", "type": "VARCHAR(5)", "field": "__deleted"}])
    for drop_tombstones, want in ((True, {1: "true", 2: "true", 3: "false", 4: "false"}),
                                  (False, {3: "false", 4: "false"})):
        steps = _unwrap(delete_handling="rewrite", drop_tombstones=drop_tombstones)
        changed = rt.apply(decoded(fx.events()), steps, "source_ts_ms")
        live = changed.filter(changed.column("change_op").is_valid())
        projected = tables.project_rows(live.filter(
            [op != "" for op in live.column("change_op").to_pylist()]), sink)
        latest = tables.latest_rows(projected, ["c_0"])
        kept = {int(i): d for i, d, op in zip(*(latest.column(c).to_pylist() for c in ("c_0", "c_2", "change_op")),
                                              strict=True) if op == "upsert"}
        assert kept == want


def test_a_delete_without_a_before_image_stays_a_delete() -> None:
    """Debezium's rewrite takes the before image; a delete without one (its key alone, in a plain or
    a {schema, payload} envelope) has none to rewrite, as on the older path (its value is null)."""
    bare = (json.dumps({"id": 7}).encode(), json.dumps({
        "op": "d", "before": None, "after": None, "source": {"ts_ms": 9, "db": "shop", "table": "orders"}}).encode())
    wrapped = (json.dumps({"id": 8}).encode(), json.dumps({"schema": {"type": "struct", "fields": []}, "payload": {
        "op": "d", "before": None, "after": None, "source": {"ts_ms": 9, "db": "shop", "table": "orders"}}}).encode())
    records = [_env(1, n="a"), _env(2, "d", n="b"), bare, wrapped]
    out = rows(rt.apply(decoded(records), _unwrap(delete_handling="rewrite", drop_tombstones=False), "source_ts_ms"))
    assert [(r["change_op"], r["image"]) for r in out] == [
        ("upsert", {"id": "1", "n": "a", "__deleted": "false"}), ("upsert", {"id": "2", "n": "b", "__deleted": "true"}),
        ("delete", {"id": "7", "__deleted": None}), ("delete", {"id": "8", "__deleted": None})]


def test_added_op_is_the_envelopes_op_and_the_table_from_the_schema_gets_the_marks() -> None:
    snapshot = (json.dumps({"id": 5}).encode(), json.dumps({
        "op": "r", "before": None, "after": {"id": 5, "n": "s"}, "source": {"ts_ms": 5}}).encode())
    out = rows(rt.apply(decoded([_env(1, n="a"), snapshot, _env(2, "d", n="b")]),
                        _unwrap(delete_handling="none", add_fields=["op", "db"]), "source_ts_ms"))
    assert [(r["image"]["__op"], r["image"]["__db"]) for r in out] == [("c", "shop"), ("r", None), ("d", "shop")]
    described = json.loads(rt.described(_unwrap(delete_handling="rewrite", add_fields=["op", "source.ts_ms"]),
                                        json.dumps({"columns": [{"name": "id", "type": "INT", "nullable": False}],
                                                    "key": ["id"], "properties": {}})))
    assert [(c["name"], c["type"]) for c in described["columns"]] == [
        ("id", "INT"), ("__deleted", "LONGTEXT"), ("__op", "LONGTEXT"), ("__source_ts_ms", "BIGINT")]
