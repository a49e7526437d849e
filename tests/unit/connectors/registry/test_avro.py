"""Avro -> the JsonConverter's record (connectors/registry/avro.py), on records written by
confluent-kafka's AvroSerializer: the Debezium fixture of every MySQL type (tests/fixtures/debezium/
avro.py, the Connect schemas made Avro as Confluent's AvroData makes them) must come back as the
exact JsonConverter record the JSON fixture holds, and decode into the same changes."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from connectors.debezium.envelope import Decoder
from connectors.registry import avro, wire
from connectors.registry.client import RegistrySettings, forget
from connectors.registry.connect import UnsupportedSchema
from connectors.registry.decode import RegistryDecoder, Transcoders, json_bytes
from tests.fixtures.debezium import avro as fa
from tests.fixtures.debezium import mysql_all_types as fx
from tests.registry_standin import RegistryStandIn
from tests.unit.decoding import raw_batch

MODES: list[dict[str, Any]] = [
    {}, {"time_precision_mode": "connect"},
    {"decimal_mode": "string", "binary_mode": "hex", "bigint_unsigned_mode": "precise"},
    {"decimal_mode": "double", "binary_mode": "base64"}, {"propagate_source_type": True},
]


@pytest.fixture
def registry() -> Iterator[RegistryStandIn]:
    standin = RegistryStandIn().start()
    yield standin
    standin.stop()


@pytest.mark.parametrize("modes", MODES, ids=lambda m: ",".join(f"{k}={v}" for k, v in m.items()) or "defaults")
def test_every_type_comes_back_as_the_jsonconverters_record(registry: RegistryStandIn, modes: dict[str, Any]) -> None:
    """Schema and payload equal to the JsonConverter's (the schema names as Debezium adjusts them for
    Avro), for every record of the fixture, keys included; tombstones stay null."""
    coders = Transcoders("avro", RegistrySettings(registry.url))
    for (key, value), (json_key, json_value) in zip(fa.events(registry.url, **modes), fx.events(**modes), strict=True):
        expected_key = json.loads(json_key)
        assert json.loads(coders.transcode(key, "key")) == {**expected_key, "schema": fa._adjust_names(expected_key["schema"])}
        if json_value is None:
            assert value is None
            continue
        assert value is not None
        got, expected = json.loads(coders.transcode(value, "value")), json.loads(json_value)
        assert got["payload"] == expected["payload"]
        assert got["schema"] == fa._adjust_names(expected["schema"])


def _rows(decoded: pa.RecordBatch) -> list[dict[str, Any]]:
    rows = decoded.to_pylist()
    for r in rows:
        r["image"] = dict(r["image"]) if r["image"] is not None else None
        for name in ("key", "value", "schema_id", "row_schema", "timestamp"):
            r.pop(name, None)
    return rows


@pytest.mark.parametrize("column_wise", [1, 10_000], ids=["column-wise", "record-by-record"])
@pytest.mark.parametrize("modes", MODES[:3], ids=["defaults", "connect", "string-hex-precise"])
def test_avro_records_decode_into_the_changes_of_their_json_twins(registry: RegistryStandIn, modes: dict[str, Any],
                                                                  column_wise: int) -> None:
    """The Debezium decoder behind the registry decoder gives the Avro records the changes it gives
    the JsonConverter's (images, documents, versions, routing), and keeps their original bytes."""
    avro_events, json_events = fa.events(registry.url, **modes), fx.events(**modes)
    decoder = RegistryDecoder(Decoder("source_ts_ms"), RegistrySettings(registry.url), "avro", "avro")
    decoder.column_wise_min = column_wise
    reference = Decoder("source_ts_ms")
    reference.column_wise_min = column_wise
    decoded = decoder.decode_batch(raw_batch(avro_events, fx.TOPIC))
    assert decoded.column("value").to_pylist() == [v for _k, v in avro_events]  # the DLQ's bytes: the originals
    assert decoded.column("key").to_pylist() == [k for k, _v in avro_events]
    got, expected = _rows(decoded), _rows(reference.decode_batch(raw_batch(json_events, fx.TOPIC)))
    assert [r["error_message"] for r in got] == [None] * len(avro_events)
    assert got == expected
    described = [json.loads(s) for s in decoded.column("row_schema").to_pylist() if s]
    assert described and described[0]["key"] == ["id"]  # the primary key from the Avro key's schema


