"""SMT chains on the per-partition path: the transforms as Arrow over the decoded changes (issue 25).

The older path infers each topic's schema in the JVM and applies a chain as Spark expressions
(spark_jobs/transforms.py): 150 of an SMT window's 160 CPU-seconds went to that JSON inference and
parse. Here the read task decodes the Debezium envelopes into typed row images (connectors/images.py),
as the default path does, and the chain rewrites those images in the worker, before the projection.

:func:`unserved` says why a pipeline's chain cannot run here (None: it can); spark_jobs/prepare.py
sends the others to the older path. Served: a Debezium chain that starts with ExtractNewRecordState
(``delete_handling`` drop or none; ``add_fields`` table, db, and source.ts_ms with source_ts_ms
versioning), followed by Cast, ReplaceField, TimestampConverter, MaskField, InsertField, RegexRouter,
Filter and TombstoneHandler on the value, with the predicates TopicNameMatches, RecordIsTombstone and
HasHeaderKey (regexes RE2 reads as Java does; Java patterns of yyyy MM dd HH mm ss SSS), into MySQL
tables of declared columns, or created from the record schema (the json_schema converter: the row
schema rewritten as the images are, :func:`described`). The transforms act as those of the older path do (tests/integration/
spark_jobs/test_row_transforms.py runs both on the same records and compares the rows read back),
with these differences, which docs/transforms.md lists:

* a delete's row image (its ``before`` image, or a tombstone's key) goes through the chain too, so a
  renamed key field still finds its row (the older path deletes by the Kafka key's field names); a
  value a step cannot convert never fails a delete;
* a value cast to ``string`` gets the value's MySQL text (a double 1e10 is ``1e+10``, Spark's
  ``1.0E10``); a Cast of a date or time to a number is a dead letter naming TimestampConverter;
* TimestampConverter reads a text by ``format``, else as an ISO date or time, else a whole number's
  text as that number (the texts of the per-record decode; Spark's try_cast refuses the last two);
* a field the records lack is left alone (the older path: a config error when no record of the
  window has it);
* a record a transform drops (Filter, a dropped delete or tombstone) is read and counted but changes
  nothing, as a Maxwell bootstrap-start does: the window's ends stay those of what was read;
* what the Debezium decode reads its own way stays so: a TRUNCATE (op t) follows ``truncate``, a
  row unwrapped upstream (``__deleted``, ``__op``) is read as such.

The chain sees typed images (spark_jobs/decode.py decodes every batch column-wise when there is a
chain): a record the column-wise decode cannot read is decoded alone with a few neighbours, whose
fields are then texts, as the older path's schema inference makes a field of mixed JSON types.

A record a transform cannot process gets stage ``transform`` and goes to the DLQ with the transform's
message; later transforms leave it as it is.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.changes import VERSION_SHIFT
from connectors.debezium.schema_columns import mysql_type
from connectors.debezium.types import FieldSchema
from connectors.errors import ConfigError
from connectors.mysql.config import MySqlSinkConfig
from spark_jobs import transform_config as cfgs

log = logging.getLogger(__name__)

CAST_TYPES = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
              "float32": pa.float32(), "float64": pa.float64(), "boolean": pa.bool_(), "string": pa.string()}
_INTEGER = r"^[+-]?\d+$"
_FLOAT = r"^[+-]?(NaN|Infinity|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[dDfF]?)$"  # Java's Double.parseDouble
_TRUE, _FALSE = ["t", "true", "y", "yes", "1"], ["f", "false", "n", "no", "0"]  # Spark's casts of text to boolean
_ISO = r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?$"
_ZONED = r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$"  # ZonedTimestamp's
_JAVA_TOKENS = {"yyyy": "Y", "MM": "m", "dd": "d", "HH": "H", "mm": "M", "ss": "S", "SSS": "L"}
_PATTERN = re.compile(r"([A-Za-z])\1*|[-:/ ._,]")  # a run of one letter, or a separator
_ADDED = {"table": "source_table", "db": "source_db"}


# -- which chains this path serves ------------------------------------------------------------------
def unserved(job: Any) -> str | None:
    """Why the per-partition path cannot run this pipeline's transforms (None: it can)."""
    chain = list(job.transforms)
    if job.source_format != "debezium" or (job.key_converter, job.value_converter) not in (
            ("json", "json"), ("json", "json_schema"), ("json_schema", "json_schema"), ("json_schema", "json")):
        return "the chain is applied to Debezium records read with the json converters only"
    if not chain or chain[0].type != "ExtractNewRecordState":
        return "the chain does not start with ExtractNewRecordState"
    sinks = [t.config for t in job.sinks]
    for sink in sinks:  # prepare.is_static or prepare.is_dynamic, MySQL
        if not isinstance(sink, MySqlSinkConfig) or sink.pk_mode == "kafka":
            return "a sink is not a MySQL table (Elasticsearch, or pk_mode kafka)"
        if sink.name == job.offsets_sink and (not sink.columns or "{" in sink.table):
            return "the exactly-once sink has no declared columns"
    if any(not s.columns for s in sinks) and job.value_converter != "json_schema":
        # tables from the record schema need the Connect schemas (the older path infers them from JSON)
        return "tables from the record schema need value_converter json_schema"
    for i, cfg in enumerate(chain):
        reason = _unserved_step(cfg, first=i == 0, versioning=job.versioning)
        if reason is not None:
            return f"transforms.{i} ({cfg.type}): {reason}"
    return None


