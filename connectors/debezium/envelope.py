"""Debezium change events -> the window's change rows, inside the read task.

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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import msgspec
import pyarrow as pa

from connectors.debezium.types import BadValue, ColumnHint, FieldSchema, RowReader, compile_row, plain_text

VERSION_SHIFT = 1 << 20  # source_ts_ms versions: ts_ms * 2^20 + (offset mod 2^20), see docs/semantics.md
MAX_SCHEMAS = 256  # compiled row readers kept per task (a window has few distinct schemas)

_STRING_MAP = pa.map_(pa.string(), pa.string())
DECODED_FIELDS = [
    ("change_op", pa.string()), ("image", _STRING_MAP), ("image_json", pa.string()), ("version", pa.int64()),
    ("error_stage", pa.string()), ("error_message", pa.string()), ("route", pa.string()), ("key_image", _STRING_MAP),
]
DECODED_SPARK_COLUMNS = ("change_op string, image map<string,string>, image_json string, version bigint, "
                         "error_stage string, error_message string, route string, key_image map<string,string>")

_DECODE = msgspec.json.Decoder(float_hook=Decimal)
_ENCODE = msgspec.json.Encoder(decimal_format="number")


class _Top(msgspec.Struct):
    """The top level of a value: the wrapper's two fields, or the envelope itself (raw parts)."""

    schema: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    payload: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    op: Any = None
    before: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    after: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    source: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    ts_ms: Any = None


class _Envelope(msgspec.Struct):
    op: Any = None
    before: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    after: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    source: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    ts_ms: Any = None


class _Wrapped(msgspec.Struct):
    schema: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    payload: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class _Source(msgspec.Struct):
    ts_ms: Any = None


_TOP = msgspec.json.Decoder(_Top)
_ENVELOPE = msgspec.json.Decoder(_Envelope)
_SOURCE = msgspec.json.Decoder(_Source)
_WRAPPED = msgspec.json.Decoder(_Wrapped)
_RAW_NULL = b"null"


class RecordError(Exception):
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage, self.message = stage, message


@dataclass
class Change:
    change_op: str | None = None
    image: dict[str, str | None] | None = None
    image_json: str | None = None
    version: int | None = None
    error_stage: str | None = None
    error_message: str | None = None


