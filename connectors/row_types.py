"""The types of the per-record formats' values (GoldenGate, Canal, Maxwell), for a chain (issue 43).

The format decoders read each value into its exact MySQL text (connectors/mysql/values.py). A chain's
steps act by a field's type (a ``MaskField`` masks a number to 0, a ``Cast`` reads a number, a Spark
predicate compares numbers), so when a chain applies each change also says the Arrow type of its
fields (``Change.types``), and connectors/images.py builds the image's fields in that type from the
texts: the typed values of the column-wise Debezium decode (connectors/debezium/typed.py), whose
texts (images.text_of) are the same texts.

Where a field's type comes from:

* a MySQL column type (Canal's ``mysqlType``, a sink's declared column for Maxwell and GoldenGate):
  the integers (TINYINT … BIGINT; TINYINT(1) and BOOLEAN are numbers, as MySQL holds them) int64,
  BIGINT UNSIGNED a ``decimal(20,0)`` (its values past 2^63-1, as Debezium's
  ``bigint.unsigned.handling.mode=precise``), FLOAT and DOUBLE float64, DECIMAL(p,s) a decimal of
  scale s; anything else (dates, times, texts, ENUM, SET, BIT, binary, JSON) its text;
* Canal's ``sqlType`` (``java.sql.Types`` codes) where ``mysqlType`` cannot be read: TINYINT,
  SMALLINT, INTEGER, BIGINT int64, FLOAT, REAL, DOUBLE float64, DECIMAL and NUMERIC a decimal of the
  scale its text has;
* a JSON value (Maxwell's and GoldenGate's values without a declared column): a JSON integer
  int64, a number with a fraction a decimal of the scale it is written with (``19.90``: scale 2),
  true/false a boolean, a string, an array or an object text.

A field whose values in one image shape disagree takes a number type that holds them all (an integer
and a decimal: float64, as the column-wise decode reads such JSON), else its text; a value its type
cannot hold (an integer past int64, a number of more digits than a double keeps) leaves the field's
text. The texts of the typed values are the texts (images.text_of), but for a double's, which is
Arrow's shortest form of the same number (``1.0E10`` is ``1e+10``).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connectors.mysql.types import DECIMALS, FLOATS, INTEGERS, ColumnType

MAX_PRECISION = 38  # decimal128
UNSIGNED_BIGINT = pa.decimal128(20, 0)
_INT64 = pa.int64()
# java.sql.Types codes (Canal's sqlType)
SQL_INTEGERS = frozenset({-6, 5, 4, -5})  # TINYINT, SMALLINT, INTEGER, BIGINT
SQL_FLOATS = frozenset({6, 7, 8})  # FLOAT, REAL, DOUBLE
SQL_DECIMALS = frozenset({2, 3})  # NUMERIC, DECIMAL


def of_column(column: ColumnType) -> pa.DataType | None:
    """The Arrow type of a MySQL column's values; None: its text."""
    base = column.base
    if base in INTEGERS or base == "BOOLEAN":
        return UNSIGNED_BIGINT if base == "BIGINT" and column.unsigned else _INT64
    if base in FLOATS:
        return pa.float64()
    if base in DECIMALS and 0 < column.precision <= MAX_PRECISION:
        return pa.decimal128(column.precision, column.scale)
    return None


def of_sql_type(code: Any, value: Any) -> pa.DataType | None:
    """The Arrow type of a value by its JDBC type code (Canal's ``sqlType``); None: its text."""
    if code in SQL_INTEGERS:
        return _INT64
    if code in SQL_FLOATS:
        return pa.float64()
    if code in SQL_DECIMALS and isinstance(value, str):
        try:
            return of_json(Decimal(value.strip()))
        except ArithmeticError:
            return None
    return None


def of_json(value: Any) -> pa.DataType | None:
    """The Arrow type of a JSON value (numbers with a fraction decoded as Decimal); None: its text."""
    if value is None or type(value) is str:
        return None
    if isinstance(value, bool):  # before int: a bool is one
        return pa.bool_()
    if isinstance(value, int):
        return _INT64 if -(1 << 63) <= value < (1 << 63) else None  # past int64: its text
    if isinstance(value, Decimal) and value.is_finite():
        exponent = value.as_tuple().exponent
        assert isinstance(exponent, int)
        scale = max(-exponent, 0)
        digits = max(len(value.as_tuple().digits), scale + 1)
        if digits <= MAX_PRECISION and exponent <= 0:
            return pa.decimal128(MAX_PRECISION, scale)
        return pa.float64()
    return None


def common(kinds: Sequence[pa.DataType | None]) -> pa.DataType | None:
    """The type of a field whose values have these types (a null value's type is left out); None: text."""
    seen = set(kinds)
    if len(seen) == 1:
        return seen.pop()
    if None in seen:
        return None
    if all(pa.types.is_integer(k) or pa.types.is_floating(k) or pa.types.is_decimal(k) for k in seen):
        return pa.float64()
    return None


def typed_texts(texts: Sequence[str | None], kind: pa.DataType | None) -> pa.Array:
    """A field's texts as values of ``kind`` (None: the texts); the texts where one does not read, or
    where a double would not hold a text's number (more digits than a double keeps)."""
    array = pa.array(texts, pa.string())
    if kind is None:
        return array
    try:
        values = pc.cast(array, kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return array
    if pa.types.is_floating(kind) and not all(
            t is None or Decimal(repr(f)) == Decimal(t.strip()) for t, f in zip(texts, values.to_pylist(), strict=True)):
        return array
    return values