def _unserved_step(cfg: Any, first: bool, versioning: str) -> str | None:
    kind = cfg.type
    if kind == "ExtractNewRecordState":
        if not first:
            return "only as the first transform"
        if cfg.delete_handling == "rewrite":  # a delete without a before image stays a delete: the envelope decides
            return "delete_handling rewrite"
        added = ("table", "db", "source.ts_ms") if versioning == "source_ts_ms" else ("table", "db")
        extra = [f for f in cfg.add_fields if f not in added]
        return f"add_fields {extra} (this path adds {', '.join(added)})" if extra else None
    if kind not in STEPS:
        return "not among the transforms of this path"
    if getattr(cfg, "target", "value") != "value":
        return "only the value is transformed on this path"
    predicate = getattr(cfg, "predicate", None)
    if isinstance(predicate, cfgs.SqlCondition):
        return "a Sql predicate needs Spark"
    if isinstance(predicate, cfgs.TopicNameMatches) and not _re2(predicate.pattern):
        return f"the pattern {predicate.pattern!r} is not an RE2 expression"
    if isinstance(cfg, cfgs.RegexRouter) and not _re2(cfg.regex):
        return f"the regex {cfg.regex!r} is not an RE2 expression"
    if isinstance(cfg, cfgs.RegexRouter) and _rewrite(cfg.replacement, re.compile(cfg.regex).groups) is None:
        return f"the replacement {cfg.replacement!r} (groups $1-$9 and \\$ only)"
    if isinstance(cfg, cfgs.TimestampConverter) and cfg.format is not None and _strftime(cfg.format) is None:
        return f"the format {cfg.format!r} uses more than yyyy MM dd HH mm ss SSS"
    return None


def _re2(pattern: str) -> bool:
    """RE2 compiles it, and it has none of Java's class arithmetic (``[a-z&&[^c]]``), which RE2 reads
    otherwise."""
    if "&&" in pattern:
        return False
    try:
        pc.match_substring_regex(pa.array([""]), f"^(?:{pattern})$")
    except pa.ArrowInvalid:
        return False
    return True


def names_before(chain: Any, name: str) -> str | None:
    """The field of the record a field after the chain comes from (renames undone), or None where a
    transform makes it (InsertField) or changes its type (Cast, TimestampConverter): the decode's
    type hints and key fields are named after the chain."""
    for cfg in reversed(list(chain)):
        if isinstance(cfg, cfgs.ReplaceField):
            back = {new: old for old, new in cfg.renames.items()}
            if name in back:
                name = back[name]
            elif name in cfg.renames:  # renamed away: the field of this name after the step is another's
                return None
        elif name in _made_or_retyped(cfg):
            return None
    return name


def _made_or_retyped(cfg: Any) -> tuple[str | None, ...]:
    if isinstance(cfg, cfgs.InsertField):
        return cfg.topic_field, cfg.partition_field, cfg.offset_field, cfg.timestamp_field, cfg.static_field
    if isinstance(cfg, cfgs.Cast):
        return tuple(cfg.spec)
    return (cfg.field,) if isinstance(cfg, cfgs.TimestampConverter) else ()


# -- the row schema (the MySQL table created from the records: connectors/debezium/schema_columns.py) --
TIME_COLUMNS = {"unix": "BIGINT", "Timestamp": "DATETIME(6)", "Date": "DATE", "Time": "LONGTEXT", "string": "LONGTEXT"}


