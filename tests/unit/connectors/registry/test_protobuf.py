"""Protobuf -> the JsonConverter's record (connectors/registry/protobuf.py), on records written by
confluent-kafka's ProtobufSerializer: the Debezium fixture of every MySQL type with its Connect
schemas made proto3 files as Confluent's ProtobufData makes them (tests/fixtures/debezium/protobuf.py)
gives the JsonConverter's payloads; the Connect types come back, and the names only where Protobuf
has a type for them (Connect's Decimal, Date, Time, Timestamp)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

from connectors.registry.client import RegistrySettings
from connectors.registry.decode import Transcoders
from tests.fixtures.debezium import avro as fa
from tests.fixtures.debezium import mysql_all_types as fx
from tests.fixtures.debezium import protobuf as fp
from tests.registry_standin import RegistryStandIn

KEPT_NAMES = set(fp.LOGICAL)  # the Connect logical types ProtobufData writes as a Protobuf type of their own


@pytest.fixture
def registry() -> Iterator[RegistryStandIn]:
    standin = RegistryStandIn().start()
    yield standin
    standin.stop()


def _types(schema: dict[str, Any]) -> Any:
    """A Connect schema as its types and the names Protobuf keeps (struct names aside)."""
    if schema["type"] == "struct":
        return [(f["field"], _types(f)) for f in schema["fields"]]
    return schema["type"], schema.get("name") if schema.get("name") in KEPT_NAMES else None


@pytest.mark.parametrize("modes", [{}, {"time_precision_mode": "connect"},
                                   {"decimal_mode": "string", "binary_mode": "hex", "bigint_unsigned_mode": "precise"}],
                         ids=["defaults", "connect", "string-hex-precise"])
def test_every_type_comes_back_with_the_jsonconverters_payload(registry: RegistryStandIn, modes: dict[str, Any]) -> None:
    coders = Transcoders("protobuf", RegistrySettings(registry.url))
    for (key, value), (json_key, json_value) in zip(fp.events(registry.url, **modes), fx.events(**modes), strict=True):
        assert json.loads(coders.transcode(key, "key"))["payload"] == json.loads(json_key)["payload"]
        if json_value is None:
            assert value is None
            continue
        assert value is not None
        got, expected = json.loads(coders.transcode(value, "value")), json.loads(json_value)
        assert got["payload"] == expected["payload"]
        assert _types(got["schema"]) == _types(fa._adjust_names(expected["schema"]))
        row = next(f for f in got["schema"]["fields"] if f["field"] == "after")
        decimal = next(f for f in row["fields"] if f["field"] == "c_decimal")
        if modes.get("decimal_mode", "precise") == "precise":
            assert decimal["parameters"] == {"scale": "2", "connect.decimal.precision": "10"}
        assert [f["optional"] for f in row["fields"][:3]] == [False, True, True]  # id NOT NULL; proto3 optional


def _file() -> descriptor_pb2.FileDescriptorProto:
    """A file of two messages: Other, then Row (wrappers, an enum, a repeated field, a map, a nested
    message, a plain proto3 scalar)."""
    F = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="row.proto", package="shop", syntax="proto3",
                                               dependency=["google/protobuf/wrappers.proto"])
    proto.message_type.add(name="Other").field.add(name="x", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    row = proto.message_type.add(name="Row")
    row.enum_type.add(name="Size").value.extend([descriptor_pb2.EnumValueDescriptorProto(name="S", number=0),
                                                 descriptor_pb2.EnumValueDescriptorProto(name="M", number=1)])
    entry = row.nested_type.add(name="TagsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    for number, (name, kind, type_name, label) in enumerate([
            ("note", F.TYPE_MESSAGE, ".google.protobuf.StringValue", F.LABEL_OPTIONAL),
            ("size", F.TYPE_ENUM, ".shop.Row.Size", F.LABEL_OPTIONAL),
            ("codes", F.TYPE_SINT32, "", F.LABEL_REPEATED),
            ("tags", F.TYPE_MESSAGE, ".shop.Row.TagsEntry", F.LABEL_REPEATED),
            ("other", F.TYPE_MESSAGE, ".shop.Other", F.LABEL_OPTIONAL),
            ("count", F.TYPE_UINT32, "", F.LABEL_OPTIONAL),
            ("ratio", F.TYPE_FLOAT, "", F.LABEL_OPTIONAL)], 1):
        field = row.field.add(name=name, number=number, type=kind, label=label)
        if type_name:
            field.type_name = type_name
    return proto


def test_protobuf_types_map_to_connect_as_protobufdata_reads_them(registry: RegistryStandIn) -> None:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(_file())
    row_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Row"))
    row = row_class(size=1, codes=[-1, 2], count=7, ratio=1.1)
    row.tags["a"] = 5
    serializer = ProtobufSerializer(row_class, SchemaRegistryClient({"url": registry.url}),
                                    {"use.deprecated.format": False})
    data = serializer(row, SerializationContext("shop.rows", MessageField.VALUE))
    assert data is not None and data[5:7] == b"\x02\x02"  # one message index, 1: the file's second message

    doc = json.loads(Transcoders("protobuf", RegistrySettings(registry.url)).transcode(data, "value"))

    assert doc["payload"] == {"note": None, "size": "M", "codes": [-1, 2], "tags": {"a": 5}, "other": None,
                              "count": 7, "ratio": 1.1}
    fields = {f.pop("field"): f for f in doc["schema"]["fields"]}
    assert doc["schema"]["name"] == "shop.Row"
    assert fields == {
        "note": {"type": "string", "optional": True},
        "size": {"type": "string", "optional": False},
        "codes": {"type": "array", "items": {"type": "int32", "optional": False}, "optional": False},
        "tags": {"type": "map", "keys": {"type": "string", "optional": False},
                 "values": {"type": "int64", "optional": True}, "optional": False},
        "other": {"type": "struct", "fields": [{"type": "int32", "optional": False, "field": "x"}], "optional": True,
                  "name": "shop.Other"},
        "count": {"type": "int64", "optional": False},
        "ratio": {"type": "float", "optional": False},
    }
