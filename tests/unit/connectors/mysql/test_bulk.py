"""The column-wise encoder of the set-based MySQL path: every value comes back exactly as it went in
(a reference reader of MySQL's literal rules), and no value can end its literal early."""

from __future__ import annotations

import random
import re
from decimal import Decimal

import pyarrow as pa

from connectors.mysql import bulk

# MySQL's backslash escapes in string literals (the ones bulk.values emits)
UNESCAPE = {"0": "\x00", "'": "'", '"': '"', "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "\\": "\\"}
ROW = re.compile(r"\(((?:'(?:[^'\\]|\\.)*'|NULL)(?:,(?:'(?:[^'\\]|\\.)*'|NULL))*)\)", re.S)
FIELD = re.compile(r"'((?:[^'\\]|\\.)*)'|NULL", re.S)


def read_values(payload: bytes) -> list[list[str | None]]:
    """Parse ``(…),(…)`` as MySQL would, failing on anything that is not a list of literal rows."""
    text = payload.decode("utf-8")
    rows, pos = [], 0
    while pos < len(text):
        m = ROW.match(text, pos)
        assert m, f"not a row of literals at {pos}: {text[pos:pos + 40]!r}"
        rows.append([None if f.group(0) == "NULL" else re.sub(r"\\(.)", lambda e: UNESCAPE[e.group(1)], f.group(1),
                                                              flags=re.S)
                     for f in FIELD.finditer(m.group(1))])
        pos = m.end()
        if pos < len(text):
            assert text[pos] == ",", text[pos:pos + 10]
            pos += 1
    return rows


def random_text(rng: random.Random) -> str:
    alphabet = "ab'\"\\\t\n\r\x00\x1a%,()NUL é\U0001F600"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))


def test_values_round_trip_hostile_strings_numbers_and_nulls() -> None:
    rng = random.Random(7)
    texts = [random_text(rng) if i % 7 else None for i in range(2_000)]
    ints = [i * 7919 - 5_000 if i % 5 else None for i in range(2_000)]
    decimals = [Decimal(f"{i}.{i % 100:02d}") if i % 3 else None for i in range(2_000)]
    columns = [pa.array(texts, pa.string()), pa.array(ints, pa.int64()), pa.array(decimals, pa.decimal128(10, 2)),
               pa.array([i % 2 == 0 for i in range(2_000)])]
    rows = read_values(bulk.values(columns))
    assert len(rows) == 2_000
    assert [r[0] for r in rows] == texts
    assert [r[1] for r in rows] == [None if v is None else str(v) for v in ints]
    assert [r[2] for r in rows] == [None if v is None else str(v) for v in decimals]
    assert [r[3] for r in rows] == ["1" if i % 2 == 0 else "0" for i in range(2_000)]


def test_values_of_a_slice_are_the_slice() -> None:
    column = pa.array(["a", "b'", None, "d"])
    assert read_values(bulk.values([column.slice(1, 2)])) == [["b'"], [None]]


def test_binary_columns_are_hex_literals() -> None:
    assert bulk.values([pa.array([b"\x00\xff'", None], pa.binary()), pa.array(["a", "b"])]) == (
        b"(X'00ff27','a'),(NULL,'b')")