def test_for_a_chain_the_transcoded_bytes_ride_beside_the_originals(registry: RegistryStandIn) -> None:
    """``keep_json``: a chain reads the JsonConverter's bytes (json_bytes), the DLQ the original ones; a
    record that cannot be transcoded has none."""
    json_events = fx.events()[:3]  # JSON keys, Avro values
    records = [(k, v) for (k, _j), (_a, v) in zip(json_events, fa.events(registry.url)[:3], strict=True)]
    records.append((json_events[0][0], b'{"schema":null}'))
    decoder = RegistryDecoder(Decoder("source_ts_ms"), RegistrySettings(registry.url), "json", "avro", keep_json=True)
    decoded = decoder.decode_batch(raw_batch(records, fx.TOPIC))
    assert decoded.column("key").to_pylist() == [k for k, _v in records]
    assert decoded.column("value").to_pylist() == [v for _k, v in records]  # the DLQ's bytes
    assert json_bytes(decoded, "key").to_pylist() == [k for k, _v in records[:3]] + [None]
    transcoded = json_bytes(decoded, "value").to_pylist()
    assert [json.loads(v) for v in transcoded[:3]] == [
        {**doc, "schema": fa._adjust_names(doc["schema"])} for doc in (json.loads(v) for _k, v in json_events)]
    assert transcoded[3] == b""  # not read: an error row (stage converter)
    plain = RegistryDecoder(Decoder("source_ts_ms"), RegistrySettings(registry.url), "json", "avro")
    assert json_bytes(plain.decode_batch(raw_batch(records, fx.TOPIC)), "value").to_pylist() == [v for _k, v in records]


def test_each_schema_id_is_fetched_once_and_bad_records_get_their_reason(registry: RegistryStandIn) -> None:
    forget()
    good = fa.events(registry.url)
    key, value = good[0]
    assert value is not None
    records = [*good * 40, (key, wire.header(77) + value[5:]), (key, b'{"schema":null}'), (key, b"\x00\x00")]
    decoder = RegistryDecoder(Decoder("source_ts_ms"), RegistrySettings(registry.url, "reg"), "avro", "avro")
    decoded = decoder.decode_batch(raw_batch(records, fx.TOPIC)).to_pylist()
    assert dict(registry.gets_of_ids()) == {"1": 1, "2": 1, "77": 1}
    assert [r["error_message"] for r in decoded[:-3]] == [None] * (len(records) - 3)
    assert [(r["error_stage"], r["error_message"], r["change_op"]) for r in decoded[-3:]] == [
        ("converter", f"value.converter avro: the Schema Registry at {registry.url} (connection 'reg') does not know "
                      "schema id 77 (HTTP 404, error_code 40403: Schema not found)", None),
        ("converter", "value.converter avro: value does not start with the Schema Registry magic byte 0 (found 0x7b: "
                      "not written by a registry serializer or converter; starts b'{\"schema\":null}')", None),
        ("converter", "value.converter avro: value of 2 bytes is too short for a Schema Registry frame (a magic byte 0 "
                      "and a 4-byte schema id before the encoded value)", None),
    ]
    assert [r["value"] for r in decoded[-3:]] == [v for _k, v in records[-3:]]


def _one(avro_type: Any, value: Any) -> tuple[dict[str, Any], Any]:
    """The Connect field schema and JSON value of one Avro field."""
    schema = {"type": "record", "name": "R", "namespace": "n", "fields": [{"name": "f", "type": avro_type}]}
    coder = avro.transcoder(json.dumps(schema))
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), {"f": value})
    doc = json.loads(coder.envelope(memoryview(out.getvalue())))
    field = doc["schema"]["fields"][0]
    del field["field"]
    return field, doc["payload"]["f"]