def described(chain: Any, text: str) -> str:
    """A row schema's table (``{"columns", "key", "properties"}``) after the chain: fields renamed,
    left out, cast and added as the images are. A field whose type a step changes loses its
    Elasticsearch property (dynamic mapping)."""
    table = json.loads(text)
    columns = {c["name"]: c for c in table["columns"]}
    key, properties = list(table["key"]), dict(table.get("properties", {}))

    def typed(name: str, kind: str) -> None:
        columns[name] = {"name": name, "type": kind, "nullable": columns.get(name, {}).get("nullable", True)}
        properties.pop(name, None)

    for cfg in chain:
        if isinstance(cfg, cfgs.ExtractNewRecordState):
            for field in cfg.add_fields:
                typed("__" + field.replace(".", "_"), "BIGINT" if field == "source.ts_ms" else "LONGTEXT")
        elif isinstance(cfg, cfgs.ReplaceField):
            kept = [n for n in columns if (not cfg.include or n in cfg.include) and n not in cfg.exclude]
            columns = {cfg.renames.get(n, n): {**columns[n], "name": cfg.renames.get(n, n)} for n in kept}
            key = [cfg.renames.get(n, n) for n in key if n in kept]
            properties = {cfg.renames.get(n, n): p for n, p in properties.items() if n in kept}
        elif isinstance(cfg, cfgs.Cast):
            for field, kind in cfg.spec.items():
                if field in columns:
                    typed(field, mysql_type(FieldSchema(kind), field in key))  # as a record of that type
        elif isinstance(cfg, cfgs.TimestampConverter) and cfg.field in columns:
            typed(cfg.field, TIME_COLUMNS[cfg.target_type])
        elif isinstance(cfg, cfgs.InsertField):
            for field, kind in ((cfg.topic_field, "LONGTEXT"), (cfg.partition_field, "INT"),
                                (cfg.offset_field, "BIGINT"), (cfg.timestamp_field, "DATETIME(6)")):
                if field:
                    typed(field, kind)
            if cfg.static_field:
                value = cfg.static_value
                typed(cfg.static_field, "TINYINT(1)" if isinstance(value, bool) else "BIGINT" if isinstance(
                    value, int) else "DOUBLE" if isinstance(value, float) else "LONGTEXT")
    return json.dumps({**table, "columns": list(columns.values()), "key": key, "properties": properties})


# -- the changes, child by child -----------------------------------------------------------------------
@dataclass
class Rows:
    """The decoded changes a step rewrites; ``live`` marks the changes a step may touch: read, with a
    row image, not failed, not dropped."""

    table: pa.Table

    def column(self, name: str) -> Any:
        return self.table.column(name).combine_chunks()

    def set(self, name: str, values: Any) -> None:
        i = self.table.schema.get_field_index(name)
        self.table = self.table.set_column(i, name, values)

    @property
    def live(self) -> pa.Array:
        op = pc.fill_null(self.column("change_op"), "")
        return pc.and_(pc.is_null(self.column("error_stage")), pc.and_(pc.not_equal(op, ""), pc.not_equal(op, "truncate")))

    def fail(self, where: pa.Array, message: Any) -> None:
        """Mark the live changes where ``where`` holds (stage transform, ``message``)."""
        hit = pc.fill_null(pc.and_(self.live, where), False)
        if not pc.any(hit).as_py():
            return
        self.set("error_message", pc.if_else(hit, message, self.column("error_message")))
        self.set("error_stage", pc.if_else(hit, "transform", self.column("error_stage")))

    def drop(self, where: pa.Array) -> None:
        """The live changes where ``where`` holds change nothing (read and counted, like a Maxwell
        bootstrap-start: the window's ends stay those of what was read)."""
        hit = pc.fill_null(pc.and_(self.live, where), False)
        if pc.any(hit).as_py():
            self.set("change_op", pc.if_else(hit, "", self.column("change_op")))

    def tombstone(self) -> pa.Array:
        """The changes whose value is null after ExtractNewRecordState: the deletes (a Kafka tombstone,
        or a delete event unwrapped with delete_handling none, as on the older path)."""
        return pc.or_(pc.is_null(self.column("value")), pc.equal(pc.fill_null(self.column("change_op"), ""), "delete"))

    def map_images(self, step: Callable[[pa.StructArray, np.ndarray], tuple[pa.StructArray, pa.Array | None]],
                   ) -> None:
        """``step(child, rows)`` per child of the image union (``rows``: the changes it holds, in order)
        gives the child rewritten and, per row of it, an error text (null: none) for the live ones."""
        image = images.compact(self.column("image"))
        if not pa.types.is_union(image.type) or not len(image):
            return
        codes = np.frombuffer(image.buffers()[1], np.int8)[image.offset:image.offset + len(image)]
        children, errors, order = [], [], []
        for code in range(image.type.num_fields):
            rows = np.flatnonzero(codes == code)
            child, error = step(image.field(code), rows)
            children.append(child)
            errors.append(error if error is not None else pa.nulls(len(rows), pa.string()))
            order.append(rows)
        offsets = np.zeros(len(image), np.int32)
        for rows in order:
            offsets[rows] = np.arange(len(rows), dtype=np.int32)
        self.set("image", images.union(codes, offsets, children))
        message = pa.concat_arrays(errors).take(pa.array(np.argsort(np.concatenate(order), kind="stable")))
        # a delete's image goes through the chain (its key fields renamed, cast) but never fails it: the
        # older path deletes by key whatever the row held
        self.fail(pc.and_(pc.is_valid(message), pc.equal(pc.fill_null(self.column("change_op"), ""), "upsert")),
                  message)


