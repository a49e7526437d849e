"""The change model every source format is decoded into, inside the read task.

One decoder per ``source.format`` (connectors/formats.py registers them: Debezium envelopes,
Oracle GoldenGate's JSON formatter, Canal's flat messages, Maxwell's JSON) turns each raw Kafka
record into one or more :class:`Change` rows. The columns are the same for every format
(``DECODED_FIELDS``): ``change_op`` (upsert, delete, truncate — a TRUNCATE of the source table,
applied, ignored or dead-lettered by the pipeline's ``truncate`` setting in spark_jobs/ —
or null for a record that changes nothing),
``image`` (the row image: typed values per field, connectors/images.py), ``image_json`` (the row as a JSON document for
Elasticsearch), ``version``, ``error_stage``/``error_message`` (a record that cannot be read goes to
the DLQ, whole), the source database and table (``{source.db}`` / ``{source.table}`` routing), the
row's schema where the format carries one, and ``row_index``.

A record can hold several changes (a Canal message of a multi-row statement; an update that changes
a row's key becomes a delete of the old key and an upsert of the new one): :meth:`RecordDecoder.decode_batch`
repeats the record's raw columns once per change, and ``row_index`` (0, 1, … within the record)
keeps their order where they share a version, so the last change per key stays the last one
(spark_jobs/project/tables.latest_rows). A record whose every change
is read fails as one: one error row, nothing of it applied.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

import msgspec
import pyarrow as pa

from connectors import images, row_types
from connectors.debezium.types import ColumnHint
from connectors.mysql.types import parse_type
from connectors.mysql.values import hinted_readers, read_row

VERSION_SHIFT = 1 << 20  # source_ts_ms versions: ts_ms * 2^20 + (offset mod 2^20), see docs/semantics.md

DECODED_FIELDS = [  # image: a union of the window's row shapes, typed (connectors/images.py); key_image: null
    ("change_op", pa.string()), ("image", None), ("image_json", pa.string()), ("version", pa.int64()),
    ("error_stage", pa.string()), ("error_message", pa.string()), ("route", pa.string()), ("key_image", pa.null()),
    ("source_db", pa.string()), ("source_table", pa.string()), ("schema_id", pa.string()), ("row_schema", pa.string()),
    ("row_index", pa.int32()), ("source_op", pa.string()),
]
DECODED_NAMES = [name for name, _t in DECODED_FIELDS]
# source_db/source_table: the change's source database and table (table name templates route by them);
# schema_id: the row's schema (null without one); row_schema: the MySQL table it describes, as JSON
# (connectors/debezium/schema_columns.mysql_columns), on the first record of each schema_id in a task (null on
# the others); row_index: the change's place within its record (0 for a record of one change); source_op: the
# source's operation where the format says it (Debezium's c, r, u, d; Maxwell's bootstrap-insert is r), else null.

JSON_DECODE = msgspec.json.Decoder(float_hook=Decimal)  # numbers keep their digits: 19.90 stays 19.90
JSON_ENCODE = msgspec.json.Encoder(decimal_format="number")


class RecordError(Exception):
    """A record that cannot be read: it goes to the DLQ, with ``stage`` (converter, transform) and why."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage, self.message = stage, message


TRUNCATE = "truncate"  # change_op of a TRUNCATE of the source table (source_db, source_table)


@dataclass
class Change:
    change_op: str | None = None
    image: dict[str, Any] | None = None  # texts; a schemaless JSON number or boolean as itself (images.values_array)
    image_json: str | None = None
    version: int | None = None
    error_stage: str | None = None
    error_message: str | None = None
    source_db: str | None = None
    source_table: str | None = None
    schema_id: str | None = None
    row_schema: str | None = None
    row_index: int = 0
    source_op: str | None = None
    types: Mapping[str, pa.DataType | None] | None = None  # the image's Arrow types, under a chain (row_types.py)


