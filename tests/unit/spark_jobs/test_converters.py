"""The json_schema converter's merge of a window's Connect schemas (spark_jobs/converters.py), without
Spark: which schemas share one Spark type, and what a conflict says (issue 40). Schemas in the
JsonConverter's form (``org.apache.kafka.connect.json.JsonConverter.asJsonSchema``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import types as T

from spark_jobs.converters import SchemaConflict, connect_to_spark, merge_connect, merge_schemas


def field(field_name: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "optional": True, **extra, "field": field_name}


def struct(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "struct", "fields": list(fields), "optional": False}


def test_structs_merge_into_the_union_of_their_fields_in_the_order_first_seen() -> None:
    a = struct(field("id", "int32"), field("inner", "struct", fields=[field("x", "int8")]))
    b = struct(field("extra", "string"), field("inner", "struct", fields=[field("y", "boolean"), field("x", "int16")]))
    merged = merge_connect(a, b, "value")
    assert connect_to_spark(merged).simpleString() == \
        "struct<id:int,inner:struct<x:smallint,y:boolean>,extra:string>"


@pytest.mark.parametrize(("a", "b", "want"), [
    ("int8", "int32", T.IntegerType()), ("int64", "int16", T.LongType()), ("float32", "float64", T.DoubleType()),
    ("int64", "float", T.DoubleType()), ("double", "float64", T.DoubleType())])
def test_numbers_widen(a: str, b: str, want: T.DataType) -> None:
    assert connect_to_spark(merge_connect(struct(field("n", a)), struct(field("n", b)), "value"))["n"].dataType == want


@pytest.mark.parametrize(("a", "b", "shown"), [
    (field("n", "int32"), field("n", "string"), ("int32", "string")),
    (field("n", "string"), field("n", "bytes"), ("string", "bytes")),
    (field("n", "boolean"), field("n", "int8"), ("boolean", "int8")),
    (field("n", "struct", fields=[]), field("n", "string"), ("struct", "string")),
    # the same JSON type, another meaning: days against microseconds, scale 2 against scale 4
    (field("n", "int32", name="io.debezium.time.Date"), field("n", "int64", name="io.debezium.time.MicroTimestamp"),
     ("int32 (io.debezium.time.Date)", "int64 (io.debezium.time.MicroTimestamp)")),
    (field("n", "bytes", name="org.apache.kafka.connect.data.Decimal", parameters={"scale": "2"}),
     field("n", "bytes", name="org.apache.kafka.connect.data.Decimal", parameters={"scale": "4"}),
     ("bytes (org.apache.kafka.connect.data.Decimal)", "bytes (org.apache.kafka.connect.data.Decimal)"))])
def test_a_field_of_two_types_is_a_conflict_naming_both(a: dict[str, Any], b: dict[str, Any],
                                                        shown: tuple[str, str]) -> None:
    with pytest.raises(SchemaConflict) as err:
        merge_connect(struct(field("id", "int32"), a), struct(b), "value")
    assert (err.value.path, err.value.ours, err.value.theirs) == ("value.n", *shown)


def test_strings_of_any_logical_type_share_a_column() -> None:
    """An ENUM that became a VARCHAR is text either way."""
    enum = field("s", "string", name="io.debezium.data.Enum")
    merged = merge_connect(struct(enum), struct(field("s", "string")), "v")
    assert connect_to_spark(merged)["s"].dataType == T.StringType()


def test_nested_conflicts_name_the_path() -> None:
    a = struct(field("after", "struct", fields=[field("tags", "array", items={"type": "int32"})]))
    b = struct(field("after", "struct", fields=[field("tags", "array", items={"type": "string"})]))
    with pytest.raises(SchemaConflict, match=r"^value\.after\.tags\[\]: int32 vs string$"):
        merge_connect(a, b, "value")


def test_every_schema_is_merged_and_the_ones_that_cannot_be_are_refused_with_why() -> None:
    schemas = [json.dumps(struct(field("id", "int32"), field(f"f{i}", "int64"))) for i in range(300)]
    schemas += [json.dumps(struct(field("f7", "string"))), "not json", "[1]", json.dumps({"type": "uuid"}),
                json.dumps(struct({"type": "int32"}))]  # a struct member without its name
    merged, refused = merge_schemas([(s, f"h{i}") for i, s in enumerate(schemas)], "value")
    assert merged is not None
    assert [f["field"] for f in merged["fields"]] == ["id", *(f"f{i}" for i in range(300))]
    assert refused == {
        "h300": "value.f7 is string in this record's schema but int64 in the schemas of the window's earlier "
                "records: a window reads a field as one type (value.converter json_schema)",
        "h301": "value.schema is not a Kafka Connect schema (JSONDecodeError: Expecting value: line 1 column 1 "
                "(char 0)) (value.converter json_schema)",
        "h302": "value.schema is not a Kafka Connect schema (a JSON list, not an object) (value.converter json_schema)",
        "h303": "value.schema is not a Kafka Connect schema (unsupported Connect schema type 'uuid' in a json_schema "
                "record) (value.converter json_schema)",
        "h304": "value.schema is not a Kafka Connect schema (KeyError: 'field') (value.converter json_schema)"}
