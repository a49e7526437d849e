"""The read task's decoder for a registry converter (``key_converter`` / ``value_converter``
``avro``, ``protobuf``, ``json_schema_registry``): each framed key and value is transcoded into the
bytes Kafka Connect's JsonConverter (``schemas.enable=true``) writes for the same Connect record,
then the batch is decoded by the Debezium decoder as it decodes JSON (column-wise where it can), so
every type, table and index mapping comes from the same code as for JSON (docs/types.md).

Per schema id (and Protobuf message) there is one compiled transcoder for the life of the worker
process: the registry is asked once, and the Connect schema's JSON is one bytes object, so the
Debezium decoder's compiled readers, keyed by the schema's bytes, are found again.

What goes to the DLQ (the stage ``converter``, with the reason): bytes without the magic byte, an
id the registry does not know, a body that does not decode by its schema, a schema with a construct
that has no Connect form. What fails the window: the registry being down (RegistryUnavailable).
The DLQ gets the record's original bytes, never the transcoded ones: the decoded batch's ``key`` and
``value`` stay the record's own. For a transform chain, which reads keys and values again (the
add_fields of an unwrap, a key's fields), the transcoded ones ride beside them (``JSON_COLUMNS``,
read by :func:`json_bytes`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors.errors import CdcflowError
from connectors.registry import wire
from connectors.registry.client import RegisteredSchema, RegistryClient, RegistrySettings, UnknownSchema
from connectors.registry.config import REGISTRY_CONVERTERS
from connectors.registry.connect import Transcoder, UnsupportedSchema

CONVERTER_NAMES = {"avro": "Avro (AvroConverter)", "protobuf": "Protobuf (ProtobufConverter)",
                   "json_schema_registry": "JSON Schema (JsonSchemaConverter)"}
EXPECTED_TYPE = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema_registry": "JSON"}

MAX_TRANSCODERS = 4096  # compiled schemas kept per worker process (a deployment has few ids per topic)
# (registry URL, converter, schema id, message indexes) -> the compiled transcoder, or why there is none;
# an id the registry did not know is not asked for again by this process (ids are never reused)
_TRANSCODERS: dict[tuple[str, str, int, tuple[int, ...]], Transcoder | UnsupportedSchema | UnknownSchema] = {}
# the columns a decoded batch carries the JsonConverter's bytes of its keys and values in (``keep_json``)
JSON_COLUMNS = {"key": "json_key", "value": "json_value"}


def json_bytes(table: pa.Table | pa.RecordBatch, side: str) -> pa.Array:
    """A decoded batch's keys or values (``side``) as the JsonConverter writes them: those a registry
    converter transcoded (kept for a chain), else the record's own bytes."""
    name = JSON_COLUMNS[side] if JSON_COLUMNS[side] in table.schema.names else side
    column = table.column(name)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _build(converter: str, registered: RegisteredSchema, client: RegistryClient, indexes: tuple[int, ...]) -> Transcoder:
    if registered.schema_type != EXPECTED_TYPE[converter]:
        raise UnsupportedSchema(f"it is registered as {registered.schema_type} (the converter is {converter}): set the "
                                "pipeline's converter to the one the topic is written with")
    if converter == "avro":
        from connectors.registry import avro  # noqa: PLC0415 - fastavro only where Avro is read

        return avro.transcoder(registered.schema)
    if converter == "json_schema_registry":
        from connectors.registry import json_schema  # noqa: PLC0415

        return json_schema.transcoder(registered.schema)
    from connectors.registry import protobuf  # noqa: PLC0415 - protobuf's runtime only where it is read

    return protobuf.transcoder(registered, client, indexes)


class Transcoders:
    """The transcoders of one converter against one registry."""

    def __init__(self, converter: str, settings: RegistrySettings) -> None:
        self.converter = converter
        self.client = RegistryClient(settings)
        self.frame: Callable[[bytes, str], wire.Framed] = (
            wire.protobuf_frame if converter == "protobuf" else wire.frame)

    def of(self, schema_id: int, indexes: tuple[int, ...]) -> Transcoder:
        """The compiled transcoder of ``schema_id`` (raises UnknownSchema / UnsupportedSchema, cached
        as well: an id the registry does not know is not asked for again in this process)."""
        key = (self.client.settings.url, self.converter, schema_id, indexes)
        found = _TRANSCODERS.get(key)
        if found is None:
            try:
                registered = self.client.by_id(schema_id, "serialized" if self.converter == "protobuf" else None)
                found = _build(self.converter, registered, self.client, indexes)
            except UnknownSchema as exc:
                found = exc
            except CdcflowError:
                raise  # the registry down: the window fails
            except Exception as exc:  # noqa: BLE001 - a schema the mapping cannot read, whatever it raises
                reason = str(exc) if isinstance(exc, UnsupportedSchema) else f"{type(exc).__name__}: {exc}"
                found = UnsupportedSchema(f"schema id {schema_id} cannot be read as {CONVERTER_NAMES[self.converter]}: "
                                          f"{reason}")
            if len(_TRANSCODERS) >= MAX_TRANSCODERS:
                _TRANSCODERS.clear()
            _TRANSCODERS[key] = found
        if isinstance(found, Exception):
            raise found
        return found

    def transcode(self, data: bytes, side: str) -> bytes:
        """One framed key or value -> the JsonConverter's bytes; ValueError/LookupError say why not."""
        framed = self.frame(data, side)
        coder = self.of(framed.schema_id, framed.indexes)
        try:
            return coder.envelope(framed.body)
        except Exception as exc:  # noqa: BLE001 - a body the schema's reader refuses, whatever it raises
            raise UnsupportedSchema(f"{side} does not decode as {CONVERTER_NAMES[self.converter]} by schema id "
                                    f"{framed.schema_id}: {type(exc).__name__}: {exc}") from None