class ChangeDecoder(Protocol):
    """What the read task needs of a format's decoder."""

    def decode_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A raw batch (connectors/kafka/reader.RAW_SCHEMA) -> its columns, once per change, plus
        the change columns (``DECODED_FIELDS``)."""
        ...


class RecordDecoder(ABC):
    """A decoder that reads one record at a time into its changes."""

    @abstractmethod
    def decode_record(self, offset: int, key: bytes | None, value: bytes | None, topic: str) -> list[Change]:
        """The record's changes, at least one; raises RecordError for a record that cannot be read."""

    def decode_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        offsets = batch.column("offset").to_pylist()
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        topics = batch.column("topic").to_pylist()
        changes: list[Change] = []
        rows: list[int] = []  # the raw row of each change
        one_each = True
        for i, (offset, key, value, topic) in enumerate(zip(offsets, keys, values, topics, strict=True)):
            try:
                out = self.decode_record(offset, key, value, topic)
            except RecordError as exc:
                out = [Change(error_stage=exc.stage, error_message=exc.message)]
            out = out or [Change()]  # every record is read and counted, even one that changes nothing
            one_each = one_each and len(out) == 1
            for index, change in enumerate(out):
                change.row_index = index
                rows.append(i)
            changes.extend(out)
        raw = batch if one_each else batch.take(pa.array(rows, pa.int32()))
        return pa.RecordBatch.from_arrays([*raw.columns, *change_arrays(changes, raw.column("topic"))],
                                          names=[*batch.schema.names, *DECODED_NAMES])


class RowDecoder(RecordDecoder):
    """A format of row operations (GoldenGate, Canal, Maxwell): built with the pipeline's
    ``versioning``, the sinks' declared columns (``hints``: how to read values that come without
    types), whether documents are needed, and the sinks' declared key fields (an update that changes
    them moves the row: :func:`row_changes`). Values are read by the declared columns unless the
    format carries its own types. ``typed`` (set where a chain applies: spark_jobs/read/decode.py):
    each change also says its fields' Arrow types (:meth:`types_of`, connectors/row_types.py)."""

    typed = False

    def __init__(self, versioning: str, hints: Mapping[str, ColumnHint] | None = None, need_json: bool = True,
                 key_fields: frozenset[str] = frozenset()) -> None:
        self.versioning = versioning
        self.need_json = need_json
        self.key_fields = key_fields
        self.readers = hinted_readers(hints or {}, binary="base64")
        self.hint_types = {f: row_types.of_column(parse_type(h.type)) for f, h in (hints or {}).items()}

    def read(self, row: Mapping[str, Any]) -> tuple[dict[str, str | None], dict[str, Any]]:
        return read_row(self.readers, row)

    def types_of(self, row: Mapping[str, Any]) -> dict[str, pa.DataType | None]:
        """A row's fields' types: a declared column's, else its JSON value's (Maxwell, GoldenGate)."""
        hinted = self.hint_types
        return {k: hinted[k] if k in hinted else row_types.of_json(v) for k, v in row.items()}

    def typing(self) -> RowTypes | None:
        return self.types_of if self.typed else None


def change_arrays(changes: list[Change], routes: pa.Array) -> list[pa.Array]:
    """The change columns of ``DECODED_FIELDS``, in order (``route``: the record's topic)."""
    return [
        pa.array([c.change_op for c in changes], pa.string()),
        images.from_texts([c.image for c in changes],
                          [c.types for c in changes] if any(c.types is not None for c in changes) else None),
        pa.array([c.image_json for c in changes], pa.string()),
        pa.array([c.version for c in changes], pa.int64()),
        pa.array([c.error_stage for c in changes], pa.string()),
        pa.array([c.error_message for c in changes], pa.string()),
        routes,
        pa.nulls(len(changes)),
        pa.array([c.source_db for c in changes], pa.string()),
        pa.array([c.source_table for c in changes], pa.string()),
        pa.array([c.schema_id for c in changes], pa.string()),
        pa.array([c.row_schema for c in changes], pa.string()),
        pa.array([c.row_index for c in changes], pa.int32()),
        pa.array([c.source_op for c in changes], pa.string()),
    ]


