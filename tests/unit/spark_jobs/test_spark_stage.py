"""The Spark stage's Arrow side (spark_jobs/transform/spark_stage.py), without Spark: how a chain is cut, the
record frame made from Debezium's own records and taken back, and the frames of several tasks merged."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest
from pydantic import TypeAdapter

from spark_jobs.transform import record_frame as rf
from spark_jobs.transform import row_transforms as rt
from spark_jobs.transform import spark_stage as ss
from spark_jobs.transform import transform_config as cfgs
from spark_jobs import raw_values
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.unit.spark_jobs.test_row_transforms import chain, decoded, rows

CHAIN = TypeAdapter(list[cfgs.TransformConfig])


def test_a_chain_is_cut_at_its_spark_steps_and_a_sql_predicate_goes_with_the_stage_before_its_step() -> None:
    steps = chain({"type": "SqlExpression", "fields": {"t": "1"}}, {"type": "Cast", "spec": {"qty": "string"}},
                  {"type": "Filter", "predicate": {"type": "Sql", "condition": "value.qty > 3"}},
                  {"type": "ReplaceField", "exclude": ["note"]},
                  {"type": "Python", "function": "a.b"}, {"type": "Python", "function": "a.c"})
    head, segments = ss.cut(steps)
    assert [c.type for c in head] == ["ExtractNewRecordState"]
    assert [([c.type for c in s.spark], [c.type for c in s.rows], s.first) for s in segments] == [
        (["SqlExpression"], ["Cast"], 1), ([], ["Filter", "ReplaceField"], 3), (["Python", "Python"], [], 5)]
    assert [s.when is not None for s in segments] == [False, True, False]
    assert ss.cut(chain({"type": "Cast", "spec": {"qty": "string"}}))[1] == []


def test_the_record_frame_holds_typed_values_a_null_value_for_a_delete_and_comes_back_as_the_changes() -> None:
    changes = rt.apply(decoded(fx.events()), chain(), "source_ts_ms", finish=False)
    frame = rf.to_frame(changes, "json_schema")
    first = frame.slice(0, 1).to_pylist()[0]
    assert first["key"] == {"id": 1} and first["topic"] == fx.TOPIC
    assert first["value"] == {k: (v if k != "qty" else -1) for k, v in o.ROW_1.items()}  # bigint.unsigned long: -1
    assert isinstance(first["value"]["amount"], Decimal)
    ops = frame.column("_change_op").to_pylist()
    assert all((v is None) == (op == "delete") for v, op in zip(frame.column("value").to_pylist(), ops, strict=True))
    # the values as read stay behind (a dead letter reads them again), a tombstone's null kept
    assert frame.column("_value").to_pylist() == [
        None if v is None else raw_values.OMITTED for v in changes.column("value").to_pylist()]
    assert "_row_schema" not in frame.column_names and "_schema_id" not in frame.column_names
    raw = rf.to_frame(changes, "json_schema", raw=True).column("_value")
    assert raw.to_pylist() == changes.column("value").to_pylist()
    # back: row for row the same ops, routes and each field's text (a field a row lacked reads as null)
    for got, want in zip(rows(rf.from_frame(frame)), rows(changes), strict=True):
        assert (got["offset"], got["change_op"], got["route"]) == (want["offset"], want["change_op"], want["route"])
        assert {k: v for k, v in got["image"].items() if v is not None} == {
            k: v for k, v in want["image"].items() if v is not None}


def test_a_value_a_spark_step_made_null_deletes_the_records_key() -> None:
    changes = rt.apply(decoded(fx.events()[:1]), chain(), "source_ts_ms", finish=False)
    frame = rf.to_frame(changes, "json_schema")
    frame = frame.set_column(frame.schema.get_field_index("value"), "value",
                             pa.nulls(1, frame.schema.field("value").type))
    back = rows(rf.from_frame(frame))
    assert back[0]["change_op"] == "delete" and back[0]["image"] == {"id": "1"}


def test_the_frames_of_two_tasks_merge_into_one_schema_numbers_widened_and_mixed_fields_as_texts() -> None:
    one = pa.table({"value": pa.array([{"a": 1, "b": 1, "c": 1}])})
    two = pa.table({"value": pa.array([{"a": 2.5, "b": "x", "d": True}])})
    schema = rf.merged([rf.schema_text(one.schema), rf.schema_text(two.schema)])
    assert schema.field("value").type == pa.struct([("a", pa.float64()), ("b", pa.string()), ("c", pa.int64()),
                                                    ("d", pa.bool_())])
    assert rf.conform(one, schema).column("value").to_pylist() == [{"a": 1.0, "b": "1", "c": 1, "d": None}]
    assert rf.conform(two, schema).column("value").to_pylist() == [{"a": 2.5, "b": "x", "c": None, "d": True}]


def test_a_json_key_that_is_not_an_object_everywhere_is_kept_as_its_text() -> None:
    keys = pa.array([b'{"id": 1}', b'"plain"', None])
    assert rf.key_values(keys, "json").to_pylist() == ['{"id": 1}', '"plain"', None]
    assert rf.key_values(pa.array([b'{"schema": {}, "payload": {"id": 7}}']), "json_schema").to_pylist() == [
        {"id": 7}]
    for registry in ("avro", "protobuf", "json_schema_registry"):  # a registry key, transcoded: as json_schema's
        assert rf.key_values(pa.array([b'{"schema": {}, "payload": {"id": 7}}']), registry).to_pylist() == [{"id": 7}]


def test_the_key_is_parsed_only_for_a_spark_step_that_may_read_it() -> None:
    sql = chain({"type": "SqlExpression", "fields": {"t": "value.qty * 2"}})
    assert not rf.reads_key(sql)
    assert rf.reads_key(chain({"type": "SqlExpression", "fields": {"t": "KEY.id + 1"}}))
    assert rf.reads_key(chain({"type": "Filter", "predicate": {"type": "Sql", "condition": "key.id > 1"}}))
    assert rf.reads_key(chain({"type": "Python", "function": "a.b"}))
    changes = rt.apply(decoded(fx.events()[:1]), chain(), "source_ts_ms", finish=False)
    frame = rf.to_frame(changes, "json_schema", key=False)
    assert frame.column("key").to_pylist() == [fx.events()[0][0].decode()]  # its text, as read
    assert rf.from_frame(frame).column("key").to_pylist() == [fx.events()[0][0]]


def test_the_carried_columns_no_sql_expression_names_skip_the_jvm_and_come_back_by_position() -> None:
    changes = rt.apply(decoded(fx.events()), chain(), "source_ts_ms", finish=False)
    frame = rf.to_frame(changes, "json_schema")
    sql = chain({"type": "SqlExpression", "fields": {"t": "value.qty * 2", "v": "`_version` + 1"}})[1:]
    outside = rf.apart(frame.schema, sql, "_source_db = 'shop'")
    # what the expressions name, the value they set and each row's own partition and offset stay in Spark
    assert not {"_version", "_source_db", "value", "partition", "offset"} & set(outside)
    assert {"topic", "key", "headers", "_deleted", "_change_op", "_key", "_source_table"} <= set(outside)
    assert rf.apart(frame.schema, chain({"type": "Python", "function": "a.b"})[1:], None) == []
    assert rf.apart(frame.schema, chain({"type": "SqlExpression", "fields": {"h": "hash(*)"}})[1:], None) == []
    jvm = rf.set_apart(frame, outside)
    assert jvm.schema == rf.inside(frame.schema, outside)
    assert jvm.column(rf.CARRIED).null_count == frame.num_rows - 1  # one value for the whole blob
    # Spark's batches come back in other sizes, with a column added: each row gets its own carried values
    spark = pa.Table.from_batches(jvm.to_batches(max_chunksize=2)).append_column("_when", pa.nulls(frame.num_rows,
                                                                                                    pa.bool_()))
    back = rf.put_back(spark, frame.schema.names)
    assert back.column_names == [*frame.column_names, "_when"]
    assert back.drop_columns(["_when"]).to_pylist() == frame.to_pylist()
    # rows that did not come back in their order are refused, never paired with another row's values
    with pytest.raises(RuntimeError, match="order"):
        rf.put_back(spark.take(list(range(frame.num_rows))[::-1]), frame.schema.names)
    empty = rf.set_apart(frame.slice(0, 0), outside)
    assert empty.num_rows == 0 and rf.CARRIED in empty.column_names
