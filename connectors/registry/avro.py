"""Avro records of Confluent's AvroConverter / AvroSerializer -> what the JsonConverter writes.

The Connect schema is read back from the Avro schema as Confluent's ``AvroData.toConnectSchema``
reads it (schema-registry, ``avro-data/.../AvroData.java``):

* ``connect.name`` names a schema (else a record's or enum's full name); ``connect.version``,
  ``connect.parameters`` (Debezium's ``io.debezium.time.*``, ``io.debezium.data.Enum`` with
  ``allowed``, ``Bits`` with ``length``, Connect's Decimal with ``scale`` and
  ``connect.decimal.precision`` …) and ``connect.doc`` go along;
* ``connect.type`` ``int8`` / ``int16`` on an Avro ``int``;
* a union of null and one type is that type, optional; a record field's type is its schema;
* Avro's own logical types, where no ``connect.name`` says more: ``decimal`` (bytes or fixed) is
  Connect's Decimal, ``date`` its Date, ``time-millis`` its Time, ``timestamp-millis`` its Timestamp,
  and (beyond AvroData, which leaves them plain longs) ``time-micros`` / ``timestamp-micros`` are
  Debezium's MicroTime / MicroTimestamp, ``local-timestamp-*`` the same wall-clock types;
* ``array``, ``map`` (string keys) and ``array`` of ``io.confluent.connect.avro.MapEntry`` records
  (a map with other keys); ``enum`` is a string, ``fixed`` bytes.

Values are read by fastavro's ``schemaless_reader`` against the writer's schema with every
``logicalType`` taken out, so each value comes as its Connect physical value (a Decimal's unscaled
two's-complement bytes, a date's days, a timestamp's long) and is written as the JsonConverter writes
it: bytes as base64 (msgspec's encoding of bytes), a FLOAT32 by its float text.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro

from connectors.debezium.types import DECIMAL
from connectors.registry.connect import (
    ConnectSchema,
    Fixer,
    Transcoder,
    UnsupportedSchema,
    encode,
    float32,
    list_fixer,
    map_fixer,
    node,
    schema_bytes,
    struct_fixer,
)

# Avro type -> the JsonConverter's type name (FLOAT32 is "float", FLOAT64 "double" in its JSON schemas)
PRIMITIVES = {"boolean": "boolean", "int": "int32", "long": "int64", "float": "float", "double": "double",
              "bytes": "bytes", "string": "string", "fixed": "bytes", "enum": "string"}
# Avro logical type -> the Connect (or Debezium) logical name of the same unit, when no connect.name is given
LOGICAL_NAMES = {"date": "org.apache.kafka.connect.data.Date", "time-millis": "org.apache.kafka.connect.data.Time",
                 "timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
                 "local-timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
                 "time-micros": "io.debezium.time.MicroTime", "timestamp-micros": "io.debezium.time.MicroTimestamp",
                 "local-timestamp-micros": "io.debezium.time.MicroTimestamp"}
_PHYSICAL = {"date": "int", "time-millis": "int"} | {t: "long" for t in LOGICAL_NAMES if t not in ("date", "time-millis")}
MAP_ENTRY = "io.confluent.connect.avro.MapEntry"
PRECISION_DEFAULT = 64  # AvroData leaves connect.decimal.precision out when the Avro precision is this


def transcoder(schema_text: str) -> Transcoder:
    """One Avro schema (the registry's text), compiled once: its Connect schema's JSON bytes and a
    reader of bodies into the JsonConverter's payload bytes."""
    try:
        avro = json.loads(schema_text)
    except ValueError as exc:
        raise UnsupportedSchema(f"the registry's Avro schema is not JSON: {exc}") from None
    mapper = _Mapper()
    connect, fix = mapper.convert(avro, "")
    try:
        parsed = fastavro.parse_schema(_without_logical_types(avro), _ignore_default_error=True)
    except Exception as exc:  # noqa: BLE001 - fastavro raises several kinds for a schema it cannot read
        raise UnsupportedSchema(f"fastavro cannot read the Avro schema: {exc}") from None
    read = fastavro.schemaless_reader

    def payload(body: memoryview) -> bytes:
        value = read(io.BytesIO(body), parsed, None)
        return encode(fix(value) if fix is not None else value)
    return Transcoder(schema_bytes(connect), payload)


def connect_schema(avro: Any) -> ConnectSchema:
    """The Connect schema of a parsed Avro schema (JSON), as AvroData reads it."""
    return _Mapper().convert(avro, "")[0]


def _without_logical_types(avro: Any) -> Any:
    """The schema with every logicalType removed: fastavro then hands back the physical values."""
    if isinstance(avro, dict):
        return {k: _without_logical_types(v) for k, v in avro.items() if k != "logicalType"}
    if isinstance(avro, list):
        return [_without_logical_types(v) for v in avro]
    return avro


class _Mapper:
    """Avro schema -> (Connect schema, fixer of the decoded value or None); named types are
    remembered by full name, as Avro resolves a reference to a type defined earlier."""

    def __init__(self) -> None:
        self.named: dict[str, tuple[ConnectSchema, Fixer | None]] = {}

    def convert(self, avro: Any, namespace: str, optional: bool = False) -> tuple[ConnectSchema, Fixer | None]:
        if isinstance(avro, list):
            return self._union(avro, namespace)
        if isinstance(avro, str):
            if avro in PRIMITIVES or avro == "null":
                avro = {"type": avro}
            else:
                return self._reference(avro, namespace, optional)
        if not isinstance(avro, dict):
            raise UnsupportedSchema(f"an Avro schema node that is not a name, a union or an object: {avro!r}")
        kind = avro.get("type")
        if isinstance(kind, (dict, list)):  # {"type": {...}}: a wrapped schema (field types are read this way)
            return self.convert(kind, namespace, optional)
        if kind == "record" or kind == "error":
            return self._record(avro, namespace, optional)
        if kind == "array":
            return self._array(avro, namespace, optional)
        if kind == "map":
            values, fix = self.convert(avro.get("values"), namespace)
            return self._named(avro, node("map", optional, keys=node("string"), values=values)), map_fixer(fix)
        if kind == "null":
            raise UnsupportedSchema("a standalone Avro null (AvroData reads null only in a union)")
        if kind in PRIMITIVES:
            return self._primitive(avro, kind, namespace, optional)
        if isinstance(kind, str):
            return self._reference(kind, namespace, optional)
        raise UnsupportedSchema(f"an Avro type {kind!r} this converter does not read")

    def _primitive(self, avro: dict[str, Any], kind: str, namespace: str,
                   optional: bool) -> tuple[ConnectSchema, Fixer | None]:
        connect = PRIMITIVES[kind]
        logical = avro.get("logicalType")
        params: dict[str, str] = {}
        name = None
        if kind == "int" and avro.get("connect.type") in ("int8", "int16"):
            connect = avro["connect.type"]
        if logical == "decimal" and kind in ("bytes", "fixed"):
            name, params = DECIMAL, {"scale": str(int(avro.get("scale", 0)))}
            if avro.get("precision") is not None and int(avro["precision"]) != PRECISION_DEFAULT:
                params["connect.decimal.precision"] = str(int(avro["precision"]))
        elif isinstance(logical, str) and logical in LOGICAL_NAMES and kind == _PHYSICAL[logical]:
            name = LOGICAL_NAMES[logical]
        if kind == "enum":
            params = {"io.confluent.connect.avro.Enum": _full_name(avro, namespace),
                      **{f"io.confluent.connect.avro.Enum.{s}": s for s in avro.get("symbols") or ()}}
            name = _full_name(avro, namespace)
        schema = self._named(avro, node(connect, optional, name=name, parameters=params))
        if kind in ("fixed", "enum") and avro.get("name"):
            self.named[_full_name(avro, namespace)] = (schema, None)
        return schema, (float32 if connect == "float" else None)

    def _record(self, avro: dict[str, Any], namespace: str, optional: bool) -> tuple[ConnectSchema, Fixer | None]:
        full = _full_name(avro, namespace)
        inner = full.rpartition(".")[0]
        fields, fixers = [], []
        for f in avro.get("fields") or ():
            schema, fix = self.convert(f.get("type"), inner)
            if f.get("default") is not None and schema["type"] != "bytes":  # AvroData: the field's default
                schema = {**schema, "default": f["default"]}
            fields.append({**schema, "field": f.get("name")})
            fixers.append((f.get("name"), fix))
        if full == "io.confluent.connect.avro.ConnectDefault":
            full = None  # AvroData's default name stands for a schema without one
        schema = self._named(avro, node("struct", optional, name=full, fields=fields))
        fixer = struct_fixer(fixers)
        if full:
            self.named[full] = (schema, fixer)
        return schema, fixer

    def _array(self, avro: dict[str, Any], namespace: str, optional: bool) -> tuple[ConnectSchema, Fixer | None]:
        items, fix = self.convert(avro.get("items"), namespace)
        if items.get("type") == "struct" and items.get("name") == MAP_ENTRY:
            key = next(f for f in items["fields"] if f["field"] == "key")
            value = next(f for f in items["fields"] if f["field"] == "value")
            strip = {"field"}
            return (self._named(avro, node("map", optional, keys={k: v for k, v in key.items() if k not in strip},
                                           values={k: v for k, v in value.items() if k not in strip})),
                    _entries_fixer(fix))
        return self._named(avro, node("array", optional, items=items)), list_fixer(fix)

    def _union(self, branches: list[Any], namespace: str) -> tuple[ConnectSchema, Fixer | None]:
        real = [b for b in branches if b != "null" and b != {"type": "null"}]
        if len(real) == 1 and len(branches) == 2:
            schema, fix = self.convert(real[0], namespace, optional=True)
            return {**schema, "optional": True}, fix
        raise UnsupportedSchema(f"an Avro union of {len(real)} types ({', '.join(map(_describe, real))}): only "
                                "a union of null and one type is read (an optional field)")

    def _reference(self, name: str, namespace: str, optional: bool) -> tuple[ConnectSchema, Fixer | None]:
        full = name if "." in name else (f"{namespace}.{name}" if namespace else name)
        found = self.named.get(full) or self.named.get(name)
        if found is None:
            raise UnsupportedSchema(f"the Avro schema refers to the type {name!r}, which it does not define "
                                    "(schema references are not read)")
        return {**found[0], "optional": optional}, found[1]

    @staticmethod
    def _named(avro: dict[str, Any], schema: ConnectSchema) -> ConnectSchema:
        """``connect.name``, ``connect.version``, ``connect.doc`` and ``connect.parameters`` on top."""
        out = dict(schema)
        if isinstance(avro.get("connect.name"), str):
            out["name"] = avro["connect.name"]
        if isinstance(avro.get("connect.version"), int):
            out["version"] = avro["connect.version"]
        if isinstance(avro.get("connect.doc"), str):
            out["doc"] = avro["connect.doc"]
        params = avro.get("connect.parameters")
        if isinstance(params, dict):
            out["parameters"] = {**out.get("parameters", {}), **{k: str(v) for k, v in params.items()}}
        return out


def _entries_fixer(fix: Fixer | None) -> Fixer:
    """An array of MapEntry records -> a JSON object (the JsonConverter writes a map with string keys
    so; other keys as an array of [key, value] pairs)."""
    def entries(value: Any) -> Any:
        if value is None:
            return None
        pairs = [fix(e) if fix is not None else e for e in value]
        if all(isinstance(p.get("key"), str) for p in pairs):
            return {p["key"]: p["value"] for p in pairs}
        return [[p["key"], p["value"]] for p in pairs]
    return entries


def _full_name(avro: dict[str, Any], namespace: str) -> str:
    name = str(avro.get("name") or "")
    if "." in name:
        return name
    space = avro.get("namespace", namespace)
    return f"{space}.{name}" if space else name


def _describe(branch: Any) -> str:
    if isinstance(branch, dict):
        return str(branch.get("name") or branch.get("type"))
    return str(branch)
