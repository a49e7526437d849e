"""Cast's conversions on the per-partition path (spark_jobs/transform/row_transforms.py): a field's values as a
Connect type, and which of them could not be converted (they go to the DLQ, named)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images

CAST_TYPES = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
              "float32": pa.float32(), "float64": pa.float64(), "boolean": pa.bool_(), "string": pa.string()}
_TRUE, _FALSE = ["t", "true", "y", "yes", "1"], ["f", "false", "n", "no", "0"]  # Spark's casts of text to boolean
_INTEGER = r"^[+-]?\d+$"
_FLOAT = r"^[+-]?(NaN|Infinity|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[dDfF]?)$"  # Java's Double.parseDouble


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