def bigint(value: Any) -> int | None:
    """Spark's try_cast to bigint: an integer or integer text, else null."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -(1 << 63) <= value < (1 << 63) else None
    if isinstance(value, str):
        try:
            return bigint(int(value.strip()))
        except ValueError:
            return None
    return None


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def version_of(versioning: str, offset: int, ts_ms: int | None, missing: str) -> int:
    """The change's version: its Kafka offset (``kafka_offset``), or its source time in ms with the
    offset's low bits (``source_ts_ms``: changes within one millisecond keep their log order).
    ``missing`` says which field was needed when the record has no time."""
    if versioning == "kafka_offset":
        return offset
    if ts_ms is None:
        raise RecordError("transform", missing)
    version = ts_ms * VERSION_SHIFT + offset % VERSION_SHIFT
    if not -(1 << 63) <= version < 1 << 63:
        raise RecordError("transform", f"the change's time, {ts_ms} ms since 1970, is out of a version's range "
                                       "(is it in the unit the format documents?)")
    return version


def json_object(value: bytes | None, what: str) -> dict[str, Any]:
    """A record value that must be one JSON object (``what`` names the format for the reason)."""
    if value is None:
        raise RecordError("converter", f"null value (a tombstone): a {what} message has a value")
    try:
        doc = JSON_DECODE.decode(value)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        raise RecordError("converter", f"value is not a JSON object (value.converter json): expected a {what} "
                                       "message") from None
    if not isinstance(doc, dict):
        raise RecordError("converter", f"value is JSON but not an object: expected a {what} message")
    return doc


def image_change(op: str, texts: dict[str, str | None], docs: dict[str, Any] | None, version: int,
                 **origin: str | None) -> Change:
    """A change of one row image (``docs``: its document values, None when no sink needs them)."""
    return Change(op, texts, JSON_ENCODE.encode(docs).decode("utf-8") if docs is not None else None, version,
                  **origin)  # type: ignore[arg-type]


def row_changes(op: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
                key_fields: frozenset[str]) -> list[tuple[str, Mapping[str, Any]]]:
    """The changes of one row operation, as (upsert|delete, row image). An update whose key fields
    (the format's own key names and the sinks' declared keys) differ between the before and the
    after image moves the row: a delete of the old key, then an upsert of the new one (Debezium's
    connectors emit the same pair); any other update is an upsert of the after image."""
    if op == "delete":
        assert before is not None
        return [("delete", before)]
    assert after is not None
    if op == "update" and before is not None and any(
            k in before and k in after and before[k] != after[k] for k in key_fields):
        return [("delete", before), ("upsert", after)]
    return [("upsert", after)]


RowRead = Callable[[Mapping[str, Any]], tuple[dict[str, str | None], dict[str, Any]]]
RowTypes = Callable[[Mapping[str, Any]], Mapping[str, pa.DataType | None]]


def operation_changes(op: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
                      key_fields: frozenset[str], read: RowRead, need_json: bool, version: int,
                      typing: RowTypes | None = None, **origin: str | None) -> list[Change]:
    """The changes of one row operation (insert, update or delete: :func:`row_changes`), each image
    read by ``read`` (a value it cannot read raises ValueError, which names the field: the record
    goes to the DLQ) and typed by ``typing`` where a chain reads it (None: texts)."""
    out = []
    for change_op, row in row_changes(op, before, after, key_fields):
        try:
            texts, docs = read(row)
        except ValueError as exc:
            raise RecordError("converter", str(exc)) from None
        out.append(image_change(change_op, texts, docs if need_json else None, version, **origin))
        if typing is not None:
            out[-1].types = typing(row)
    return out
