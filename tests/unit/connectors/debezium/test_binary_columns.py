"""connectors/debezium/binary_columns.py: a column of geometries or BITs read at once gives the texts
the per-value readers give (connectors/debezium/types.py), or None where they would refuse a value."""

from __future__ import annotations

import base64
import random
import struct

import pyarrow as pa

from connectors.debezium import binary_columns
from connectors.debezium.types import BITS, GEOMETRY, BY_NAME


def _per_value(values: pa.Array, convert: object) -> list[str | None]:
    return [convert(v)[0] for v in values.to_pylist()]  # type: ignore[operator]


def test_geometries_give_the_per_value_texts() -> None:
    rng = random.Random(3)
    geometry = BY_NAME[GEOMETRY]
    rows = []
    for i in range(200):
        wkb = b"\x01" + struct.pack("<I", 1) + struct.pack("<dd", rng.uniform(-180, 180), rng.uniform(-90, 90))
        wkb += bytes(rng.randrange(256) for _ in range(i % 4))  # lengths of every remainder mod 3
        rows.append(None if i % 17 == 0 else {"wkb": base64.b64encode(wkb).decode(), "srid": [None, 0, 4326, 3857][i % 4]})
    values = pa.array(rows, pa.struct([("wkb", pa.string()), ("srid", pa.int32())]))
    assert binary_columns.texts(values, geometry).to_pylist() == _per_value(values, geometry)
    assert binary_columns.texts(values.slice(5, 30), geometry).to_pylist() == _per_value(values.slice(5, 30), geometry)


def test_a_geometry_the_per_value_reader_refuses_leaves_the_column_to_it() -> None:
    geometry = BY_NAME[GEOMETRY]
    kind = pa.struct([("wkb", pa.string()), ("srid", pa.int64())])
    for bad in ({"wkb": "not base64!", "srid": 1}, {"wkb": None, "srid": 1}, {"wkb": "AQ==", "srid": -1},
                {"wkb": "AQ==", "srid": 1 << 32}):
        assert binary_columns.texts(pa.array([{"wkb": "AQ==", "srid": 0}, bad], kind), geometry) is None


def test_bits_give_the_per_value_texts() -> None:
    rng = random.Random(5)
    bits = BY_NAME[BITS]
    texts = [None if i % 11 == 0 else base64.b64encode(bytes(rng.randrange(256) for _ in range(i % 9))).decode()
             for i in range(200)]
    values = pa.array(texts, pa.string())
    assert binary_columns.texts(values, bits).to_pylist() == _per_value(values, bits)
    numbers = pa.array([None, 0, 5, 1023], pa.int64())
    assert binary_columns.texts(numbers, bits).to_pylist() == _per_value(numbers, bits)
    wide = pa.array([base64.b64encode(bytes(range(9))).decode()], pa.string())  # BIT(72): Python's integers
    assert binary_columns.texts(wide, bits) is None
