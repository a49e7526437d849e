"""MySQL column types, checked against MySQL's own grammar (the "Data Types" chapter of the MySQL
reference manual, which MariaDB follows) and written back in one canonical form.

:func:`parse_type` accepts every column type a table can have, with its attributes: the integer
types with a display width, UNSIGNED and ZEROFILL, BOOL/BOOLEAN, DECIMAL/NUMERIC/DEC/FIXED (M ≤ 65,
D ≤ 30, D ≤ M), FLOAT/DOUBLE [PRECISION]/REAL, BIT(1–64), DATE, TIME/DATETIME/TIMESTAMP with 0–6
fractional digits, YEAR, CHAR/VARCHAR/BINARY/VARBINARY, the TEXT and BLOB sizes, CHARACTER SET and
COLLATE, ENUM and SET with their values, JSON, and the spatial types. Anything else is refused with
what was expected. The canonical text goes into DDL as it is: every part of it is rebuilt from the
parsed pieces (ENUM values re-quoted), so no type text can inject SQL.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

INTEGERS = {"TINYINT": 8, "SMALLINT": 16, "MEDIUMINT": 24, "INT": 32, "INTEGER": 32, "BIGINT": 64}
DECIMALS = ("DECIMAL", "DEC", "NUMERIC", "FIXED")
FLOATS = ("FLOAT", "DOUBLE", "REAL", "DOUBLE PRECISION")
TEMPORALS = ("TIME", "DATETIME", "TIMESTAMP")
STRINGS = {"CHAR": 255, "VARCHAR": 65535, "BINARY": 255, "VARBINARY": 65535}
LOBS = ("TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB")
SPATIAL = ("GEOMETRY", "POINT", "LINESTRING", "POLYGON", "MULTIPOINT", "MULTILINESTRING", "MULTIPOLYGON",
           "GEOMETRYCOLLECTION")
BINARIES = frozenset({"BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"})
TEXTS = frozenset({"CHAR", "VARCHAR", "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT", "ENUM", "SET"})

EXPECTED = ("an integer type (TINYINT … BIGINT, optionally (M), UNSIGNED, ZEROFILL), "
            "BOOLEAN, DECIMAL(M,D) with M ≤ 65 and D ≤ 30, FLOAT, DOUBLE, BIT(1-64), DATE, TIME/DATETIME/TIMESTAMP(0-6), "
            "YEAR, CHAR(M), VARCHAR(M), BINARY(M), VARBINARY(M), TINY/MEDIUM/LONG TEXT or BLOB, ENUM('a',…), "
            "SET('a',…), JSON or a spatial type (GEOMETRY, POINT, …)")

_TOKEN = re.compile(r"\s*(?:(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<num>\d+)|(?P<str>'(?:[^'\\]|''|\\.)*')|(?P<sym>[(),]))")


class TypeSyntaxError(ValueError):
    pass


@dataclass(frozen=True)
class ColumnType:
    base: str  # TINYINT, DECIMAL, VARCHAR, ENUM … (DOUBLE PRECISION and REAL as DOUBLE, INTEGER as INT …)
    args: tuple[int, ...] = ()  # (M,), (M, D), (fsp,)
    values: tuple[str, ...] = ()  # ENUM / SET
    unsigned: bool = False
    zerofill: bool = False
    charset: str | None = None
    collate: str | None = None

    @property
    def sql(self) -> str:
        """The canonical text, for DDL."""
        text = self.base
        if self.values:
            text += "(" + ",".join("'" + v.replace("\\", "\\\\").replace("'", "''") + "'" for v in self.values) + ")"
        elif self.args:
            text += "(" + ",".join(str(a) for a in self.args) + ")"
        if self.unsigned:
            text += " UNSIGNED"
        if self.zerofill:
            text += " ZEROFILL"
        if self.charset:
            text += f" CHARACTER SET {self.charset}"
        if self.collate:
            text += f" COLLATE {self.collate}"
        return text

    @property
    def is_integer(self) -> bool:
        return self.base in INTEGERS or self.base == "BOOLEAN"

    @property
    def is_binary(self) -> bool:
        return self.base in BINARIES

    @property
    def is_spatial(self) -> bool:
        return self.base in SPATIAL

    @property
    def precision(self) -> int:
        return self.args[0] if self.args else 10

    @property
    def scale(self) -> int:
        return self.args[1] if len(self.args) > 1 else 0

    @property
    def fsp(self) -> int:
        return self.args[0] if self.args else 0


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise TypeSyntaxError(f"{text!r}: unexpected {text[pos:pos + 10]!r}")
        kind = m.lastgroup or ""
        value = m.group(kind)
        out.append((kind, value.upper() if kind == "word" else value))
        pos = m.end()
    return out


def _unquote(literal: str) -> str:
    body = literal[1:-1]
    return re.sub(r"''|\\(.)", lambda m: "'" if m.group(0) == "''" else m.group(1), body)


@functools.lru_cache(maxsize=4096)  # a window reads each table's column types a few times (ColumnType is frozen)
def parse_type(text: str) -> ColumnType:
    """A column type's text -> ColumnType; raises TypeSyntaxError (a ValueError) saying what is wrong."""
    return type_at(text, _tokens(text), strict=True)[0]