@pytest.mark.parametrize(("avro_type", "value", "schema", "json_value"), [
    ({"type": "int", "logicalType": "date"}, 19782, {"type": "int32", "optional": False,
                                                     "name": "org.apache.kafka.connect.data.Date"}, 19782),
    ({"type": "int", "logicalType": "time-millis"}, 3_600_000, {"type": "int32", "optional": False,
                                                              "name": "org.apache.kafka.connect.data.Time"}, 3_600_000),
    ({"type": "long", "logicalType": "time-micros"}, 1, {"type": "int64", "optional": False,
                                                         "name": "io.debezium.time.MicroTime"}, 1),
    ({"type": "long", "logicalType": "timestamp-millis"}, -5, {"type": "int64", "optional": False,
                                                               "name": "org.apache.kafka.connect.data.Timestamp"}, -5),
    ({"type": "long", "logicalType": "timestamp-micros"}, 7, {"type": "int64", "optional": False,
                                                              "name": "io.debezium.time.MicroTimestamp"}, 7),
    ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, Decimal("-1.50"),
     {"type": "bytes", "optional": False, "name": "org.apache.kafka.connect.data.Decimal",
      "parameters": {"scale": "2", "connect.decimal.precision": "10"}}, "/2o="),
    ({"type": "fixed", "name": "D", "size": 3, "logicalType": "decimal", "precision": 5, "scale": 0},
     Decimal("1"), {"type": "bytes", "optional": False, "name": "org.apache.kafka.connect.data.Decimal",
                    "parameters": {"scale": "0", "connect.decimal.precision": "5"}}, "AAAB"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 64, "scale": 0}, Decimal("1"),  # AvroData's default
     {"type": "bytes", "optional": False, "name": "org.apache.kafka.connect.data.Decimal",
      "parameters": {"scale": "0"}}, "AQ=="),
    ({"type": "int", "connect.type": "int16"}, -3, {"type": "int16", "optional": False}, -3),
    ({"type": "int", "connect.type": "int8", "connect.name": "x.Tiny", "connect.version": 2,
      "connect.parameters": {"a": "b"}}, 4, {"type": "int8", "optional": False, "name": "x.Tiny", "version": 2,
                                             "parameters": {"a": "b"}}, 4),
    (["null", "float"], 1.1, {"type": "float", "optional": True}, 1.1),
    ("double", 0.1, {"type": "double", "optional": False}, 0.1),
    ({"type": "enum", "name": "Size", "symbols": ["S", "M"]}, "M",
     {"type": "string", "optional": False, "name": "n.Size",
      "parameters": {"io.confluent.connect.avro.Enum": "n.Size", "io.confluent.connect.avro.Enum.S": "S",
                     "io.confluent.connect.avro.Enum.M": "M"}}, "M"),
    ({"type": "map", "values": ["null", "long"]}, {"a": 1, "b": None},
     {"type": "map", "keys": {"type": "string", "optional": False},
      "values": {"type": "int64", "optional": True}, "optional": False}, {"a": 1, "b": None}),
    ({"type": "array", "items": {"type": "record", "name": "MapEntry", "namespace": "io.confluent.connect.avro",
                                 "fields": [{"name": "key", "type": "int"}, {"name": "value", "type": "string"}]}},
     [{"key": 1, "value": "x"}], {"type": "map", "keys": {"type": "int32", "optional": False},
                                  "values": {"type": "string", "optional": False}, "optional": False}, [[1, "x"]]),
    ({"type": "array", "items": "bytes"}, [b"\x01"], {"type": "array", "items": {"type": "bytes", "optional": False},
                                                      "optional": False}, ["AQ=="]),
])
def test_avro_types_map_to_connect_as_avrodata_reads_them(avro_type: Any, value: Any, schema: dict[str, Any],
                                                          json_value: Any) -> None:
    """Avro's own logical types without a connect.name get Connect's (or Debezium's, for the
    microsecond ones) logical names; connect.* annotations win; values are the JsonConverter's."""
    assert _one(avro_type, value) == (schema, json_value)


def test_a_union_of_several_types_is_refused_naming_them() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "f", "type": ["null", "int", "string"]}]}
    with pytest.raises(UnsupportedSchema, match=r"an Avro union of 2 types \(int, string\): only a union of null and "
                                                "one type is read"):
        avro.transcoder(json.dumps(schema))


def test_a_value_that_does_not_decode_by_its_schema_is_a_record_fault(registry: RegistryStandIn) -> None:
    key, value = fa.events(registry.url)[0]
    assert value is not None
    coders = Transcoders("avro", RegistrySettings(registry.url))
    with pytest.raises(UnsupportedSchema, match=r"value does not decode as Avro \(AvroConverter\) by schema id 2: "):
        coders.transcode(value[:40], "value")
    with pytest.raises(UnsupportedSchema, match=r"schema id 2 cannot be read as Protobuf \(ProtobufConverter\): it is "
                                                r"registered as AVRO \(the converter is protobuf\): set the pipeline's "
                                                "converter"):
        Transcoders("protobuf", RegistrySettings(registry.url)).transcode(value[:5] + b"\x00" + value[5:], "value")


def test_a_schema_the_mapping_cannot_read_is_a_record_fault_named_by_its_id(registry: RegistryStandIn) -> None:
    """A registered schema whose field has no type: its records go to the DLQ, naming the id."""
    schema_id = registry.register("odd-value", {"schema": json.dumps(
        {"type": "record", "name": "R", "fields": [{"name": "f"}]})})
    with pytest.raises(UnsupportedSchema, match=f"schema id {schema_id} cannot be read as Avro \\(AvroConverter\\): "):
        Transcoders("avro", RegistrySettings(registry.url)).transcode(wire.header(schema_id) + b"\x00", "value")