def _bigint(value: Any) -> int | None:
    """Spark's try_cast to bigint: an integer or integer text, else null."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -(1 << 63) <= value < (1 << 63) else None
    if isinstance(value, str):
        try:
            return _bigint(int(value.strip()))
        except ValueError:
            return None
    return None


def _is_null(raw: msgspec.Raw | None) -> bool:
    """An absent part (empty Raw) or a JSON null."""
    return raw is None or len(raw) == 0 or bytes(raw).strip() == _RAW_NULL


class Decoder:
    """Decodes a task's records; keeps the compiled readers of the schemas it has seen."""

    def __init__(self, versioning: str, hints: Mapping[str, ColumnHint] | None = None, need_json: bool = True) -> None:
        self.versioning = versioning
        self.hints = dict(hints or {})
        self.need_json = need_json
        self._readers: dict[bytes, RowReader] = {}
        self._schemaless = compile_row(None, self.hints)

    # -- schemas --------------------------------------------------------------------------------------
    def _reader(self, schema: msgspec.Raw | None, field: str) -> RowReader:
        """The reader of the envelope field (before/after) under ``schema`` (the value's schema)."""
        if _is_null(schema):
            return self._schemaless
        cache_key = field.encode() + b"\x00" + bytes(schema)  # type: ignore[arg-type]
        reader = self._readers.get(cache_key)
        if reader is None:
            reader = self._compile(schema, field)  # type: ignore[arg-type]
            if len(self._readers) >= MAX_SCHEMAS:
                self._readers.clear()
            self._readers[cache_key] = reader
        return reader

    def _compile(self, schema: msgspec.Raw, field: str) -> RowReader:
        """A schema that says nothing usable of the row (``{}``, no struct for the field) leaves the
        values schemaless: read by the declared columns, as without the wrapper."""
        try:
            parsed = FieldSchema.parse(_DECODE.decode(schema))
        except (msgspec.DecodeError, BadValue, TypeError, AttributeError, KeyError, RecursionError):
            return self._schemaless
        row = parsed.field(field) if field else parsed
        return compile_row(row, self.hints) if row is not None and row.type == "struct" else self._schemaless

    def _key(self, key: bytes | None) -> dict[str, str | None] | None:
        """The key as a row image (unwrapped from {schema, payload}); None when it is not an object."""
        if key is None:
            return None
        try:
            wrapped = _WRAPPED.decode(key)
            schema, payload = wrapped.schema, wrapped.payload
            if _is_null(payload) or _is_null(schema):  # a plain JSON key
                schema, payload = None, key
            row = _DECODE.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
            return None
        if not isinstance(row, dict):
            return None
        try:
            return self._reader(schema, "").read(row)[0]
        except (RecordError, BadValue):
            return {k: plain_text(v) for k, v in row.items()}

    def _image(self, raw: msgspec.Raw, reader: RowReader) -> tuple[dict[str, str | None], str | None]:
        try:
            row = _DECODE.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise RecordError("converter", f"value is not a JSON object (value.converter json): {exc}") from None
        if not isinstance(row, dict):
            raise RecordError("transform", f"the row image is not a JSON object: {bytes(raw)[:80]!r}")
        try:
            texts, docs = reader.read(row)
        except BadValue as exc:
            raise RecordError("converter", f"{exc}") from None
        return texts, (_ENCODE.encode(docs).decode("utf-8") if self.need_json else None)

    def decode(self, offset: int, key: bytes | None, value: bytes | None) -> Change:
        try:
            return self._decode(offset, key, value)
        except RecordError as exc:
            return Change(error_stage=exc.stage, error_message=exc.message)

    def _decode(self, offset: int, key: bytes | None, value: bytes | None) -> Change:
        if value is None:  # a tombstone deletes its key at the version of the change before it
            if key is None:
                raise RecordError("converter", "tombstone without a key: nothing to delete")
            image = self._key(key)
            if image is None:
                raise RecordError("converter", "tombstone key is not a JSON object (key.converter json)")
            return Change("delete", image, None, offset if self.versioning == "kafka_offset" else None)
        try:
            top = _TOP.decode(value)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
            raise RecordError("converter", "value is not a JSON object (value.converter json)") from None
        schema = top.schema
        env: _Top | _Envelope = top
        if not _is_null(top.payload):
            try:
                env = _ENVELOPE.decode(top.payload)  # type: ignore[arg-type]
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                raise RecordError("converter", "the {schema, payload} wrapper's payload is not a JSON object "
                                               "(value.converter json)") from None
        else:
            schema = None
        op = env.op
        if op is None:
            raise RecordError("transform", "not a Debezium change event: no 'op' field (expected an envelope "
                                           "with op, before, after, source)")
        op = op if isinstance(op, str) else plain_text(op)
        if op not in ("c", "r", "u", "d"):
            raise RecordError("transform", f"unknown Debezium op '{op}' (expected c, r, u or d)")
        source_ts = None
        if not _is_null(env.source):
            try:
                source_ts = _bigint(_SOURCE.decode(env.source).ts_ms)  # type: ignore[arg-type]
            except (msgspec.DecodeError, msgspec.ValidationError):
                source_ts = None
        ts = source_ts if source_ts is not None else _bigint(env.ts_ms)
        if self.versioning == "kafka_offset":
            version = offset
        elif ts is None:
            raise RecordError("transform", "no source.ts_ms nor ts_ms to version the change by "
                                           "(versioning: source_ts_ms)")
        else:
            version = ts * VERSION_SHIFT + offset % VERSION_SHIFT
        if op == "d":
            if not _is_null(env.before):
                image, doc = self._image(env.before, self._reader(schema, "before"))  # type: ignore[arg-type]
                return Change("delete", image, doc, version)
            key_image = self._key(key)
            if key_image is None:
                raise RecordError("transform", "delete without a 'before' row image nor a JSON key")
            return Change("delete", key_image, _ENCODE.encode(key_image).decode("utf-8") if self.need_json else None,
                          version)
        if _is_null(env.after):
            raise RecordError("transform", f"op '{op}' without an 'after' row image")
        image, doc = self._image(env.after, self._reader(schema, "after"))  # type: ignore[arg-type]
        return Change("upsert", image, doc, version)

    # -- a batch --------------------------------------------------------------------------------------
    def decode_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A raw batch (connectors/kafka/reader.RAW_SCHEMA) -> the same columns plus the change columns."""
        offsets = batch.column("offset").to_pylist()
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        changes = [self.decode(o, k, v) for o, k, v in zip(offsets, keys, values, strict=True)]
        return pa.RecordBatch.from_arrays(
            [*batch.columns, *_change_arrays(changes, batch.column("topic"))],
            schema=pa.schema([*batch.schema, *[pa.field(n, t) for n, t in DECODED_FIELDS]]))


def _change_arrays(changes: list[Change], topics: pa.Array) -> list[pa.Array]:
    return [
        pa.array([c.change_op for c in changes], pa.string()),
        pa.array([list(c.image.items()) if c.image is not None else None for c in changes], _STRING_MAP),
        pa.array([c.image_json for c in changes], pa.string()),
        pa.array([c.version for c in changes], pa.int64()),
        pa.array([c.error_stage for c in changes], pa.string()),
        pa.array([c.error_message for c in changes], pa.string()),
        topics,
        pa.nulls(len(changes), _STRING_MAP),
    ]


def hints_from_columns(columns: Iterable[tuple[str, str, str | None]]) -> dict[str, ColumnHint]:
    """(source field, MySQL type, encoding) of the declared sink columns -> hints by field (the
    first sink that declares a field decides)."""
    hints: dict[str, ColumnHint] = {}
    for field, sql_type, encoding in columns:
        hints.setdefault(field, ColumnHint(sql_type.upper(), encoding))
    return hints
