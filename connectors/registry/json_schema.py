"""JSON Schema records of Confluent's JsonSchemaConverter / JSONSerializer -> what the JsonConverter
writes.

The body after the frame is plain JSON. The Connect schema is read from the JSON Schema as
Confluent's ``JsonSchemaData.toConnectSchema`` reads it (schema-registry,
``json-schema-converter/.../JsonSchemaData.java``):

* ``integer`` / ``number`` with ``connect.type`` int8 … int64, float32, float64, or ``bytes`` for a
  Decimal (without it: int64 / float64); ``string`` with ``connect.type: bytes`` is bytes (base64
  text); ``boolean``; ``enum`` a string;
* ``object`` a struct, its properties in ``connect.index`` order; with ``connect.type: map`` a map
  of its ``additionalProperties``; ``array`` an array (with ``connect.type: map``, a map of
  key/value entries);
* ``oneOf`` of null and one schema (also a ``type`` list with null): that schema, optional;
* ``title`` the name, ``connect.version``, ``description`` the doc, ``connect.parameters``, ``default``;
  local ``$ref`` (``#/definitions/…``, ``#/$defs/…``) are followed.

Values are rewritten where the JsonConverter's form differs: a Decimal written as a JSON number (the
converter's ``decimal.format=NUMERIC``) becomes its base64 unscaled bytes, a FLOAT32 its float text.
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import msgspec

from connectors.debezium.types import DECIMAL
from connectors.registry.connect import (
    ConnectSchema,
    Fixer,
    Transcoder,
    UnsupportedSchema,
    float32,
    list_fixer,
    map_fixer,
    node,
    schema_bytes,
    struct_fixer,
)

NUMBER_TYPES = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "float32": "float",
                "float64": "double", "bytes": "bytes"}
_DECODE = msgspec.json.Decoder(float_hook=Decimal)  # a decimal's digits kept
_ENCODE = msgspec.json.Encoder(decimal_format="number")


def transcoder(schema_text: str) -> Transcoder:
    """One JSON Schema (the registry's text), compiled once."""
    try:
        root = json.loads(schema_text)
    except ValueError as exc:
        raise UnsupportedSchema(f"the registry's JSON Schema is not JSON: {exc}") from None
    connect, fix = _Mapper(root).convert(root)

    def payload(body: memoryview) -> bytes:
        value = _DECODE.decode(body)
        return _ENCODE.encode(fix(value) if fix is not None else value)
    return Transcoder(schema_bytes(connect), payload)


def connect_schema(schema: Any) -> ConnectSchema:
    return _Mapper(schema).convert(schema)[0]


class _Mapper:
    def __init__(self, root: Any) -> None:
        self.root = root

    def convert(self, schema: Any, optional: bool = False) -> tuple[ConnectSchema, Fixer | None]:
        if schema is True or schema == {}:
            raise UnsupportedSchema("a JSON Schema that allows anything has no Connect type")
        if not isinstance(schema, dict):
            raise UnsupportedSchema(f"a JSON Schema node that is not an object: {schema!r}")
        if "$ref" in schema:
            return self.convert(self._resolve(schema["$ref"]), optional)
        choice = schema.get("oneOf") or schema.get("anyOf")
        kind = schema.get("type")
        if isinstance(kind, list):
            choice = [{**schema, "type": k} for k in kind]
        if choice is not None:
            return self._union(choice, optional)
        if "enum" in schema and kind in (None, "string"):
            return self._meta(schema, node("string", optional)), None
        if kind in ("integer", "number"):
            return self._number(schema, kind, optional)
        if kind == "string":
            bytes_ = schema.get("connect.type") == "bytes"
            return self._meta(schema, node("bytes" if bytes_ else "string", optional)), None
        if kind == "boolean":
            return self._meta(schema, node("boolean", optional)), None
        if kind == "array":
            return self._array(schema, optional)
        if kind == "object":
            return self._object(schema, optional)
        raise UnsupportedSchema(f"a JSON Schema of type {kind!r} this converter does not read "
                                f"({json.dumps(schema)[:80]})")

    def _number(self, schema: dict[str, Any], kind: str, optional: bool) -> tuple[ConnectSchema, Fixer | None]:
        declared = schema.get("connect.type")
        connect = NUMBER_TYPES.get(declared) if declared else ("int64" if kind == "integer" else "double")
        if connect is None:
            raise UnsupportedSchema(f"connect.type {declared!r} on a JSON Schema {kind}")
        out = self._meta(schema, node(connect, optional))
        if connect == "bytes" and out.get("name") == DECIMAL:
            return out, _decimal_fixer(int((out.get("parameters") or {}).get("scale", 0)))
        return out, (float32 if connect == "float" else None)

    def _array(self, schema: dict[str, Any], optional: bool) -> tuple[ConnectSchema, Fixer | None]:
        items = schema.get("items")
        if schema.get("connect.type") == "map" and isinstance(items, dict) and items.get("type") == "object":
            props = items.get("properties") or {}
            keys, key_fix = self.convert(props.get("key"))
            values, value_fix = self.convert(props.get("value"))
            fix = _entries_fixer(key_fix, value_fix)
            return self._meta(schema, node("map", optional, keys=keys, values=values)), fix
        converted, fix = self.convert(items)
        return self._meta(schema, node("array", optional, items=converted)), list_fixer(fix)

    def _object(self, schema: dict[str, Any], optional: bool) -> tuple[ConnectSchema, Fixer | None]:
        if schema.get("connect.type") == "map":
            values, fix = self.convert(schema.get("additionalProperties"))
            return self._meta(schema, node("map", optional, keys=node("string"), values=values)), map_fixer(fix)
        properties = schema.get("properties") or {}
        ordered = sorted(enumerate(properties.items()), key=lambda p: (_index(p[1][1], p[0]), p[0]))
        fields, fixers = [], []
        for _i, (name, sub) in ordered:
            converted, fix = self.convert(sub)
            fields.append({**converted, "field": name})
            fixers.append((name, fix))
        return self._meta(schema, node("struct", optional, fields=fields)), struct_fixer(fixers)

    def _union(self, choice: list[Any], optional: bool) -> tuple[ConnectSchema, Fixer | None]:
        real = [c for c in choice if not (isinstance(c, dict) and c.get("type") == "null")]
        if len(real) == 1 and len(choice) == 2:
            converted, fix = self.convert(real[0], True)
            return {**converted, "optional": True}, fix
        raise UnsupportedSchema(f"a JSON Schema oneOf of {len(real)} schemas: only null and one schema (an optional "
                                "field) is read")

    def _resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise UnsupportedSchema(f"the JSON Schema refers to {ref!r} outside itself (schema references are not read)")
        found: Any = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(found, dict) or part not in found:
                raise UnsupportedSchema(f"the JSON Schema's $ref {ref!r} points at nothing")
            found = found[part]
        return found

    @staticmethod
    def _meta(schema: dict[str, Any], out: ConnectSchema) -> ConnectSchema:
        """title, connect.version, description, connect.parameters and default, as JsonSchemaData reads them."""
        if isinstance(schema.get("title"), str):
            out["name"] = schema["title"]
        if isinstance(schema.get("connect.version"), int):
            out["version"] = schema["connect.version"]
        if isinstance(schema.get("description"), str):
            out["doc"] = schema["description"]
        if isinstance(schema.get("connect.parameters"), dict):
            out["parameters"] = {k: str(v) for k, v in schema["connect.parameters"].items()}
        if schema.get("default") is not None:
            out["default"] = schema["default"]
        return out


def _index(schema: Any, position: int) -> int:
    """A property's ``connect.index`` (on it, or on its oneOf); else its place in the object."""
    if isinstance(schema, dict) and isinstance(schema.get("connect.index"), int):
        return int(schema["connect.index"])
    return position


def _decimal_fixer(scale: int) -> Fixer:
    """A Decimal written as a JSON number -> the base64 of its two's-complement unscaled value at
    ``scale`` (what the JsonConverter writes); base64 text (decimal.format=BASE64) is kept."""
    def fix(value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        unscaled = int(Decimal(value).scaleb(scale).to_integral_exact())
        size = max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1)
        return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode("ascii")
    return fix


def _entries_fixer(key_fix: Fixer | None, value_fix: Fixer | None) -> Fixer:
    def fix(value: Any) -> Any:
        if value is None:
            return None
        pairs = [((key_fix(e.get("key")) if key_fix else e.get("key")),
                  (value_fix(e.get("value")) if value_fix else e.get("value"))) for e in value]
        if all(isinstance(k, str) for k, _v in pairs):
            return dict(pairs)
        return [[k, v] for k, v in pairs]
    return fix