# Kept whole (about 70 lines): MySQL's column-type grammar, read left to right in one place.
def type_at(text: str, toks: list[tuple[str, str]], strict: bool) -> tuple[ColumnType, int]:
    """The type at the start of ``toks``, and where it ends; ``strict``: nothing may follow it (else
    the rest is a column definition's, :func:`parse_definition`)."""
    if not toks or toks[0][0] != "word":
        raise TypeSyntaxError(f"{text!r} does not start with a type name")
    i = 0

    def peek(k: int = 0) -> tuple[str, str] | None:
        return toks[i + k] if i + k < len(toks) else None

    def take_list(kind: str, what: str) -> list[str]:
        """The comma-separated tokens of ``kind`` inside the parentheses at ``i``."""
        nonlocal i
        items, i = [], i + 1
        while True:
            tok = peek()
            if tok is None or tok[0] != kind:
                raise TypeSyntaxError(f"{text!r}: {what}")
            items.append(tok[1])
            i += 1
            if peek() == ("sym", ","):
                i += 1
                continue
            if peek() == ("sym", ")"):
                i += 1
                return items
            raise TypeSyntaxError(f"{text!r}: expected ',' or ')'")

    base = toks[0][1]
    i = 1
    if base == "DOUBLE" and peek() == ("word", "PRECISION"):
        i += 1
    if base == "LONG" and peek() in (("word", "VARCHAR"), ("word", "VARBINARY")):  # MySQL's LONG VARCHAR
        base, i = "MEDIUMTEXT" if peek() == ("word", "VARCHAR") else "MEDIUMBLOB", i + 1
    values: tuple[str, ...] = ()
    args: tuple[int, ...] = ()
    if base in ("ENUM", "SET"):
        if peek() != ("sym", "("):
            raise TypeSyntaxError(f"{text!r}: {base} needs its values, e.g. {base}('a','b')")
        values = tuple(_unquote(v) for v in take_list("str", f"{base} values are quoted strings, e.g. {base}('a','b')"))
        if base == "SET" and len(values) > 64:
            raise TypeSyntaxError(f"{text!r}: a SET has at most 64 members")
    elif peek() == ("sym", "("):
        args = tuple(int(n) for n in take_list("num", "expected a number inside the parentheses"))
    base = {"INTEGER": "INT", "BOOL": "BOOLEAN", "DEC": "DECIMAL", "NUMERIC": "DECIMAL", "FIXED": "DECIMAL",
            "REAL": "DOUBLE"}.get(base, base)
    _check(text, base, args)
    unsigned = zerofill = False
    charset = collate = None
    while (tok := peek()) is not None:
        word = tok[1] if tok[0] == "word" else None
        if word in ("UNSIGNED", "SIGNED", "ZEROFILL") and (base in INTEGERS or base in ("DECIMAL", "FLOAT", "DOUBLE")):
            unsigned = unsigned or word in ("UNSIGNED", "ZEROFILL")
            zerofill = zerofill or word == "ZEROFILL"
            i += 1
        elif word in ("CHARACTER", "CHARSET") and base in TEXTS:
            i += 2 if word == "CHARACTER" and peek(1) == ("word", "SET") else 1
            name = peek()
            if name is None or name[0] != "word":
                raise TypeSyntaxError(f"{text!r}: expected a character set name")
            charset, i = name[1].lower(), i + 1
        elif word == "COLLATE" and base in TEXTS:
            name = peek(1)
            if name is None or name[0] != "word":
                raise TypeSyntaxError(f"{text!r}: expected a collation name")
            collate, i = name[1].lower(), i + 2
        elif strict:
            raise TypeSyntaxError(f"{text!r}: unexpected {tok[1]!r} after the type")
        else:
            break
    return ColumnType(base, args, values, unsigned, zerofill, charset, collate), i


def _check(text: str, base: str, args: tuple[int, ...]) -> None:
    def bad(why: str) -> TypeSyntaxError:
        return TypeSyntaxError(f"{text!r}: {why}")

    n = len(args)
    if base in INTEGERS:
        if n > 1 or (n and not 1 <= args[0] <= 255):
            raise bad("an integer type takes at most a display width (1-255)")
    elif base == "DECIMAL":
        if n > 2 or (n >= 1 and not 1 <= args[0] <= 65) or (n == 2 and not (args[1] <= 30 and args[1] <= args[0])):
            raise bad("DECIMAL(M,D) needs 1 ≤ M ≤ 65, D ≤ 30 and D ≤ M")
    elif base in ("FLOAT", "DOUBLE"):
        if n > 2 or (base == "DOUBLE" and n == 1) or (n == 1 and args[0] > 53) or (n == 2 and args[1] > args[0]):
            raise bad(f"{base} takes (M,D) with D ≤ M{', or FLOAT(p) with p ≤ 53' if base == 'FLOAT' else ''}")
    elif base == "BIT":
        if n > 1 or (n and not 1 <= args[0] <= 64):
            raise bad("BIT(M) needs 1 ≤ M ≤ 64")
    elif base in TEMPORALS:
        if n > 1 or (n and args[0] > 6):
            raise bad(f"{base}(fsp) takes 0-6 fractional digits")
    elif base == "YEAR":
        if n > 1 or (n and args[0] != 4):
            raise bad("YEAR takes no width (or the old YEAR(4))")
    elif base in STRINGS:
        limit = STRINGS[base]
        if n > 1 or (base.startswith("VAR") and n == 0) or (n and args[0] > limit):
            raise bad(f"{base}(M) needs M ≤ {limit}" + (" and a length" if base.startswith("VAR") else ""))
    elif base in ("TEXT", "BLOB"):
        if n > 1:
            raise bad(f"{base} takes at most a length")
    elif base in (*LOBS, "DATE", "JSON", "BOOLEAN", "ENUM", "SET", *SPATIAL):
        if n:
            raise bad(f"{base} takes no length")
    else:
        raise TypeSyntaxError(f"{text!r} is not a MySQL column type")
