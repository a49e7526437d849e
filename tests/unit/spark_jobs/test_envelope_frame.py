"""A Spark step before ExtractNewRecordState (spark_jobs/transform/envelope_frame.py), without Spark: the record
frame's ``value`` is Debezium's change event, typed, and after the stage the unwrap reads the row from
the envelope the steps left.

The records are Debezium's MySQL connector's own change events (tests/fixtures/debezium/orders.py:
https://debezium.io/documentation/reference/stable/connectors/mysql.html, "Change event values", the
create, update and delete events and their tombstones, JsonConverter with schemas).
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pydantic import TypeAdapter

from cdcflow.config import load_pipeline
from cdcflow.errors import ConfigError
from spark_jobs.transform import envelope_frame as ef
from spark_jobs.transform import record_frame as rf
from spark_jobs.transform import row_transforms as rt
from spark_jobs.transform import spark_stage as ss
from spark_jobs.transform import transform_config as cfgs
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.helpers import write_pipeline
from tests.unit.spark_jobs.test_row_transforms import MYSQL, decoded, job, rows

CHAIN = TypeAdapter(list[cfgs.TransformConfig])
UNWRAP = {"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False,
          "add_fields": ["op", "table", "ts_ms"]}


def _frame(converter: str = "json_schema", records: list[tuple[bytes, bytes | None]] | None = None) -> pa.Table:
    """The read task's frame of a chain whose first step is a Spark step before the unwrap."""
    changes = ef.attach(rt.apply(decoded(records or fx.events()), [], "source_ts_ms", finish=False), converter)
    return rf.to_frame(changes, "json_schema", raw=True)


def _unwrapped(frame: pa.Table, unwrap: dict[str, Any] = UNWRAP) -> list[dict[str, Any]]:
    """The frame back as changes, through the ExtractNewRecordState (chain index 1)."""
    return rows(rt.apply(ef.from_frame(frame), CHAIN.validate_python([unwrap]), "source_ts_ms", first=1))


def _set(frame: pa.Table, value: pa.Array) -> pa.Table:
    return frame.set_column(frame.schema.get_field_index("value"), "value", value)


def test_only_a_chain_with_a_spark_step_before_its_unwrap_reads_the_envelopes() -> None:
    before = CHAIN.validate_python([{"type": "Filter", "predicate": {"type": "Sql", "condition": "value.op = 'u'"}},
                                    {"type": "Python", "function": "a.b"}, UNWRAP,
                                    {"type": "Python", "function": "a.c"}])
    _head, segments = ss.cut(before)
    assert [ef.before_unwrap(before, s.first) for s in segments] == [True, True, False]
    after = CHAIN.validate_python([UNWRAP, {"type": "Python", "function": "a.b"}])
    assert [ef.before_unwrap(after, s.first) for s in ss.cut(after)[1]] == [False]  # the read task's one decode
    model = CHAIN.validate_python([{"type": "Python", "function": "a.b"}])  # the record model: the value is the row
    assert [ef.before_unwrap(model, s.first) for s in ss.cut(model)[1]] == [False]


def test_the_frame_holds_debeziums_change_events_typed_and_a_tombstone_as_null() -> None:
    frame = _frame()
    values = frame.column("value").to_pylist()
    events = fx.events()
    assert [v and v["op"] for v in values] == [
        json.loads(v)["payload"]["op"] if v is not None else None for _k, v in events]
    first, update = values[0], values[3]
    assert first["before"] is None and first["source"]["table"] == "orders" and first["source"]["db"] == "inventory"
    assert first["after"] == {**o.ROW_1, "qty": -1}  # bigint.unsigned.handling.mode long: 2^64-1 is -1
    assert isinstance(first["after"]["amount"], Decimal) and isinstance(first["after"]["created"], dt.datetime)
    assert update["before"]["amount"] == o.ROW_1["amount"] and update["after"]["amount"] == o.ROW_1B["amount"]
    assert first["ts_ms"] == json.loads(events[0][1])["payload"]["ts_ms"] and first["transaction"] is None
    deletes = [v for v in values if v is not None and v["op"] == "d"]
    assert [(d["before"]["id"], d["after"]) for d in deletes] == [(3, None), (2, None), (1, None)]
    assert frame.column("key").to_pylist()[0] == {"id": 1}


def test_an_unchanged_envelope_gives_the_rows_the_unwrap_gives_without_the_stage() -> None:
    without = rows(rt.apply(decoded(fx.events()), CHAIN.validate_python([UNWRAP]), "source_ts_ms"))
    for got, want in zip(_unwrapped(_frame()), without, strict=True):
        assert (got["offset"], got["change_op"], got["error_message"]) == (want["offset"], want["change_op"], None)
        assert _set_fields(got["image"]) == _set_fields(want["image"])


