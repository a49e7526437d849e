"""Arrow's JSON reader over a group of records' values, for the column-wise decode
(connectors/debezium/columns.py): the Arrow type each field is read as (by its Connect schema, or
schemaless by its first value and its declared column), and the read itself, strict, so that a
value of another shape fails the group (:class:`Unsupported`) rather than being read wrong.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from connectors.arrow_values import value_bytes
from connectors.debezium.types import SPATIAL_TYPES, ColumnHint, FieldSchema

_INTEGERS = frozenset({"TINYINT", "SMALLINT", "MEDIUMINT", "INT", "INTEGER", "BIGINT", "YEAR"})
_FLOATS = frozenset({"FLOAT", "DOUBLE", "REAL"})
_DECIMALS = frozenset({"DECIMAL", "DEC", "NUMERIC", "FIXED"})
_SOURCE = pa.struct([("ts_ms", pa.int64()), ("db", pa.string()), ("table", pa.string())])


class Unsupported(Exception):
    """A group this decode does not read: its records take the per-record decode."""


# -- read types ---------------------------------------------------------------------------------------
def connect_type(schema: FieldSchema) -> pa.DataType:
    """The Arrow type a Connect field's JSON value is read as."""
    kind = schema.type
    if kind in ("int8", "int16", "int32", "int64"):
        return pa.int64()
    if kind in ("float", "double", "float32", "float64"):
        return pa.float64()
    if kind == "boolean":
        return pa.bool_()
    if kind in ("string", "bytes"):
        return pa.string()
    if kind == "struct" and schema.fields:
        return pa.struct([(n, connect_type(s)) for n, s in schema.fields])
    raise Unsupported(f"a {kind} field")


def declared_type(hint: ColumnHint | None, sample: Any) -> pa.DataType:
    """The Arrow type a schemaless field is read as: by its value in the group's first record, else
    by its declared column."""
    if isinstance(sample, bool):
        return pa.bool_()
    if isinstance(sample, str):
        return pa.string()
    if isinstance(sample, int | float | Decimal):
        base = hint.base if hint is not None else ""
        if base in _DECIMALS and hint is not None:
            m = re.match(r"^\w+\s*\(\s*(\d+)", hint.type)
            precision = int(m.group(1)) if m else 10
            return (pa.decimal128 if precision <= 38 else pa.decimal256)(38 if precision <= 38 else 76, hint.scale)
        if base in _FLOATS or not isinstance(sample, int):
            return pa.float64()
        return pa.int64()
    base = hint.base if hint is not None else ""
    if base in SPATIAL_TYPES:  # io.debezium.data.geometry: {wkb, srid} (the text is made of those two)
        return pa.struct([("wkb", pa.string()), ("srid", pa.int64())])
    if sample is not None:  # an object or an array
        raise Unsupported("a structured value without a schema")
    return pa.int64() if base in _INTEGERS else pa.float64() if base in _FLOATS else pa.string()


# -- one group ----------------------------------------------------------------------------------------
def read_lines(lines: pa.Array, row: pa.StructType, wrapper_fields: bool, infer: bool = False,
          rows: bool = False) -> pa.Table:
    """Envelopes (one JSON object per value) -> op, before, after, source, ts_ms columns; with
    ``infer``, the fields the read schema does not name are read too, by their JSON types. With
    ``rows`` (Kafka Connect's record model) each value is a row: its fields are the columns."""
    fields = list(zip(row.names, [f.type for f in row], strict=True)) if rows else [
        ("op", pa.string()), ("before", row), ("after", row), ("source", _SOURCE), ("ts_ms", pa.int64())]
    if wrapper_fields:  # an unwrapped envelope must not hold the wrapper's fields
        fields += [("schema", pa.null()), ("payload", pa.null())]
    buffer = one_per_line(lines)
    table = parsed(buffer, pa.schema(fields), "infer" if infer else "error" if rows else "ignore")
    if infer and any(has_timestamp(f.type) for f in table.schema):
        # Arrow reads a text that looks like a datetime as a timestamp: read the fields it inferred again,
        # as the texts they are
        table = parsed(buffer, pa.schema([(f.name, as_text(f.type)) for f in table.schema]), "error")
    if table.num_rows != len(lines):
        raise Unsupported("a value of several JSON objects")
    return table


def one_per_line(lines: pa.Array) -> pa.Buffer:
    """The values one per line, as the JSON reader reads them, made from Arrow's buffers (a Python
    bytes per value and their join cost ~3.4 µs a record of the real-shaped stream, against ~0.5)."""
    if lines.null_count:
        raise Unsupported("a null value")
    if not len(lines):
        return pa.py_buffer(b"")
    values, bounds = value_bytes(lines)
    if np.any(bounds[1:] == bounds[:-1]):
        raise Unsupported("an empty value")
    if np.count_nonzero(values == ord("\n")):
        raise Unsupported("a value with a line break")
    text = pa.types.is_string(lines.type) or pa.types.is_large_string(lines.type)
    newline, empty = (pa.scalar("\n", lines.type), pa.scalar("", lines.type)) if text else (
        pa.scalar(b"\n", lines.type), pa.scalar(b"", lines.type))
    joined, _bounds = value_bytes(pc.binary_join_element_wise(lines, newline, empty))  # each value, its line break
    return pa.py_buffer(joined)


def parsed(buffer: bytes | pa.Buffer, schema: pa.Schema, unexpected: str) -> pa.Table:
    try:
        return pj.read_json(pa.BufferReader(buffer), read_options=pj.ReadOptions(use_threads=False,
                                                                                 block_size=len(buffer) + 1),
                            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior=unexpected))
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise Unsupported(str(exc)) from None


def has_timestamp(kind: pa.DataType) -> bool:
    if pa.types.is_struct(kind):
        return any(has_timestamp(f.type) for f in kind)
    if pa.types.is_list(kind):
        return has_timestamp(kind.value_type)
    return pa.types.is_timestamp(kind)


def as_text(kind: pa.DataType) -> pa.DataType:
    """``kind`` with its timestamps read as strings."""
    if pa.types.is_struct(kind):
        return pa.struct([(f.name, as_text(f.type)) for f in kind])
    if pa.types.is_list(kind):
        return pa.list_(as_text(kind.value_type))
    return pa.string() if pa.types.is_timestamp(kind) else kind
