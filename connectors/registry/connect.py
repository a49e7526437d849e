"""What Kafka Connect's JsonConverter (``schemas.enable=true``) writes, built from a registry schema:
the Connect schema as JSON (``JsonConverter.asJsonSchema``: type, fields with their ``field`` name,
items / keys / values, optional, name, version, parameters) and the envelope
``{"schema": …, "payload": …}`` around a value.

The envelope's bytes are laid out exactly as the JsonConverter lays them out, schema first, so the
Debezium decoder's column-wise read (connectors/debezium/columns.py) groups the records of one schema
by their byte prefix, and its compiled readers (keyed by the schema's bytes) are found again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

ConnectSchema = dict[str, Any]
Fixer = Callable[[Any], Any]  # a decoded value -> its JsonConverter form (only where it differs)

_ENCODE = msgspec.json.Encoder()  # bytes as standard base64, as the JsonConverter writes BYTES


class UnsupportedSchema(ValueError):
    """A registry schema with a construct that has no Connect form here; names the construct."""


def node(kind: str, optional: bool = False, name: str | None = None, version: int | None = None,
         parameters: dict[str, str] | None = None, doc: str | None = None, **parts: Any) -> ConnectSchema:
    """One Connect schema node in the JsonConverter's key order."""
    out: ConnectSchema = {"type": kind, **parts, "optional": optional}
    if name is not None:
        out["name"] = name
    if version is not None:
        out["version"] = version
    if doc is not None:
        out["doc"] = doc
    if parameters:
        out["parameters"] = {k: str(v) for k, v in parameters.items()}
    return out


def schema_bytes(schema: ConnectSchema) -> bytes:
    return _ENCODE.encode(schema)


def float32(value: Any) -> Any:
    """A FLOAT32 as Java's ``Float.toString`` writes it (the shortest text of the float, not of the
    double it was widened to: 1.1, not 1.100000023841858)."""
    return value if value is None else float(str(np.float32(value)))


@dataclass(frozen=True)
class Transcoder:
    """One registry schema id, compiled: its Connect schema's JSON bytes (the same object for every
    record) and ``payload``, body bytes -> the payload's JSON bytes."""

    schema_json: bytes
    payload: Callable[[memoryview], bytes]

    def envelope(self, body: memoryview) -> bytes:
        return b'{"schema":' + self.schema_json + b',"payload":' + self.payload(body) + b"}"


def encode(value: Any) -> bytes:
    return _ENCODE.encode(value)


def struct_fixer(fields: list[tuple[str, Fixer | None]]) -> Fixer | None:
    """A fixer of a struct's dict (fastavro's and the others' decoded values are fresh: fixed in place);
    None when no field needs one."""
    needed = [(name, fix) for name, fix in fields if fix is not None]
    if not needed:
        return None

    def fix_struct(value: Any) -> Any:
        if value is None:
            return None
        for name, fix in needed:
            value[name] = fix(value.get(name))
        return value
    return fix_struct


def list_fixer(item: Fixer | None) -> Fixer | None:
    if item is None:
        return None
    return lambda value: None if value is None else [item(v) for v in value]


def map_fixer(item: Fixer | None) -> Fixer | None:
    if item is None:
        return None
    return lambda value: None if value is None else {k: item(v) for k, v in value.items()}