def test_a_change_to_after_or_a_deletes_before_is_the_row_and_op_source_ts_ms_stay_the_connectors() -> None:
    frame = _frame()
    value = frame.column("value").combine_chunks()
    n, after, before, source = len(value), value.field("after"), value.field("before"), value.field("source")
    customer = pc.binary_join_element_wise(after.field("customer"), "?", "")
    changed = _with(value, "after", _with(after, "customer", customer))
    note = pc.binary_join_element_wise(before.field("note"), "!", "")
    changed = _with(changed, "before", _with(before, "note", note))
    changed = _with(_with(changed, "op", pa.array(["x"] * n)), "ts_ms", pa.nulls(n, pa.int64()))
    changed = _with(changed, "source", _with(source, "table", pa.array(["nope"] * n)))
    got = _unwrapped(_set(frame, changed))
    assert got[0]["image"]["customer"] == o.ROW_1["customer"] + "?"
    assert got[5]["image"]["note"] == o.ROW_3["note"] + "!"  # the delete of id 3 (its key changed to 4)
    assert (got[0]["image"]["__op"], got[0]["image"]["__table"], got[0]["image"]["__ts_ms"]) == (
        "c", "orders", str(json.loads(fx.events()[0][1])["payload"]["ts_ms"]))
    assert got[5]["change_op"] == "delete" and got[5]["image"]["__op"] == "d"


def _with(struct: pa.Array, name: str, values: pa.Array) -> pa.StructArray:
    fields = [values if f.name == name else struct.field(i) for i, f in enumerate(struct.type)]
    return pa.StructArray.from_arrays(fields, fields=list(struct.type), mask=struct.is_null())


def test_an_envelope_made_null_is_a_tombstone_the_unwrap_drops_or_deletes_by_the_row_read() -> None:
    frame = _frame()
    value = frame.column("value").combine_chunks()
    nulled = _set(frame, pc.if_else(pa.array([i in (0, 5) for i in range(len(value))]),
                                    pa.scalar(None, value.type), value))
    dropped = _unwrapped(nulled, {**UNWRAP, "drop_tombstones": True})
    assert [dropped[i]["change_op"] for i in (0, 5, 6)] == ["", "", ""]  # the tombstone as read too
    kept = _unwrapped(nulled)
    assert (kept[0]["change_op"], kept[0]["image"]["id"], kept[0]["image"]["customer"]) == (
        "delete", "1", o.ROW_1["customer"])
    assert (kept[5]["change_op"], kept[5]["image"]["id"]) == ("delete", "3")


def test_an_upsert_whose_after_a_step_made_null_fails() -> None:
    frame = _frame(records=fx.events()[:1])
    value = frame.column("value").combine_chunks()
    after = pc.struct_field(value, "after")
    changed = pa.StructArray.from_arrays([pa.nulls(1, f.type) if f.name == "after" else pc.struct_field(value, f.name)
                                          for f in value.type], fields=list(value.type))
    assert after.null_count == 0
    got = _unwrapped(_set(frame, changed))
    assert got[0]["error_message"].startswith("ExtractNewRecordState: the envelope's 'after' is null")


def test_under_the_json_converter_a_wrapped_event_is_read_by_its_schema_and_a_plain_one_by_its_json() -> None:
    key, wrapped = fx.events()[0]
    plain = json.dumps(json.loads(wrapped)["payload"]).encode()
    values = _frame("json", [(key, wrapped), (key, plain)]).column("value").to_pylist()
    # the wrapped one's Connect Decimal and the plain one's JSON text (its base64 bytes) in one field: texts
    assert values[0]["after"]["amount"] == str(o.ROW_1["amount"])
    assert values[1]["after"]["amount"] == json.loads(plain)["after"]["amount"]
    assert values[1]["op"] == "c" and values[1]["source"]["table"] == "orders"
    # json_schema (schemas.enable=true) refuses the plain one, as Kafka Connect's JsonConverter does
    changes = ef.attach(rt.apply(decoded([(key, wrapped), (key, plain)]), [], "source_ts_ms", finish=False),
                        "json_schema")
    assert changes.column("error_stage").to_pylist() == [None, "converter"]
    assert "not a {schema, payload} JSON envelope" in changes.column("error_message")[1].as_py()