def _fields(child: pa.StructArray) -> dict[str, pa.Array]:
    return dict(zip(child.type.names, [child.field(i) for i in range(child.type.num_fields)], strict=True))


def _struct(fields: dict[str, pa.Array], like: pa.StructArray) -> pa.StructArray:
    mask = like.is_null() if like.null_count else None
    if not fields:
        return pa.array([None if mask is not None and mask[i].as_py() else {} for i in range(len(like))],
                        pa.struct([]))
    return pa.StructArray.from_arrays(list(fields.values()), names=list(fields), mask=mask)


def _joined(*errors: pa.Array | None) -> pa.Array | None:
    found = [e for e in errors if e is not None]
    if not found:
        return None
    message = found[0]
    for error in found[1:]:
        message = pc.coalesce(message, error)  # the first failing field names the record's error
    return message


# -- the steps -------------------------------------------------------------------------------------
def extract_new_record_state(rows: Rows, cfg: cfgs.ExtractNewRecordState, versioning: str) -> None:
    """The decode already unwrapped the envelope (connectors/debezium/envelope.py): a delete event
    is a delete of its ``before`` image, a tombstone a delete of its key. Here its options."""
    tombstone, op = pc.is_null(rows.column("value")), pc.fill_null(rows.column("change_op"), "")
    delete_event = pc.and_(pc.equal(op, "delete"), pc.invert(tombstone))
    if cfg.drop_tombstones:
        rows.drop(tombstone)
    if cfg.delete_handling == "drop":
        rows.drop(delete_event)
    added: dict[str, pa.Array] = {}
    for name in cfg.add_fields:
        if name == "source.ts_ms":
            version = rows.column("version")
            added["__source_ts_ms"] = (pc.shift_right(version, int(np.log2(VERSION_SHIFT)))
                                       if versioning == "source_ts_ms" else pa.nulls(len(version), pa.int64()))
        else:
            added["__" + name] = rows.column(_ADDED[name])
    if added:
        _insert(rows, added, pc.invert(tombstone))


def _insert(rows: Rows, added: dict[str, pa.Array], where: pa.Array) -> None:
    """Set fields (per change, aligned with the rows) on the images of the changes where ``where``."""
    where = pc.fill_null(where, False)

    def step(child: pa.StructArray, at: np.ndarray) -> tuple[pa.StructArray, None]:
        fields = _fields(child)
        index = pa.array(at)
        for name, values in added.items():
            new = values.take(index)
            old = fields.get(name)
            fields[name] = pc.if_else(where.take(index), new, old if old is not None and old.type == new.type
                                      else pa.nulls(len(new), new.type))
        return _struct(fields, child), None
    rows.map_images(step)


def cast(rows: Rows, cfg: cfgs.Cast) -> None:
    def step(child: pa.StructArray, at: np.ndarray) -> tuple[pa.StructArray, pa.Array | None]:
        fields, errors = _fields(child), []
        for name, kind in cfg.spec.items():
            if name not in fields:  # a field these records lack is left out, as a null one is
                continue
            source = fields[name].type
            fields[name], bad = cast_values(fields[name], kind)
            if bad is not None:
                temporal = pa.types.is_temporal(source) or pa.types.is_duration(source)
                why = (" is a date or time: TimestampConverter with target_type unix makes it a number"
                       if temporal else f" is not a valid {kind}")
                errors.append(pc.if_else(bad, pc.binary_join_element_wise(
                    f"Cast: value.{name} = '", images.text_of(_original(child, name)), f"'{why}", ""), None))
        return _struct(fields, child), _joined(*errors)
    rows.map_images(step)


def _original(child: pa.StructArray, name: str) -> pa.Array:
    return child.field(child.type.get_field_index(name))