class RegistryDecoder:
    """The Debezium decoder behind registry converters (``inner``: connectors/debezium/envelope.Decoder);
    with ``keep_json`` the decoded batch also carries the transcoded keys and values (``JSON_COLUMNS``)."""

    def __init__(self, inner: Any, settings: RegistrySettings, key_converter: str, value_converter: str,
                 keep_json: bool = False) -> None:
        self.inner = inner
        self.keep_json = keep_json
        self.sides = {side: Transcoders(conv, settings) for side, conv in
                      (("key", key_converter), ("value", value_converter)) if conv in REGISTRY_CONVERTERS}

    @property
    def column_wise_min(self) -> int:
        return int(self.inner.column_wise_min)

    @column_wise_min.setter
    def column_wise_min(self, value: int) -> None:
        self.inner.column_wise_min = value

    def decode_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        reasons: list[str | None] = [None] * batch.num_rows
        columns = {name: batch.column(name) for name in ("key", "value")}
        for side, coders in self.sides.items():
            columns[side] = self._transcoded(coders, batch.column(side), side, reasons)
        bad = np.array([r is not None for r in reasons], dtype=bool)
        if bad.any():  # a record read on no side: an empty value, which the inner decoder refuses
            columns["value"] = pc.if_else(pa.array(bad), pa.scalar(b"", pa.binary()), columns["value"])
            columns["key"] = pc.if_else(pa.array(bad), pa.scalar(None, pa.binary()), columns["key"])
        read = batch.set_column(batch.schema.get_field_index("key"), "key", columns["key"])
        read = read.set_column(read.schema.get_field_index("value"), "value", columns["value"])
        decoded = self.inner.decode_batch(read)
        if decoded.num_rows != batch.num_rows:
            raise AssertionError("a Debezium record decodes into one change")
        for side in ("key", "value"):  # the record's own bytes, for the DLQ
            decoded = decoded.set_column(decoded.schema.get_field_index(side), side, batch.column(side))
            if self.keep_json:
                decoded = decoded.append_column(JSON_COLUMNS[side], columns[side])
        return _with_reasons(decoded, bad, reasons) if bad.any() else decoded

    @staticmethod
    def _transcoded(coders: Transcoders, column: pa.Array, side: str, reasons: list[str | None]) -> pa.Array:
        out: list[bytes | None] = []
        for i, data in enumerate(column.to_pylist()):
            if data is None:  # a tombstone's value, a record without a key: as the JsonConverter reads null
                out.append(None)
                continue
            try:
                out.append(coders.transcode(data, side))
            except (ValueError, LookupError) as exc:
                reasons[i] = reasons[i] or f"{side}.converter {coders.converter}: {exc}"
                out.append(None)
        return pa.array(out, pa.binary())


def _with_reasons(decoded: pa.RecordBatch, bad: np.ndarray, reasons: list[str | None]) -> pa.RecordBatch:
    """The records that could not be transcoded: error rows (stage converter) with their reason."""
    mask = pa.array(bad)
    stage = pc.if_else(mask, pa.scalar("converter"), decoded.column("error_stage"))
    message = pc.if_else(mask, pa.array(reasons, pa.string()), decoded.column("error_message"))
    decoded = decoded.set_column(decoded.schema.get_field_index("error_stage"), "error_stage", stage)
    return decoded.set_column(decoded.schema.get_field_index("error_message"), "error_message", message)


def registry_decoder(inner: Any, settings: RegistrySettings | None, key_converter: str,
                     value_converter: str, keep_json: bool = False) -> Any:
    """``inner`` wrapped when a side uses a registry converter (``keep_json``: the transcoded keys and
    values kept beside the record's own, for a chain); else ``inner`` itself."""
    if key_converter not in REGISTRY_CONVERTERS and value_converter not in REGISTRY_CONVERTERS:
        return inner
    if settings is None:
        raise ValueError("a registry converter needs source.schema_registry (the registry's connection)")
    return RegistryDecoder(inner, settings, key_converter, value_converter, keep_json)
