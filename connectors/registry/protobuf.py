"""Protobuf records of Confluent's ProtobufConverter / ProtobufSerializer -> what the JsonConverter
writes.

The registry holds the schema as a FileDescriptorProto (asked for with ``format=serialized``, which
Confluent Schema Registry answers as base64; what confluent-kafka's ProtobufSerializer registers).
Its imports come from the schema's references (fetched the same way) or, for the files every
reader has (``google/protobuf/*``, ``google/type/*``, ``confluent/*``: the serializers never send
those as references), from this process's copies. The message is the one the record's message
indexes name. Fields map to Connect as Confluent's ``ProtobufData.toConnectSchema`` maps them
(schema-registry, ``protobuf-converter/.../ProtobufData.java``):

* int32 / sint32 / sfixed32 -> int32, or int8 / int16 where ``(confluent.field_meta).params`` say
  ``connect.type``; uint32, fixed32 and the 64-bit integers -> int64; float, double, bool, string,
  bytes as themselves; an enum -> string;
* ``confluent.type.Decimal`` -> Connect's Decimal (``scale`` and ``precision`` from the field's
  params); ``google.type.Date`` -> Date (days); ``google.type.TimeOfDay`` -> Time (ms);
  ``google.protobuf.Timestamp`` -> Timestamp (ms); the ``google.protobuf.*Value`` wrappers -> their
  type, optional;
* another message -> an optional struct named by its full name; ``repeated`` -> array; a map -> map;
* a field with presence (a message, a wrapper, proto3 ``optional``) that is not set is null; a plain
  proto3 scalar that is not set is its default (0, "", false), as the converter reads it.

What ProtobufConverter does not carry cannot come back: Debezium's own logical names
(``io.debezium.time.*``, ``Enum``'s ``allowed``, ``Bits``, geometry) are not in a Protobuf schema, so
those fields arrive as their physical type and are read by the sink's declared columns (as values
without a schema are: docs/types.md).
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from connectors.registry.client import RegisteredSchema, RegistryClient, UnknownSchema
from connectors.debezium.types import DECIMAL
from connectors.registry.connect import (
    ConnectSchema,
    Transcoder,
    UnsupportedSchema,
    encode,
    float32,
    node,
    schema_bytes,
)

WRAPPERS = {"google.protobuf.DoubleValue": "double", "google.protobuf.FloatValue": "float",
            "google.protobuf.Int64Value": "int64", "google.protobuf.UInt64Value": "int64",
            "google.protobuf.Int32Value": "int32", "google.protobuf.UInt32Value": "int64",
            "google.protobuf.BoolValue": "boolean", "google.protobuf.StringValue": "string",
            "google.protobuf.BytesValue": "bytes"}
_F = FieldDescriptor
SCALARS = {_F.TYPE_INT32: "int32", _F.TYPE_SINT32: "int32", _F.TYPE_SFIXED32: "int32", _F.TYPE_UINT32: "int64",
           _F.TYPE_FIXED32: "int64", _F.TYPE_INT64: "int64", _F.TYPE_SINT64: "int64", _F.TYPE_SFIXED64: "int64",
           _F.TYPE_UINT64: "int64", _F.TYPE_FIXED64: "int64", _F.TYPE_FLOAT: "float", _F.TYPE_DOUBLE: "double",
           _F.TYPE_BOOL: "boolean", _F.TYPE_STRING: "string", _F.TYPE_BYTES: "bytes", _F.TYPE_ENUM: "string"}
_EPOCH = dt.date(1970, 1, 1)
Read = Callable[[Any], Any]  # a field's Python value (from the message) -> its JsonConverter value


def transcoder(registered: RegisteredSchema, client: RegistryClient, indexes: tuple[int, ...]) -> Transcoder:
    """The schema of ``registered`` (its imports resolved), the message ``indexes`` name in it, compiled."""
    pool = _pool()
    _add(pool, registered, client, f"schema-{registered.schema_id}.proto", set())
    file = pool.FindFileByName(f"schema-{registered.schema_id}.proto")
    descriptor = _message_at(file, indexes, registered.schema_id)
    cls = message_factory.GetMessageClass(descriptor)
    connect, read = _Mapper().message(descriptor, optional=False)

    def payload(body: memoryview) -> bytes:
        message = cls()
        message.ParseFromString(bytes(body))
        return encode(read(message))
    return Transcoder(schema_bytes(connect), payload)


def _pool() -> descriptor_pool.DescriptorPool:
    """A pool with the files every reader has (the serializers never send them as references)."""
    from confluent_kafka.schema_registry.confluent import meta_pb2  # noqa: PLC0415
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2  # noqa: PLC0415
    from google.protobuf import (  # noqa: PLC0415
        any_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )
    from google.type import date_pb2, timeofday_pb2  # noqa: PLC0415

    pool = descriptor_pool.DescriptorPool()
    for module in (descriptor_pb2, any_pb2, duration_pb2, empty_pb2, field_mask_pb2, struct_pb2, timestamp_pb2,
                   wrappers_pb2, date_pb2, timeofday_pb2, meta_pb2, decimal_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    return pool


def _add(pool: descriptor_pool.DescriptorPool, registered: RegisteredSchema, client: RegistryClient, name: str,
         seen: set[str]) -> None:
    """Adds the schema (as file ``name``) after its references."""
    if name in seen:
        return
    seen.add(name)
    for ref_name, subject, version in registered.references:
        try:
            ref = client.by_subject(subject, version, "serialized")
        except UnknownSchema as exc:
            raise UnsupportedSchema(f"schema id {registered.schema_id} imports {ref_name!r}: {exc}") from None
        _add(pool, ref, client, ref_name, seen)
    proto = descriptor_pb2.FileDescriptorProto()
    try:
        proto.ParseFromString(base64.b64decode(registered.schema, validate=True))
    except Exception:  # noqa: BLE001 - not base64, or not a FileDescriptorProto
        raise UnsupportedSchema(f"schema id {registered.schema_id} did not come as a serialized FileDescriptorProto "
                                "(asked with ?format=serialized; a registry that answers .proto text cannot be read "
                                f"here): starts {registered.schema[:60]!r}") from None
    proto.name = name
    try:
        pool.Add(proto)
    except Exception as exc:  # noqa: BLE001 - a file the pool cannot build: an import missing, a clash
        raise UnsupportedSchema(f"schema id {registered.schema_id} does not build: {exc}") from None


def _message_at(file: Any, indexes: tuple[int, ...], schema_id: int) -> Descriptor:
    """The message the record's indexes name: the file's messages, then nested ones."""
    try:
        found = file.message_types_by_name[list(file.message_types_by_name)[indexes[0]]]
        for index in indexes[1:]:
            found = found.nested_types[index]
    except (IndexError, KeyError):
        raise UnsupportedSchema(f"the message indexes {list(indexes)} name no message of schema id {schema_id}") from None
    return found


class _Mapper:
    """Protobuf descriptors -> (Connect schema, reader of the message's values)."""

    def message(self, descriptor: Descriptor, optional: bool) -> tuple[ConnectSchema, Read]:
        fields, readers = [], []
        for field in descriptor.fields:
            schema, read = self.field(field)
            fields.append({**schema, "field": field.name})
            readers.append((field.name, read, _present(field)))
        connect = node("struct", optional, name=descriptor.full_name, fields=fields)

        def read_message(message: Any) -> Any:
            return {name: (read(getattr(message, name)) if present is None or present(message, name) else None)
                    for name, read, present in readers}
        return connect, read_message

    def field(self, field: FieldDescriptor) -> tuple[ConnectSchema, Read]:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            keys, read_key = self.single(field.message_type.fields_by_name["key"], optional=False)
            values, read_value = self.single(field.message_type.fields_by_name["value"], optional=True)
            return node("map", False, keys=keys, values=values), _map_reader(read_key, read_value, keys)
        if field.is_repeated:
            items, read_item = self.single(field, optional=False)
            return node("array", False, items=items), lambda values: [read_item(v) for v in values]
        return self.single(field, optional=_present(field) is not None)

    def single(self, field: FieldDescriptor, optional: bool) -> tuple[ConnectSchema, Read]:
        message = field.message_type
        if message is None:
            return self._scalar(field, optional)
        name = message.full_name
        if name == "confluent.type.Decimal":
            params = _params(field)
            parameters = {"scale": params.get("scale", "0"),
                          **({"connect.decimal.precision": params["precision"]} if "precision" in params else {})}
            return node("bytes", optional, name=DECIMAL, parameters=parameters), _decimal_reader(
                int(parameters["scale"]))
        if name == "google.type.Date":
            return node("int32", optional, name="org.apache.kafka.connect.data.Date"), _date
        if name == "google.type.TimeOfDay":
            return node("int32", optional, name="org.apache.kafka.connect.data.Time"), _time_of_day
        if name == "google.protobuf.Timestamp":
            return node("int64", optional, name="org.apache.kafka.connect.data.Timestamp"), _timestamp
        if name in WRAPPERS:
            kind = WRAPPERS[name]
            return node(kind, True), (lambda w: float32(w.value)) if kind == "float" else (lambda w: w.value)
        return self.message(message, optional=True)

    @staticmethod
    def _scalar(field: FieldDescriptor, optional: bool) -> tuple[ConnectSchema, Read]:
        kind = SCALARS.get(field.type)
        if kind is None:
            raise UnsupportedSchema(f"the Protobuf field {field.full_name} has a type this converter does not read")
        if kind == "int32" and _params(field).get("connect.type") in ("int8", "int16"):
            kind = _params(field)["connect.type"]
        if field.type == FieldDescriptor.TYPE_ENUM:
            names = {v.number: v.name for v in field.enum_type.values}
            return node("string", optional), lambda number: names.get(number, str(number))
        return node(kind, optional), (float32 if kind == "float" else _same)


def _same(value: Any) -> Any:
    return value


def _present(field: FieldDescriptor) -> Callable[[Any, str], bool] | None:
    """How to tell a field that is not set (a message, proto3 optional), or None where it has a value
    always (a plain scalar, a repeated field, a map)."""
    if field.is_repeated:
        return None
    if field.message_type is not None or field.has_presence:
        return lambda message, name: message.HasField(name)
    return None


def _params(field: FieldDescriptor) -> dict[str, str]:
    """A field's ``(confluent.field_meta).params``."""
    from confluent_kafka.schema_registry.confluent import meta_pb2  # noqa: PLC0415

    options = field.GetOptions()
    try:
        if not options.HasExtension(meta_pb2.field_meta):
            return {}
        return dict(options.Extensions[meta_pb2.field_meta].params)
    except (KeyError, TypeError):
        return {}


def _decimal_reader(scale: int) -> Read:
    """confluent.type.Decimal {value: unscaled two's complement, precision, scale} -> base64 bytes at
    the schema's scale (what the JsonConverter writes for a Connect Decimal)."""
    def read(decimal: Any) -> str:
        unscaled = int.from_bytes(decimal.value, "big", signed=True) if decimal.value else 0
        if decimal.scale != scale:
            shift = scale - decimal.scale
            unscaled = unscaled * 10 ** shift if shift > 0 else unscaled // 10 ** -shift
        size = max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1)
        return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode("ascii")
    return read


def _date(date: Any) -> int:
    return (dt.date(date.year, date.month, date.day) - _EPOCH).days


def _time_of_day(time: Any) -> int:
    return ((time.hours * 60 + time.minutes) * 60 + time.seconds) * 1000 + time.nanos // 1_000_000


def _timestamp(stamp: Any) -> int:
    return int(stamp.seconds * 1000 + stamp.nanos // 1_000_000)


def _map_reader(read_key: Read, read_value: Read, keys: ConnectSchema) -> Read:
    if keys["type"] == "string":
        return lambda entries: {read_key(k): read_value(v) for k, v in entries.items()}
    return lambda entries: [[read_key(k), read_value(v)] for k, v in entries.items()]
