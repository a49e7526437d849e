"""Oracle GoldenGate for Big Data's JSON formatter, operation modelled or row modelled -> the window's
change rows (``source.format: goldengate``; the change model is connectors/changes.py).

Every message carries the operation's metadata ("Using the Pluggable Formatters", "Using the JSON
Formatter", "Operation Metadata Formatting Details", in the Administering/Using Oracle GoldenGate for
Big Data guides): ``table`` (the fully qualified name, SCHEMA.TABLE or CATALOG.SCHEMA.TABLE),
``op_type`` (I insert, U update, D delete, T truncate), ``op_ts`` (the operation's timestamp from the
source trail, ``yyyy-MM-dd HH:mm:ss.SSSSSS``, fixed for the operation), ``current_ts`` (when the
formatter ran), ``pos`` (the trail position: sequence number and RBA, 20 digits), ``primary_keys``
(with ``includePrimaryKeys``) and ``tokens``. The row data comes in one of the formatter's two models
(``gg.handler.name.format``):

* ``json``, operation modelled: the ``before`` and ``after`` images as objects; an insert has no
  before image, a delete no after image, a truncate neither;
* ``json_row``, row modelled: the column values at the top level, beside the metadata, one image
  only ("Row Formatters"): an insert's and an update's after image, a delete's before image, and no
  column for a truncate.

The model is read from each record, not configured: a record with a ``before`` or ``after`` object
is operation modelled, one with any other field than the metadata is row modelled (its columns),
and one with neither (a truncate) needs no image. A pipeline reads both without a setting, also
from one topic, and a handler switched from one to the other needs no change of config.

A primary-key update: the operation model has the old key in its before image, so an update whose
key columns (``primary_keys`` and the sinks' declared keys) differ between the images moves the row
(a delete of the old key, an upsert of the new). The row model carries no before image: under
``pkUpdateHandling=delete-insert`` the handler writes a delete (the before image) and an insert
(the after image), which are applied as they come; under ``pkUpdateHandling=update`` it writes an
update with the new key only, so the row under the old key stays (Oracle: use ``update`` only when
the key does not select rows in the target). ``abend`` (the default) stops the Replicat.

The table's schema is ``source_db`` and its name ``source_table`` (``{source.db}`` /
``{source.table}`` routing). Values come as JSON numbers and strings without their types: they are
read by the sink's declared columns (connectors/mysql/values.py: a DATETIME accepts the trail's
``YYYY-MM-DD:HH:MI:SS.FFFFFF`` too), and as written where none is declared; a chain reads them
typed (connectors/row_types.py): by a declared column's type, else as the JSON says (a JSON number a
number, a string a text, whatever the formatter's options made of the column). A column flagged
``<column>_isMissing: true`` (the formatter's missing-column flags) is not part of the image.

A table's JSON schema (JSON Schema draft-04: ``$schema``, ``title`` the qualified table name,
``definitions.row`` its columns), which the Kafka Handler publishes to its ``SchemaTopicName`` topic
(keyed by the table's name) at a table's first operation and again after a metadata change event
(a DDL in the trail), is read and changes nothing, as Canal's and Maxwell's DDL events are, when a
pipeline reads that topic too: the operations after a metadata change carry the new columns, and a
table follows them as its sink says (declared columns, docs/schema-changes.md). Anything else
without ``op_type`` is a bad record.

An operation-modelled update is applied as its before image overlaid with its after image, so an
Extract that writes full before images (GETUPDATEBEFORES with NOCOMPRESSUPDATES) gives whole rows;
with compressed updates and no before image, and in the row model, the columns left out of the
after image arrive as nulls. Versions (``source_ts_ms``) come from ``op_ts`` (read as UTC; only its
order matters), and within one millisecond from the log position, which follows ``pos``: the
handler writes in trail order.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from connectors.changes import (
    TRUNCATE,
    Change,
    RecordError,
    RowDecoder,
    json_object,
    operation_changes,
    version_of,
)
from connectors.debezium.logical import EPOCH
from connectors.mysql.values import parse_datetime

FORMAT = "GoldenGate JSON formatter"
OPERATIONS = {"I": "insert", "U": "update", "D": "delete"}
# the operation's metadata ("Operation Metadata Formatting Details"); in the row model every other field is a column
META = frozenset({"table", "op_type", "op_ts", "current_ts", "pos", "primary_keys", "tokens"})
IMAGES = ("before", "after")  # the operation model's images
MISSING = "_isMissing"
JSON_SCHEMA = "http://json-schema.org/"  # a table's schema message on the handler's schema topic


class GoldenGateDecoder(RowDecoder):
    def decode_record(self, offset: int, key: bytes | None, value: bytes | None, topic: str) -> list[Change]:
        msg = json_object(value, FORMAT)
        if "op_type" not in msg and str(msg.get("$schema", "")).startswith(JSON_SCHEMA):
            return [_schema_message(msg)]
        name, op_type = msg.get("table"), msg.get("op_type")
        parts = _qualified(name)
        if parts is None:
            raise RecordError("transform", f"field 'table': expected the qualified table name SCHEMA.TABLE, got "
                                           f"{name!r}")
        if op_type not in (*OPERATIONS, "T"):
            raise RecordError("transform", f"unknown GoldenGate op_type {op_type!r} (expected I, U, D or T)")
        op_ts = parse_datetime(msg.get("op_ts"))
        version = version_of(self.versioning, offset,
                             (op_ts - EPOCH) // timedelta(milliseconds=1) if op_ts is not None else None,
                             "no 'op_ts' (yyyy-MM-dd HH:mm:ss.SSSSSS) to version the change by (versioning: "
                             "source_ts_ms)")
        if op_type == "T":  # a TRUNCATE: the pipeline's truncate setting decides (connectors/changes.py)
            return [Change(TRUNCATE, version=version, source_db=parts[-2], source_table=parts[-1])]
        op = OPERATIONS[op_type]
        if _row_modelled(msg):  # one image: a delete's before values, an insert's or update's after values
            values = _present({k: v for k, v in msg.items() if k not in META})
            before, after = (values, None) if op == "delete" else (None, values)
        else:
            before, after = _image(msg, "before"), _image(msg, "after")
        if op != "insert" and before is None and (op == "delete" or after is None):
            raise RecordError("transform", f"op_type {op_type} without a 'before' image")
        if op != "delete" and after is None:
            raise RecordError("transform", f"op_type {op_type} without an 'after' image")
        if op == "update" and before is not None:
            after = {**before, **(after or {})}
        keys = msg.get("primary_keys")
        own = frozenset(k for k in keys if isinstance(k, str)) if isinstance(keys, list) else frozenset()
        return operation_changes(op, before, after, self.key_fields | own, self.read, self.need_json, version,
                                 self.typing(), source_db=parts[-2], source_table=parts[-1])


def _qualified(name: Any) -> list[str] | None:
    """SCHEMA.TABLE or CATALOG.SCHEMA.TABLE, split; None for anything else."""
    parts = name.split(".") if isinstance(name, str) else []
    return parts if len(parts) >= 2 and all(parts) else None


def _schema_message(msg: Mapping[str, Any]) -> Change:
    """A table's JSON schema (metadata, not a row): a change that changes nothing, of its table."""
    parts = _qualified(msg.get("title"))
    if parts is None:
        raise RecordError("transform", f"a JSON schema message whose 'title' is not the qualified table name "
                                       f"SCHEMA.TABLE: {msg.get('title')!r}")
    return Change(source_db=parts[-2], source_table=parts[-1])


def _row_modelled(msg: Mapping[str, Any]) -> bool:
    """Whether a message is row modelled (``format=json_row``): no ``before``/``after`` object, and a
    field besides the metadata (a column; a null ``before``/``after`` is the operation model's empty
    image). A message with neither, such as a truncate, is read as operation modelled."""
    if any(isinstance(msg.get(f), dict) for f in IMAGES):
        return False
    return any(k not in META and not (k in IMAGES and v is None) for k, v in msg.items())


def _image(msg: Mapping[str, Any], field: str) -> dict[str, Any] | None:
    """The ``before`` or ``after`` image of an operation-modelled message, without the columns flagged
    missing."""
    image = msg.get(field)
    if image is None:
        return None
    if not isinstance(image, dict):
        raise RecordError("transform", f"field '{field}': expected an object of column values, got "
                                       f"{str(image)[:80]!r}")
    return _present(image)


def _present(image: Mapping[str, Any]) -> dict[str, Any]:
    """An image without the columns flagged ``<column>_isMissing: true`` (and without the flags)."""
    return {k: v for k, v in image.items()
            if not (k.endswith(MISSING) and k[:-len(MISSING)] in image) and image.get(k + MISSING) is not True}