def test_a_sql_expression_before_the_unwrap_is_a_config_error_naming_its_fields(tmp_path: Any) -> None:
    steps = [{"type": "SqlExpression", "fields": {"total": "value.after.amount * 2"}}, UNWRAP]
    with pytest.raises(ConfigError, match=(
            r"transforms\.0\.type[\s\S]*before ExtractNewRecordState the value is Debezium's envelope \(op, before, "
            r"after, source, ts_ms\), so SqlExpression would act on the field 'total' of the envelope")):
        load_pipeline(write_pipeline(tmp_path, "p", "t.inventory.orders", "t", transforms=steps))
    assert "SqlExpression would act on the field 'total'" in (
        rt.unserved(job(MYSQL, transforms=CHAIN.validate_python(steps))) or "")
    served = [{"type": "Filter", "predicate": {"type": "Sql", "condition": "value.op <> 'r'"}},
              {"type": "Python", "function": "a.b"}, UNWRAP]
    assert rt.unserved(job(MYSQL, transforms=CHAIN.validate_python(served))) is None


def test_a_second_stage_before_the_unwrap_sees_the_envelope_the_first_left() -> None:
    """[Python, TombstoneHandler, Python, ExtractNewRecordState]: the envelopes cross the row step between."""
    frame = _frame()
    value = frame.column("value").combine_chunks()
    after = value.field("after")
    changed = _with(value, "after", _with(after, "note", pa.array(["set"] * len(value))))
    back = ef.from_frame(_set(frame, changed), keep=True)
    assert rf.ENVELOPE in back.column_names
    between = rt.apply(back, CHAIN.validate_python([{"type": "TombstoneHandler", "behavior": "ignore"}]),
                       "source_ts_ms", finish=False, first=2, enveloped=True)
    again = rf.to_frame(between, "json_schema", raw=True)
    kept = [v for v in again.column("value").to_pylist() if v is not None]
    assert [v["after"]["note"] for v in kept if v["after"] is not None] == ["set"] * 7  # 5 creates, 2 updates
    assert len(kept) == 10 and again.num_rows == 13  # the three tombstones dropped, not failed (read, counted)
    assert again.column("_change_op").to_pylist().count("") == 3


def test_a_value_a_drop_before_the_stage_set_to_null_is_a_tombstone_the_unwrap_drops() -> None:
    head = CHAIN.validate_python([{"type": "Drop", "predicate": {"type": "TopicNameMatches", "pattern": ".*"}}])
    changes = rt.apply(decoded(fx.events()), head, "source_ts_ms", finish=False, enveloped=True)
    assert changes.column("value").null_count == len(fx.events())  # a tombstone, as Kafka Connect's Drop leaves it
    frame = rf.to_frame(ef.attach(changes, "json_schema"), "json_schema", raw=True)
    assert frame.column("value").null_count == len(fx.events())
    assert {r["change_op"] for r in _unwrapped(frame, {**UNWRAP, "drop_tombstones": True})} == {""}


def test_a_schemaless_rows_after_is_read_by_the_sinks_declared_columns_as_without_the_stage() -> None:
    """Under value_converter json without schemas, the declared columns say how to read a value (a
    DECIMAL's base64 bytes, a DATETIME(6)'s microseconds): ``after`` is the row the decode read so."""
    from connectors.debezium.envelope import Decoder, hints_from_columns
    from connectors.memory import MemorySource, Record

    plain = [(k, None if v is None else json.dumps(json.loads(v)["payload"]).encode()) for k, v in fx.events()]
    decoder = Decoder("source_ts_ms", hints_from_columns([("amount", "DECIMAL(10,2)", "base64"),
                                                          ("created", "DATETIME(6)", "us")]))
    decoder.column_wise_min = 1
    batch = MemorySource([Record(fx.TOPIC, 0, i, k, v, 0, []) for i, (k, v) in enumerate(plain)]).batch()
    changes = pa.Table.from_batches([decoder.decode_batch(batch)])
    frame = rf.to_frame(ef.attach(rt.apply(changes, [], "source_ts_ms", finish=False), "json"), "json", raw=True)
    first = frame.column("value")[0].as_py()
    assert (first["op"], first["source"]["table"]) == ("c", "orders")
    assert (str(first["after"]["amount"]), str(first["after"]["created"])) == (
        str(o.ROW_1["amount"]), str(o.ROW_1["created"]))
    without = rows(rt.apply(changes, CHAIN.validate_python([UNWRAP]), "source_ts_ms"))
    assert [_set_fields(r["image"]) for r in _unwrapped(frame)] == [_set_fields(r["image"]) for r in without]


def _set_fields(image: dict[str, Any]) -> dict[str, Any]:
    """A row image's fields that hold a value (a tombstone's key image has the others null in the frame)."""
    return {k: v for k, v in image.items() if v is not None}