def cast_values(values: pa.Array, kind: str) -> tuple[pa.Array, pa.Array | None]:
    """``values`` as the Connect type ``kind``, and where a value could not be (null: none could not)."""
    to = CAST_TYPES[kind]
    source = values.type
    if source == to:
        return values, None
    if kind == "string":
        return images.text_of(values), None
    if pa.types.is_null(source):
        return pa.nulls(len(values), to), None
    if pa.types.is_boolean(source):
        return pc.cast(values, to), None
    if pa.types.is_string(source):
        return _from_text(values, kind, to)
    if not (pa.types.is_integer(source) or pa.types.is_floating(source) or pa.types.is_decimal(source)):
        return pa.nulls(len(values), to), pc.is_valid(values)  # a date or time: TimestampConverter's work
    if kind == "boolean":
        return pc.not_equal(values, pc.cast(pa.scalar(0), source)), None
    if pa.types.is_floating(to):  # a decimal by its text: Arrow's decimal to double is not correctly rounded
        exact = pc.cast(values, pa.string()) if pa.types.is_decimal(source) else values
        return pc.cast(exact, to, safe=False), None
    if pa.types.is_floating(source):  # toward zero; NaN and the infinities are not numbers of `to`
        finite = pc.fill_null(pc.is_finite(values), True)
        whole = pc.trunc(pc.if_else(finite, values, None))
    elif pa.types.is_decimal(source):  # toward zero
        whole = pc.cast(values, (pa.decimal128 if source.precision <= 38 else pa.decimal256)(source.precision, 0),
                        safe=False)
        finite = pa.array(np.ones(len(values), bool))
    else:
        whole, finite = values, pa.array(np.ones(len(values), bool))
    out = _ints(whole, to)
    return out, pc.and_(pc.is_valid(values), pc.is_null(out))


def _ints(whole: pa.Array, to: pa.DataType) -> pa.Array:
    """Whole numbers as the integer type ``to``, null where one does not fit (or is null)."""
    try:
        return pc.cast(whole, to)
    except pa.ArrowInvalid:  # one out of range: value by value
        info = np.iinfo(to.to_pandas_dtype())
        return pa.array([int(v) if v is not None and info.min <= int(v) <= info.max else None
                         for v in whole.to_pylist()], to)


def _from_text(values: pa.Array, kind: str, to: pa.DataType) -> tuple[pa.Array, pa.Array]:
    text = pc.utf8_trim_whitespace(values)
    if kind == "boolean":
        lower = pc.utf8_lower(text)
        out = pc.if_else(pc.is_in(lower, pa.array(_TRUE)), True, pc.if_else(pc.is_in(lower, pa.array(_FALSE)), False, None))
        return out, pc.and_(pc.is_valid(values), pc.is_null(out))
    if pa.types.is_floating(to):
        ok = pc.fill_null(pc.match_substring_regex(text, _FLOAT), False)
        out = pc.cast(pc.replace_substring_regex(pc.if_else(ok, text, None), "([0-9.])[dDfF]$", "\\1"), to)
        return out, pc.and_(pc.is_valid(values), pc.invert(ok))
    ok = pc.fill_null(pc.match_substring_regex(text, _INTEGER), False)
    digits = pc.if_else(ok, text, None)
    try:
        out = _ints(pc.cast(digits, pa.int64()), to)
    except pa.ArrowInvalid:  # past int64: value by value
        info = np.iinfo(to.to_pandas_dtype())
        out = pa.array([int(v) if v is not None and info.min <= int(v) <= info.max else None
                        for v in digits.to_pylist()], to)
    return out, pc.and_(pc.is_valid(values), pc.is_null(out))


def replace_field(rows: Rows, cfg: cfgs.ReplaceField) -> None:
    def step(child: pa.StructArray, _at: np.ndarray) -> tuple[pa.StructArray, None]:
        fields = _fields(child)
        kept = {cfg.renames.get(n, n): v for n, v in fields.items()
                if (not cfg.include or n in cfg.include) and n not in cfg.exclude}
        return _struct(kept, child), None
    rows.map_images(step)


def timestamp_converter(rows: Rows, cfg: cfgs.TimestampConverter) -> None:
    def step(child: pa.StructArray, _at: np.ndarray) -> tuple[pa.StructArray, pa.Array | None]:
        fields = _fields(child)
        if cfg.field not in fields:
            return child, None
        raw = fields[cfg.field]
        micros = _micros(raw, cfg)
        fields[cfg.field] = _timestamp_out(micros, cfg)
        bad = pc.and_(pc.is_valid(raw), pc.is_null(micros))
        shown = images.text_of(raw)
        error = pc.if_else(bad, pc.binary_join_element_wise(
            f"TimestampConverter: value.{cfg.field} = '", shown,
            f"' is not a timestamp{' in format ' + cfg.format if cfg.format else ''}", ""), None)
        return _struct(fields, child), error
    rows.map_images(step)


