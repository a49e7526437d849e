"""The lines of a LOAD DATA LOCAL set (connectors/mysql/local_load.py), read back by LOAD DATA's rules
(FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n': an escaped tab, newline or
backslash is that character, ``\\N`` is NULL): every value comes back as it went in."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa

from connectors.mysql import local_load

HOSTILE = ["it's", "back\\slash", "tab\there", "new\nline", "cr\rlf", "nul\x00byte", "", "NULL", "\\N", "\\",
           "\\\\t", "end\\", "\t", "\n\n", "emoji \U0001F600 é"]
ESCAPED = {"t": "\t", "n": "\n", "\\": "\\", "0": "\x00"}


def read_back(data: bytes) -> list[list[str | None]]:
    """LOAD DATA's reading of the lines (MySQL reference manual, "LOAD DATA Statement")."""
    text = data.decode("utf-8")
    rows: list[list[str | None]] = []
    row: list[str | None] = []
    field: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            nxt = text[i + 1]
            if nxt == "N" and not field and (i + 2 == len(text) or text[i + 2] in "\t\n"):
                field = [None]  # type: ignore[list-item]
            else:
                field.append(ESCAPED.get(nxt, nxt))
            i += 2
            continue
        if c in "\t\n":
            row.append(None if field == [None] else "".join(field))  # type: ignore[arg-type]
            field = []
            if c == "\n":
                rows.append(row)
                row = []
        else:
            field.append(c)
        i += 1
    assert not field and not row, "the data ends with a line's end"
    return rows


def test_every_hostile_text_comes_back_as_it_went_in() -> None:
    texts = pa.array(HOSTILE + [None], pa.string())
    ids = pa.array(range(len(HOSTILE) + 1), pa.int64())
    data, hexed = local_load.tsv([ids, texts])
    assert hexed == [False, False]
    assert read_back(data) == [[str(i), t] for i, t in enumerate([*HOSTILE, None])]


def test_numbers_decimals_booleans_and_binary_as_mysql_reads_them() -> None:
    columns: list[Any] = [
        pa.chunked_array([pa.array([1, None], pa.int64()), pa.array([-3], pa.int64())]),
        pa.array([Decimal("1.50"), Decimal("-0.01"), None], pa.decimal128(10, 2)),
        pa.array([True, False, None]),
        pa.array([b"\x00\t\n\\", None, b""], pa.binary()),
        pa.array([1.5, None, -2.0e-7])]
    data, hexed = local_load.tsv(columns)
    assert hexed == [False, False, False, True, False]
    assert read_back(data) == [["1", "1.50", "1", "00090a5c", "1.5"], [None, "-0.01", "0", None, None],
                               ["-3", None, None, "", "-2e-7"]]  # Arrow's shortest text, as the INSERT path sends


def test_the_statement_names_each_column_and_decodes_the_hex_ones() -> None:
    sql = local_load.statement("stage", ["id", "data", "note`s"], [False, True, False])
    assert sql == ("LOAD DATA LOCAL INFILE 'cdcflow-set' INTO TABLE `stage` CHARACTER SET utf8mb4 "
                   "FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' "
                   "(`id`, @h1, `note``s`) SET `data` = UNHEX(@h1)")
