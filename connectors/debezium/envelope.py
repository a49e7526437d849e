"""Debezium change events -> the window's change rows, inside the read task (``source.format:
debezium``, the default; the change model is connectors/changes.py).

Each raw record (Kafka key and value bytes) becomes one change row: ``change_op`` (upsert or
delete), ``image`` (the row image, field -> exact text, see connectors/debezium/types.py),
``image_json`` (the row image as a JSON document, for Elasticsearch), ``version``, and
``error_stage``/``error_message`` for the records that cannot be read (they go to the DLQ).

Values are read by their Connect schema when the record has one (the JsonConverter's ``{schema,
payload}`` wrapper; each distinct schema is compiled once, by its bytes) and by the sink's declared
columns when it has none. Envelopes with and without the wrapper, tombstones, deletes that carry
only a key, and snapshot reads (``op: r``) are all changes.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

import msgspec
import pyarrow as pa

from connectors.changes import (  # noqa: F401 - VERSION_SHIFT: re-exported
    JSON_DECODE,
    JSON_ENCODE,
    TRUNCATE,
    VERSION_SHIFT,
    Change,
    RecordDecoder,
    RecordError,
    bigint,
    text,
    version_of,
)
from connectors.debezium import envelope_parts as parts
from connectors.debezium.columns import decode_columns
from connectors.debezium.logical import BadValue, plain_text
from connectors.debezium.schema_columns import mysql_columns
from connectors.debezium.types import ColumnHint, FieldSchema, RowReader, compile_row

COLUMN_WISE_MIN = 64  # records: a smaller batch is decoded record by record (Decoder.decode_batch)
MAX_SCHEMAS = 1024  # compiled row readers kept per worker process (a window has few distinct schemas)

# fields ExtractNewRecordState adds to an unwrapped row (add.fields, delete.handling.mode=rewrite)
UNWRAPPED_MARKERS = ("__op", "__deleted", "__source_ts_ms")

_DECODE = JSON_DECODE
_ENCODE = JSON_ENCODE
_SCALARS = frozenset({int, bool, Decimal})  # a schemaless JSON value typed in the image (Decoder._read)


_ROW_UNVERSIONED = ("no source.ts_ms to version the change by (versioning: source_ts_ms needs a Debezium topic and an "
                    "ExtractNewRecordState transform; otherwise set versioning: kafka_offset)")


# The compiled readers, per (declared columns, envelope field, schema), kept by the worker process from
# window to window (Spark reuses a Python worker): a table's schema is compiled once, not once per
# window (~0.7 ms for a table of 33 columns). A reader is not changed after it is compiled.
_COMPILED: dict[tuple[tuple[tuple[str, str, str | None], ...], bytes], RowReader] = {}


class Decoder(RecordDecoder):
    """Decodes a task's records by the compiled readers of their schemas."""

    def __init__(self, versioning: str, hints: Mapping[str, ColumnHint] | None = None, need_json: bool = True,
                 fields: frozenset[str] | None = None, rows: str | None = None, nested: bool = False) -> None:
        self.versioning = versioning
        self.nested = nested  # structs and lists stay such in the column-wise images (group_decode._values)
        # Kafka Connect's record model, the value the row (:meth:`_row`), read by this value converter
        self.rows = rows
        self.hints = dict(hints or {})
        self.need_json = need_json
        self.fields = fields  # the row fields the sinks use (None: all); only without documents
        self._hints_key = tuple(sorted((n, h.type, h.encoding) for n, h in self.hints.items()))
        self._described: set[str] = set()
        self.schemaless = compile_row(None, self.hints)

    # -- schemas --------------------------------------------------------------------------------------
    def reader(self, schema: msgspec.Raw | None, field: str) -> RowReader:
        """The reader of the envelope field (before/after; "" for a schema that is the row itself)
        under ``schema`` (the value's schema)."""
        if parts.is_null(schema):
            return self.schemaless
        cache_key = (self._hints_key, field.encode() + b"\x00" + bytes(schema))  # type: ignore[arg-type]
        reader = _COMPILED.get(cache_key)
        if reader is None:
            reader = self._compile(schema, field)  # type: ignore[arg-type]
            if len(_COMPILED) >= MAX_SCHEMAS:
                _COMPILED.clear()
            _COMPILED[cache_key] = reader
        return reader

    def _compile(self, schema: msgspec.Raw, field: str) -> RowReader:
        """A schema that says nothing usable of the row (``{}``, no struct for the field) leaves the
        values schemaless: read by the declared columns, as without the wrapper."""
        try:
            parsed = FieldSchema.parse(_DECODE.decode(schema))
        except (msgspec.DecodeError, BadValue, TypeError, AttributeError, KeyError, RecursionError):
            return self.schemaless
        row = parsed.field(field) if field else parsed
        if row is None or row.type != "struct":
            return self.schemaless
        reader = compile_row(row, self.hints)
        reader.schema = row
        reader.schema_id = hashlib.blake2b(bytes(schema), digest_size=8).hexdigest()
        return reader

    def describe(self, reader: RowReader, key: bytes | None) -> str | None:
        """The MySQL table of a row schema, the first time this task sees it (with the key's schema
        for the primary key)."""
        if reader.schema is None or reader.schema_id in self._described:
            return None
        self._described.add(reader.schema_id)
        key_schema = None
        if key is not None:
            try:
                wrapped = parts.WRAPPER_DECODER.decode(key)
                if not parts.is_null(wrapped.schema):
                    key_schema = FieldSchema.parse(_DECODE.decode(wrapped.schema))
            except (msgspec.DecodeError, msgspec.ValidationError, BadValue, TypeError, AttributeError, KeyError):
                key_schema = None
        row = FieldSchema(reader.schema.type, reader.schema.name, reader.schema.parameters, reader.schema.optional,
                          tuple((n, f) for n, f in reader.schema.fields if not n.startswith("__")))
        described = mysql_columns(row, key_schema)
        for name, hint in self.hints.items():  # a declared BIGINT UNSIGNED gets its value back (long mode)
            if hint.base == "BIGINT" and "UNSIGNED" in hint.type and name in described["properties"]:
                described["properties"][name] = {"type": "unsigned_long"}
        return _ENCODE.encode(described).decode("utf-8")

    def key_image(self, key: bytes | None) -> dict[str, str | None] | None:
        """The key as a row image (unwrapped from {schema, payload}); None when it is not an object."""
        if key is None:
            return None
        try:
            wrapped = parts.WRAPPER_DECODER.decode(key)
            schema, payload = wrapped.schema, wrapped.payload
            if parts.is_null(payload) or parts.is_null(schema):  # a plain JSON key
                schema, payload = None, key
            row = _DECODE.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
            return None
        if not isinstance(row, dict):
            return None
        try:
            return self.reader(schema, "").read(row)[0]
        except (RecordError, BadValue):
            return {k: plain_text(v) for k, v in row.items()}

    def _image(self, raw: msgspec.Raw, reader: RowReader) -> tuple[dict[str, str | None], str | None]:
        try:
            row = _DECODE.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise RecordError("converter", f"value is not a JSON object (value.converter json): {exc}") from None
        if not isinstance(row, dict):
            raise RecordError("transform", f"the row image is not a JSON object: {bytes(raw)[:80]!r}")
        self._whole(row)
        texts, docs = self._read(reader, row)
        return texts, (_ENCODE.encode(docs).decode("utf-8") if self.need_json else None)

    def _read(self, reader: RowReader, row: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """A row's image and document values. Schemaless, a JSON number or boolean of a field no
        declared column reads stays one in the image (connectors/images.values_array), as the
        column-wise decode reads it: a chain, and a table made from the values
        (spark_jobs/transform/row_schemas.py), see one type whichever decode read the record."""
        try:
            texts, docs = reader.read(row, self.fields)
        except BadValue as exc:
            raise RecordError("converter", f"{exc}") from None
        if reader.schema is not None:
            return texts, docs
        return {n: docs[n] if n not in reader.converters and type(docs[n]) in _SCALARS else t
                for n, t in texts.items()}, docs

    def _whole(self, row: Mapping[str, Any]) -> None:
        """With ``nested`` (a chain that takes structs apart): a record read here, whose structs and
        arrays would become JSON texts, fails instead, naming why (the column-wise decode keeps them
        whole, connectors/debezium/columns.py, and reads every record it can)."""
        if self.nested and any(isinstance(v, dict | list) for v in row.values()):
            raise RecordError("converter", "the record has a struct or an array that could not be read whole (a "
                                           "Connect array or map field, a value with a line break, or more than 16 "
                                           "schemas in one batch), which Flatten, ExtractField and HoistField need")

    column_wise_min = COLUMN_WISE_MIN

    def decode_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Column-wise (connectors/debezium/columns.py); the records that decode does not read, one
        by one. A batch of fewer than ``column_wise_min`` records is decoded record by record: the
        column-wise decode costs ~2 ms per batch before its first record, which is what a table of
        a few changes in a many-table window pays per table (the record-by-record decode of three
        changes of a 33-column table takes ~0.3 ms). Both give the same values (tests/unit/connectors/debezium/test_columns.py)."""
        if batch.num_rows < max(self.column_wise_min, 1):
            return super().decode_batch(batch)
        return decode_columns(self, batch, super().decode_batch)

    def decode_record(self, offset: int, key: bytes | None, value: bytes | None, topic: str) -> list[Change]:
        change = self._decode(offset, key, value)
        if change.change_op == "delete" and change.source_table is None:
            change.source_db, change.source_table = parts.table_of_topic(topic)
        return [change]

    def _decode(self, offset: int, key: bytes | None, value: bytes | None) -> Change:
        if value is None:  # a tombstone deletes its key at the version of the change before it
            if key is None:
                raise RecordError("converter", "tombstone without a key: nothing to delete")
            image = self.key_image(key)
            if image is None:
                raise RecordError("converter", "tombstone key is not a JSON object: nothing to delete by (a "
                                               "tombstone deletes the row of its key's fields)")
            return Change("delete", image, None, offset if self.versioning == "kafka_offset" else None)
        if self.rows:
            return self._row(offset, key, value)
        fast = self._plain(offset, key, value)
        if fast is not None:
            return fast
        try:
            top = parts.TOP_DECODER.decode(value)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
            raise RecordError("converter", "value is not a JSON object (value.converter json)") from None
        schema = top.schema
        env: parts.Top | parts.Envelope = top
        row_raw: msgspec.Raw | bytes = value  # the whole value, for a row unwrapped by ExtractNewRecordState
        if not parts.is_null(top.payload):
            row_raw = top.payload
            try:
                env = parts.ENVELOPE_DECODER.decode(top.payload)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                raise RecordError("converter", "the {schema, payload} wrapper's payload is not a JSON object "
                                               "(value.converter json)") from None
        else:
            schema = None
        if env.op is None:
            return self._unwrapped(offset, key, row_raw, schema)
        op = env.op if isinstance(env.op, str) else plain_text(env.op)
        if op not in ("c", "r", "u", "d", "t"):
            raise RecordError("transform", f"unknown Debezium op '{op}' (expected c, r, u, d or t)")
        source = parts.Source()
        if not parts.is_null(env.source):
            try:
                source = parts.SOURCE_DECODER.decode(env.source)
            except (msgspec.DecodeError, msgspec.ValidationError):
                source = parts.Source()
        version = self._envelope_version(offset, source, env.ts_ms)
        origin = {"source_db": text(source.db), "source_table": text(source.table)}
        if op == "t":  # a TRUNCATE of source.table: the pipeline's truncate setting decides (connectors/changes.py)
            return Change(TRUNCATE, None, None, version, **origin)
        if op == "d":
            if not parts.is_null(env.before):
                reader = self.reader(schema, "before")
                image, doc = self._image(env.before, reader)
                return Change("delete", image, doc, version, **origin, **self._schema_of(reader, key), source_op="d")
            key_image = self.key_image(key)
            if key_image is None:
                raise RecordError("transform", "delete without a 'before' row image nor a JSON key")
            return Change("delete", key_image, _ENCODE.encode(key_image).decode("utf-8") if self.need_json else None,
                          version, **origin, source_op="d")
        if parts.is_null(env.after):
            raise RecordError("transform", f"op '{op}' without an 'after' row image")
        reader = self.reader(schema, "after")
        image, doc = self._image(env.after, reader)
        return Change("upsert", image, doc, version, **origin, **self._schema_of(reader, key), source_op=op)

    def _row(self, offset: int, key: bytes | None, value: bytes) -> Change:
        """A record of Kafka Connect's record model (a chain that does not start with
        ExtractNewRecordState): the value, or the payload of its {schema, payload} wrapper, is the row
        itself, an upsert of the record's key, versioned by its offset (cdcflow/config.py asks
        versioning kafka_offset of such a chain). Every field is the row's, ``__`` ones included."""
        if self.rows in ("string", "bytes"):  # not a struct: an image of one field, named "" (row_nested.WHOLE)
            whole = self._whole_value(value)
            return Change("upsert", {"": whole}, _ENCODE.encode(whole).decode("utf-8") if self.need_json
                          else None, self._version(offset, None, _ROW_UNVERSIONED))
        schema, row_raw = None, value
        if self.rows == "json_schema":
            try:
                top = parts.WRAPPER_DECODER.decode(value)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
                top = parts.Wrapper()
            if parts.is_null(top.schema) and parts.is_null(top.payload):
                raise RecordError("converter", "value is not a {schema, payload} JSON envelope "
                                               "(value.converter json_schema)")
            if parts.is_null(top.payload):  # the converter's null value: a tombstone
                return self._decode(offset, key, None)
            schema, row_raw = top.schema, top.payload
        try:
            row = _DECODE.decode(row_raw)
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            raise RecordError("converter", "value is not valid JSON (value.converter json)") from None
        if not isinstance(row, dict):
            raise RecordError("converter", f"value is JSON but not an object (value.converter {self.rows})")
        reader = self.reader(schema, "")
        self._whole(row)
        texts, docs = self._read(reader, row)
        doc = _ENCODE.encode(docs).decode("utf-8") if self.need_json else None
        version = self._version(offset, None, _ROW_UNVERSIONED)
        return Change("upsert", texts, doc, version, **self._schema_of(reader, key))

    def _whole_value(self, value: bytes) -> str:
        """The string converter's text; the bytes converter's bytes (Kafka Connect's ByteArrayConverter:
        the value as it is) as base64, the text every binary value of a row image is (a binary column
        gets the bytes back, a text column and a document the base64)."""
        if self.rows == "bytes":
            return base64.b64encode(value).decode("ascii")
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise RecordError("converter", "value is not valid UTF-8 (value.converter string)") from None

    def _plain(self, offset: int, key: bytes | None, value: bytes) -> Change | None:
        """An upsert or a delete with its row image, in an envelope without the wrapper, decoded in
        one pass; None for anything else (the general path below reads it, and says what is wrong)."""
        try:
            env = parts.PLAIN_DECODER.decode(value)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
            return None
        op = env.op
        if len(env.payload) or op not in ("c", "r", "u", "d"):
            return None
        row = env.before if op == "d" else env.after
        if row is None:
            return None
        source = env.source or parts.Source()
        version = self._envelope_version(offset, source, env.ts_ms)
        reader = self.schemaless
        texts, docs = self._read(reader, row)
        return Change("delete" if op == "d" else "upsert", texts,
                      _ENCODE.encode(docs).decode("utf-8") if self.need_json else None, version,
                      source_db=text(source.db), source_table=text(source.table), **self._schema_of(reader, key),
                      source_op=op)

    def _envelope_version(self, offset: int, source: parts.Source, ts_ms: Any) -> int:
        """An envelope's version: by source.ts_ms, else the envelope's own ts_ms."""
        source_ts = bigint(source.ts_ms)
        return self._version(offset, source_ts if source_ts is not None else bigint(ts_ms),
                             "no source.ts_ms nor ts_ms to version the change by (versioning: source_ts_ms)")

    def _version(self, offset: int, ts: int | None, missing: str) -> int:
        return version_of(self.versioning, offset, ts, missing)

    def _schema_of(self, reader: RowReader, key: bytes | None) -> dict[str, str | None]:
        return {"schema_id": reader.schema_id, "row_schema": self.describe(reader, key)}

    def _unwrapped(self, offset: int, key: bytes | None, row_raw: msgspec.Raw | bytes,
                   schema: msgspec.Raw | None) -> Change:
        """A row unwrapped by Debezium's ExtractNewRecordState (``add.fields`` gives ``__op``,
        ``__source_ts_ms``, ``__table``, ``__db``; ``delete.handling.mode=rewrite`` gives ``__deleted``):
        an upsert, or a delete when ``__deleted`` is true or ``__op`` is d. The added fields are not
        part of the row."""
        not_envelope = RecordError("transform", "not a Debezium change event: no 'op' field (expected an envelope "
                                                "with op, before, after, source)")
        try:
            probe = _DECODE.decode(row_raw)
        except (msgspec.DecodeError, RecursionError):
            raise not_envelope from None
        if not isinstance(probe, dict) or not any(m in probe for m in UNWRAPPED_MARKERS):
            raise not_envelope
        op = plain_text(probe.get("__op"))
        deleted = plain_text(probe.get("__deleted")) == "true" or op == "d"
        if op is not None and op not in ("c", "r", "u", "d"):
            raise RecordError("transform", f"unknown Debezium op '{op}' in __op (expected c, r, u or d)")
        version = self._version(offset, bigint(probe.get("__source_ts_ms")),
                                "no __source_ts_ms to version the change by (add source.ts_ms to the "
                                "ExtractNewRecordState's add.fields, or set versioning: kafka_offset)")
        reader = self.reader(schema, "")
        row = {k: v for k, v in probe.items() if not k.startswith("__")}
        texts, docs = self._read(reader, row)
        doc = _ENCODE.encode(docs).decode("utf-8") if self.need_json else None
        return Change("delete" if deleted else "upsert", texts, doc, version, source_db=text(probe.get("__db")),
                      source_table=text(probe.get("__table")), **self._schema_of(reader, key),
                      source_op="d" if deleted else op)


def hints_from_columns(columns: Iterable[tuple[str, str, str | None]]) -> dict[str, ColumnHint]:
    """(source field, MySQL type, encoding) of the declared sink columns -> hints by field (the
    first sink that declares a field decides)."""
    hints: dict[str, ColumnHint] = {}
    for field, sql_type, encoding in columns:
        hints.setdefault(field, ColumnHint(sql_type.upper(), encoding))
    return hints