def _micros(raw: pa.Array, cfg: cfgs.TimestampConverter) -> pa.Array:
    """The field's values as microseconds since the epoch (UTC, the session's time zone), null where
    a value is not a timestamp."""
    kind = raw.type
    per_unit = {"seconds": 1_000_000, "milliseconds": 1_000, "microseconds": 1}[cfg.unix_precision]
    if pa.types.is_string(kind):  # by the format, else as the ISO text a decoded date or time has
        read = [_iso_micros(raw)]
        if cfg.format:
            fmt = _strftime(cfg.format)
            assert fmt is not None  # unserved() refused the others
            read.insert(0, pc.cast(_strptime(raw, fmt), pa.int64()))
        # a whole number's text: the number (the per-record decode gives a JSON number as its text)
        number = pc.if_else(pc.fill_null(pc.match_substring_regex(raw, r"^-?\d{1,18}$"), False), raw, None)
        read.append(_micros(pc.cast(number, pa.int64()), cfg))
        return pc.coalesce(*read)
    if pa.types.is_integer(kind):
        wide = pc.cast(raw, pa.int64())
        limit = (2 ** 63 - 1) // per_unit
        fits = pc.and_(pc.greater_equal(wide, -limit), pc.less_equal(wide, limit))
        return pc.multiply(pc.if_else(fits, wide, None), per_unit)
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        scaled = pc.multiply(pc.cast(raw, pa.float64()), float(per_unit))
        ok = pc.and_(pc.is_finite(scaled), pc.less(pc.abs(scaled), 9.2e18))
        return pc.cast(pc.trunc(pc.if_else(ok, scaled, None)), pa.int64())
    if pa.types.is_date(kind):
        return pc.multiply(pc.cast(pc.cast(raw, pa.int32()), pa.int64()), 86_400_000_000)
    if pa.types.is_timestamp(kind):
        return pc.cast(pc.cast(raw, pa.timestamp("us", kind.tz)), pa.int64())
    return pa.nulls(len(raw), pa.int64())  # a TIME (duration), a struct …: each value's record fails


def _iso_micros(raw: pa.Array) -> pa.Array:
    """Texts of the ISO forms (2024-02-29, 2024-02-29 13:14:15.123456, …T…) as µs, null for others:
    the texts of dates and times the per-record decode gives, and Spark's cast of text to a timestamp."""
    out = []
    for pattern, kind in ((_ISO, pa.timestamp("us")), (_ZONED, pa.timestamp("us", "UTC"))):
        text = pc.if_else(pc.fill_null(pc.match_substring_regex(raw, pattern), False), raw, None)
        try:
            parsed = pc.cast(text, kind)
        except pa.ArrowInvalid:  # a date like 2024-13-01: value by value
            parsed = pa.array([_iso(v) for v in text.to_pylist()], kind)
        out.append(pc.cast(parsed, pa.int64()))
    return pc.coalesce(*out)


def _iso(text: str | None) -> Any:
    if text is None:
        return None
    try:
        at = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return at.astimezone(dt.UTC) if at.tzinfo is not None else at


def _strptime(raw: pa.Array, fmt: str) -> pa.Array:
    """Texts by a %-format of fixed-width fields (%Y four digits, %L three, the others two), as
    Spark's parser reads them (Arrow's strptime also takes 2024-1-2); %L, the milliseconds, Arrow's
    strptime has not: their digits are cut out first."""
    tokens = re.findall(r"%[YmdHMSL]|[^%]+", fmt)
    widths = [4 if t == "%Y" else 3 if t == "%L" else 2 if t.startswith("%") else len(t) for t in tokens]
    pattern = "^" + "".join(rf"\d{{{w}}}" if t.startswith("%") else re.escape(t)
                            for t, w in zip(tokens, widths, strict=True)) + "$"
    text = pc.if_else(pc.fill_null(pc.match_substring_regex(raw, pattern), False), raw, None)
    if "%L" not in tokens:
        return pc.strptime(text, fmt, "us", error_is_null=True)
    start = sum(widths[:tokens.index("%L")])
    millis = pc.cast(pc.utf8_slice_codeunits(text, start, start + 3), pa.int64())
    rest = pc.binary_join_element_wise(pc.utf8_slice_codeunits(text, 0, start),
                                       pc.utf8_slice_codeunits(text, start + 3), "")
    base = pc.strptime(rest, fmt.replace("%L", ""), "us", error_is_null=True)
    return pc.cast(pc.add(pc.cast(base, pa.int64()), pc.multiply(millis, 1000)), pa.timestamp("us"))


def _timestamp_out(micros: pa.Array, cfg: cfgs.TimestampConverter) -> pa.Array:
    per_unit = {"seconds": 1_000_000, "milliseconds": 1_000, "microseconds": 1}[cfg.unix_precision]
    stamp = pc.cast(micros, pa.timestamp("us"))
    if cfg.target_type == "unix":  # toward zero, as Spark's (unix_micros / unit).cast(bigint)
        values = micros.fill_null(0).to_numpy()
        whole = np.sign(values) * (np.abs(values) // per_unit)
        return pa.array(whole, pa.int64(), mask=micros.is_null().to_numpy(zero_copy_only=False))
    if cfg.target_type == "Timestamp":
        return stamp
    if cfg.target_type == "Date":
        return pc.cast(pc.floor_temporal(stamp, unit="day"), pa.date32())
    if cfg.target_type == "Time":
        return _formatted(stamp, "%H:%M:%S.%L")
    fmt = _strftime(cfg.format or "yyyy-MM-dd HH:mm:ss")
    assert fmt is not None
    return _formatted(stamp, fmt)


def _strftime(java: str) -> str | None:
    """A Java datetime pattern of yyyy MM dd HH mm ss SSS and separators as %-codes (%L: millis), or None."""
    out, at = [], 0
    for match in _PATTERN.finditer(java):
        token = match.group()
        if match.start() != at or (token.isalpha() and token not in _JAVA_TOKENS):
            return None  # MMMM, SSSSSS, quoted text … : the older path's
        out.append("%" + _JAVA_TOKENS[token] if token in _JAVA_TOKENS else token)
        at = match.end()
    return "".join(out) if at == len(java) and out else None


def _formatted(stamp: pa.Array, fmt: str) -> pa.Array:
    """Timestamps as text by a %-format (with %L, the milliseconds): Arrow's strftime prints a µs
    timestamp's %S with its fraction, so the fields are joined here."""
    parts = {"Y": (pc.year(stamp), 4), "m": (pc.month(stamp), 2), "d": (pc.day(stamp), 2),
             "H": (pc.hour(stamp), 2), "M": (pc.minute(stamp), 2), "S": (pc.second(stamp), 2),
             "L": (pc.millisecond(stamp), 3)}
    pieces: list[Any] = []
    for token in re.findall(r"%[YmdHMSL]|[^%]+", fmt):
        if token.startswith("%"):
            value, width = parts[token[1]]
            pieces.append(pc.utf8_lpad(pc.cast(value, pa.string()), width, "0"))
        else:
            pieces.append(token)
    return pc.binary_join_element_wise(*pieces, "")


def mask_field(rows: Rows, cfg: cfgs.MaskField) -> None:
    applies = _applies(rows, cfg)

    def step(child: pa.StructArray, at: np.ndarray) -> tuple[pa.StructArray, None]:
        fields = _fields(child)
        where = applies.take(pa.array(at))
        for name in cfg.fields:
            if name in fields:
                values = fields[name]
                masked = _mask_value(values.type, cfg.replacement)
                fields[name] = pc.if_else(pc.and_(where, pc.is_valid(values)), masked, values)
        return _struct(fields, child), None
    rows.map_images(step)


def _mask_value(kind: pa.DataType, replacement: str | None) -> pa.Scalar:
    if replacement is not None:
        try:
            return pc.cast(pa.scalar(replacement), kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise ConfigError(f"MaskField: the replacement {replacement!r} is not a {kind} value") from None
    if pa.types.is_string(kind):
        return pa.scalar("", kind)
    if pa.types.is_boolean(kind):
        return pa.scalar(False)
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return pc.cast(pa.scalar(0), kind)
    return pa.scalar(None, kind)


def insert_field(rows: Rows, cfg: cfgs.InsertField) -> None:
    n = rows.table.num_rows
    added: dict[str, pa.Array] = {}
    if cfg.topic_field:
        added[cfg.topic_field] = rows.column("route")
    if cfg.partition_field:
        added[cfg.partition_field] = rows.column("partition")
    if cfg.offset_field:
        added[cfg.offset_field] = rows.column("offset")
    if cfg.timestamp_field:
        added[cfg.timestamp_field] = pc.cast(pc.multiply(rows.column("timestamp"), 1000), pa.timestamp("us"))
    if cfg.static_field:
        added[cfg.static_field] = pa.array([cfg.static_value] * n)
    _insert(rows, added, pa.array(np.ones(n, bool)))


def regex_router(rows: Rows, cfg: cfgs.RegexRouter) -> None:
    pattern = f"^(?:{cfg.regex})$"
    route = rows.column("route")
    hit = pc.and_(_applies(rows, cfg), pc.fill_null(pc.match_substring_regex(route, pattern), False))
    rewrite = _rewrite(cfg.replacement, re.compile(cfg.regex).groups)
    assert rewrite is not None  # unserved() refused the others
    rows.set("route", pc.if_else(hit, pc.replace_substring_regex(route, pattern, rewrite), route))


def _rewrite(java: str, groups: int) -> str | None:
    """A Java replacement ($1, \\$) as RE2's (\\1, $); None for what Java reads otherwise or refuses
    (a group past $9 or past the regex's ``groups``, a $ without a group number)."""
    out, i = [], 0
    while i < len(java):
        c = java[i]
        if c == "\\" and i + 1 < len(java):
            out.append("\\\\" if java[i + 1] == "\\" else java[i + 1])
            i += 2
        elif c == "$":
            if i + 1 >= len(java) or not java[i + 1].isdigit() or int(java[i + 1]) > groups:
                return None
            if i + 2 < len(java) and java[i + 2].isdigit() and int(java[i + 1:i + 3]) <= groups:
                return None  # $10 …: RE2 rewrites up to \\9
            out.append("\\" + java[i + 1])
            i += 2
        elif c == "\\":
            return None  # a trailing backslash: Java refuses it
        else:
            out.append(c)
            i += 1
    return "".join(out)


def filter_records(rows: Rows, cfg: cfgs.Filter) -> None:
    rows.drop(_applies(rows, cfg))


def tombstone_handler(rows: Rows, cfg: cfgs.TombstoneHandler) -> None:
    tombstone = pc.and_(_applies(rows, cfg), rows.tombstone())
    if cfg.behavior == "fail":
        rows.fail(tombstone, "TombstoneHandler: tombstone record (behavior fail)")
        return
    if cfg.behavior == "warn" and pc.any(pc.and_(rows.live, tombstone)).as_py():
        log.warning("TombstoneHandler: dropping tombstones (behavior warn)")
    rows.drop(tombstone)


def _applies(rows: Rows, cfg: Any) -> pa.Array:
    """Per change, whether the transform applies (its predicate, negated or not)."""
    n = rows.table.num_rows
    pred = cfg.predicate
    if pred is None:
        return pa.array(np.ones(n, bool))
    if isinstance(pred, cfgs.TopicNameMatches):
        hit = pc.match_substring_regex(rows.column("route"), f"^(?:{pred.pattern})$")
    elif isinstance(pred, cfgs.RecordIsTombstone):
        hit = rows.tombstone()
    else:  # HasHeaderKey
        headers = rows.column("headers")
        keys = pc.list_flatten(headers).field("key")
        owners = pc.list_parent_indices(headers)
        found = np.zeros(n, bool)
        found[owners.filter(pc.fill_null(pc.equal(keys, pred.name), False)).to_numpy()] = True
        hit = pa.array(found)
    hit = pc.fill_null(hit, False)
    return pc.invert(hit) if cfg.negate else hit


STEPS: dict[str, Callable[[Rows, Any], None]] = {
    "Cast": cast, "ReplaceField": replace_field, "TimestampConverter": timestamp_converter, "MaskField": mask_field,
    "InsertField": insert_field, "RegexRouter": regex_router, "Filter": filter_records,
    "TombstoneHandler": tombstone_handler,
}


def apply(decoded: pa.Table, chain: Any, versioning: str) -> pa.Table:
    """A read task's decoded changes through the chain (:func:`unserved` said it is served); the row
    schemas (the tables created from them) rewritten to match (:func:`described`)."""
    rows = Rows(decoded)
    if not decoded.num_rows:
        return decoded
    schemas = rows.column("row_schema")
    if schemas.null_count < len(schemas):
        texts = {t: described(chain, t) for t in pc.unique(schemas).drop_null().to_pylist()}
        rows.set("row_schema", pa.array([None if t is None else texts[t] for t in schemas.to_pylist()], pa.string()))
    for i, cfg in enumerate(chain):
        try:
            if cfg.type == "ExtractNewRecordState":
                extract_new_record_state(rows, cfg, versioning)
            else:
                STEPS[cfg.type](rows, cfg)
        except ConfigError as exc:
            raise ConfigError(f"transforms.{i} ({cfg.type}): {exc}") from None
    return rows.table
