"""A declared column's definition as MySQL's ``CREATE TABLE`` grammar writes it after the type (the
chapter's column_definition, as ``SHOW CREATE TABLE`` prints it): NULL / NOT NULL, DEFAULT, ON UPDATE,
COMMENT, CHARACTER SET, COLLATE, and the clauses a sink's table accepts without making or refuses.
The type itself is connectors/mysql/types.py's; every piece is parsed, and the DDL is rebuilt from the
pieces, so no definition text reaches SQL as it was written.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from connectors.mysql.types import LOBS, SPATIAL, TEMPORALS, TEXTS, ColumnType, TypeSyntaxError, type_at

# -- a column definition: the type and what MySQL's grammar takes after it -----------------------------
# (the "CREATE TABLE" chapter's column_definition: NULL / NOT NULL, DEFAULT, ON UPDATE, COMMENT,
# CHARACTER SET, COLLATE, and the clauses a sink's table does not take from a declared column)
DEFINITION_EXPECTED = ("NULL, NOT NULL, DEFAULT <literal or CURRENT_TIMESTAMP[(fsp)]>, ON UPDATE "
                       "CURRENT_TIMESTAMP[(fsp)], COMMENT '…', CHARACTER SET <charset>, COLLATE <collation>")
_LITERAL = "a literal (a number, 'text', NULL, TRUE, b'01', X'0F') or CURRENT_TIMESTAMP[(fsp)]"
_NOW = frozenset({"CURRENT_TIMESTAMP", "NOW", "LOCALTIME", "LOCALTIMESTAMP"})
# accepted as MySQL does, not applied: the sink's table takes its key from primary_key and is written
# with the records' values (docs/types.md, "Declared columns")
_NOT_APPLIED = frozenset({"AUTO_INCREMENT", "VISIBLE", "INVISIBLE", "UNIQUE", "PRIMARY", "KEY"})
_REFUSED = {
    "GENERATED": "a generated column (GENERATED ALWAYS AS …) cannot be written with the records' values",
    "AS": "a generated column (AS (…)) cannot be written with the records' values",
    "REFERENCES": "a foreign key (REFERENCES …) is not made on a sink's table: the windows write tables in no "
                  "order a key could follow",
    "CHECK": "a CHECK constraint is not made on a sink's table: a row it refuses would stop the window",
    "CONSTRAINT": "a CHECK constraint is not made on a sink's table: a row it refuses would stop the window",
}
_LOB_DEFAULTS = frozenset({*LOBS, "JSON", *SPATIAL})
_DEF_TOKEN = re.compile(r"""\s*(?:
    (?P<open>/\*!\d*)|(?P<close>\*/)|(?P<comment>/\*.*?\*/)
    |(?P<hex>0x[0-9A-Fa-f]+|[Xx]'[^']*')|(?P<bits>0b[01]+|[Bb]'[^']*')|(?P<nstr>[Nn]'(?:[^'\\]|''|\\.)*')
    |(?P<word>[A-Za-z_$][A-Za-z0-9_$]*)
    |(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<str>'(?:[^'\\]|''|\\.)*'|"(?:[^"\\]|""|\\.)*")|(?P<sym>[(),=])|(?P<other>\S))""", re.VERBOSE | re.DOTALL)


class DefinitionSyntaxError(TypeSyntaxError):
    """A column definition whose type reads, but not what follows it."""


@dataclass(frozen=True)
class ColumnDefault:
    """A column's DEFAULT: NULL, a number, a string, a bit or hex value, TRUE/FALSE, or the current
    time (``now``, with its fractional digits)."""

    kind: str  # null, number, string, bits, hex, boolean, now
    value: str = ""  # the number's text, the string, the bits (0101), the hex digits, TRUE/FALSE
    fsp: int = 0

    @property
    def sql(self) -> str:
        """The literal for DDL, rebuilt from the parsed pieces (a string re-quoted)."""
        if self.kind == "string":
            return "'" + self.value.replace("\\", "\\\\").replace("'", "''") + "'"
        if self.kind == "bits":
            return f"b'{self.value}'"
        if self.kind == "hex":
            return f"X'{self.value}'"
        if self.kind == "now":
            return now_sql(self.fsp)
        return {"null": "NULL"}.get(self.kind, self.value)


def now_sql(fsp: int) -> str:
    return f"CURRENT_TIMESTAMP({fsp})" if fsp else "CURRENT_TIMESTAMP"


@dataclass(frozen=True)
class ColumnDefinition:
    """A declared column's definition: its type and the attributes written after it."""

    type: ColumnType
    nullable: bool | None = None  # None: not said
    default: ColumnDefault | None = None
    on_update: int | None = None  # ON UPDATE CURRENT_TIMESTAMP(fsp)
    comment: str | None = None

    @property
    def sql(self) -> str:
        parts = [self.type.sql]
        if self.nullable is not None:
            parts.append("NULL" if self.nullable else "NOT NULL")
        if self.default is not None:
            parts.append(f"DEFAULT {self.default.sql}")
        if self.on_update is not None:
            parts.append(f"ON UPDATE {now_sql(self.on_update)}")
        if self.comment is not None:
            parts.append("COMMENT '" + self.comment.replace("\\", "\\\\").replace("'", "''") + "'")
        return " ".join(parts)


def _definition_tokens(text: str) -> tuple[list[tuple[str, str]], list[int]]:
    """The tokens of a column definition, and where each starts: words upper-cased, strings as
    quoted (:func:`_text`), MySQL's /*!NNNNN … */ version comments read through, other comments left
    out."""
    out: list[tuple[str, str]] = []
    starts: list[int] = []
    pos, text = 0, text.rstrip()
    while pos < len(text):
        m = _DEF_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise DefinitionSyntaxError(f"could not read {text[pos:].strip()[:40]!r}")
        kind = m.lastgroup or ""
        value = m.group(kind)
        start = m.start(kind)
        pos = m.end()
        if kind in ("open", "close", "comment"):
            continue
        if kind == "word":
            value = value.upper()
        elif kind == "number" and value.isdigit():
            kind = "num"
        elif kind == "nstr":  # N'…': a string in the national character set
            value, kind = value[1:], "str"
        elif kind in ("hex", "bits"):
            digits = value[2:] if value[:2].lower() in ("0x", "0b") else value[2:-1]
            if not re.fullmatch(r"[0-9A-Fa-f]*" if kind == "hex" else r"[01]*", digits) or (
                    kind == "hex" and value[0] in "Xx" and len(digits) % 2):
                raise DefinitionSyntaxError(f"{value!r} is not a {'hex' if kind == 'hex' else 'bit'} value")
            value = digits.upper()
        out.append((kind, value))
        starts.append(start)
    return out, starts


def _text(quoted: str) -> str:
    """A quoted string token's text: '' (or "") and backslash escapes undone."""
    quote = quoted[0]
    return re.sub(r"\\(.)|" + quote * 2, lambda x: x.group(1) or quote, quoted[1:-1])


@functools.lru_cache(maxsize=1024)
def parse_definition(text: str) -> ColumnDefinition:
    """A column definition as ``SHOW CREATE TABLE`` writes it (``TIMESTAMP(3) NULL DEFAULT
    CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3) COMMENT 'synced'``) -> ColumnDefinition.
    Raises TypeSyntaxError for the type, DefinitionSyntaxError naming what it could not read after it."""
    toks, starts = _definition_tokens(text)
    column_type, i = type_at(text, toks, strict=False)
    defined = _attributes(text, toks, starts, i, column_type)
    check_definition(defined)
    return defined


# Kept whole: the attributes MySQL's column_definition takes after the type, read left to right.
def _attributes(text: str, toks: list[tuple[str, str]], starts: list[int], i: int,
                column_type: ColumnType) -> ColumnDefinition:
    """The attributes from token ``i`` on (not yet checked against the type: :func:`check_definition`)."""
    head = column_type.sql
    nullable: bool | None = None
    default: ColumnDefault | None = None
    on_update: int | None = None
    comment: str | None = None
    charset, collate = column_type.charset, column_type.collate

    def unread(k: int, after: str = "", expected: str = DEFINITION_EXPECTED) -> DefinitionSyntaxError:
        rest = text[starts[k]:].strip() if k < len(toks) else ""
        where = f"after {after}" if after else f"after the type {head}"
        if not rest:
            return DefinitionSyntaxError(f"expected {expected} {where}")
        return DefinitionSyntaxError(f"could not read {rest[:40]!r} {where} (expected {expected})")

    def word(k: int) -> str | None:
        return toks[k][1] if k < len(toks) and toks[k][0] == "word" else None

    def now_at(k: int) -> tuple[int, int] | None:
        """CURRENT_TIMESTAMP, NOW(), LOCALTIMESTAMP[(fsp)] … at ``k``: (fsp, the index after it)."""
        if word(k) not in _NOW:
            return None
        if k + 1 < len(toks) and toks[k + 1] == ("sym", "("):
            if k + 2 < len(toks) and toks[k + 2] == ("sym", ")"):
                return 0, k + 3
            if k + 3 < len(toks) and toks[k + 2][0] == "num" and toks[k + 3] == ("sym", ")"):
                return int(toks[k + 2][1]), k + 4
            raise unread(k + 1, word(k) or "", "(fsp) or ()")
        return 0, k + 1

    def literal_at(k: int) -> tuple[ColumnDefault, int]:
        if k >= len(toks):
            raise unread(k, "DEFAULT", _LITERAL)
        kind, value = toks[k]
        if (found := now_at(k)) is not None:
            return ColumnDefault("now", fsp=found[0]), found[1]
        if kind == "word" and value == "NULL":
            return ColumnDefault("null"), k + 1
        if kind == "word" and value in ("TRUE", "FALSE"):
            return ColumnDefault("boolean", value), k + 1
        if kind in ("num", "number"):
            return ColumnDefault("number", value.removeprefix("+")), k + 1
        if kind == "str":
            return ColumnDefault("string", _text(value)), k + 1
        if kind == "word" and value.startswith("_") and k + 1 < len(toks) and toks[k + 1][0] == "str":
            return ColumnDefault("string", _text(toks[k + 1][1])), k + 2  # a character set introducer: _utf8mb4'x'
        if kind in ("hex", "bits"):
            return ColumnDefault(kind, value), k + 1
        if (kind, value) == ("sym", "("):  # MySQL 8's (expression) default: a literal in parentheses only
            inner, after = literal_at(k + 1)
            if after < len(toks) and toks[after] == ("sym", ")"):
                return inner, after + 1
            raise DefinitionSyntaxError(f"could not read {text[starts[k]:].strip()[:40]!r} after DEFAULT: an "
                                        "expression default is not made on a sink's table; give a literal value "
                                        "or CURRENT_TIMESTAMP")
        raise unread(k, "DEFAULT", _LITERAL)

    def name_at(k: int, what: str) -> str:
        if word(k) is None:
            raise unread(k, what, "a name")
        return toks[k][1].lower()

    while i < len(toks):
        w = word(i)
        if w == "NULL" or (w == "NOT" and word(i + 1) == "NULL"):
            said = w == "NULL"
            if nullable is not None and nullable != said:
                raise DefinitionSyntaxError(f"both NULL and NOT NULL after the type {head}")
            nullable, i = said, i + (1 if said else 2)
        elif w == "DEFAULT":
            if default is not None:
                raise DefinitionSyntaxError(f"two DEFAULTs after the type {head}")
            default, i = literal_at(i + 1)
        elif w == "ON" and word(i + 1) == "UPDATE":
            found = now_at(i + 2)
            if found is None:
                raise unread(i + 2, "ON UPDATE", "CURRENT_TIMESTAMP[(fsp)]")
            on_update, i = found
        elif w == "COMMENT":
            if i + 1 >= len(toks) or toks[i + 1][0] != "str":
                raise unread(i + 1, "COMMENT", "a quoted text")
            comment, i = _text(toks[i + 1][1]), i + 2
        elif w in ("CHARACTER", "CHARSET") and column_type.base in TEXTS:
            skip = 2 if w == "CHARACTER" and word(i + 1) == "SET" else 1
            charset, i = name_at(i + skip, "CHARACTER SET"), i + skip + 1
        elif w == "COLLATE" and column_type.base in TEXTS:
            collate, i = name_at(i + 1, "COLLATE"), i + 2
        elif w in ("CHARACTER", "CHARSET", "COLLATE"):
            raise DefinitionSyntaxError(f"{w} applies to text columns (CHAR, VARCHAR, TEXT, ENUM, SET), "
                                        f"not to {head}")
        elif w in _NOT_APPLIED:
            i += 2 if w in ("UNIQUE", "PRIMARY") and word(i + 1) == "KEY" else 1
        elif w in ("COLUMN_FORMAT", "STORAGE") and word(i + 1) in ("FIXED", "DYNAMIC", "DEFAULT", "DISK", "MEMORY"):
            i += 2
        elif w in ("ENGINE_ATTRIBUTE", "SECONDARY_ENGINE_ATTRIBUTE"):
            i += 2 if i + 1 < len(toks) and toks[i + 1] == ("sym", "=") else 1
            if i >= len(toks) or toks[i][0] != "str":
                raise unread(i, w, "a quoted text")
            i += 1
        elif w == "SERIAL" and word(i + 1) == "DEFAULT" and word(i + 2) == "VALUE":
            nullable, i = False if nullable is None else nullable, i + 3  # NOT NULL AUTO_INCREMENT UNIQUE
        elif w in _REFUSED:
            raise DefinitionSyntaxError(f"{_REFUSED[w]} (after the type {head})")
        else:
            raise unread(i)
    return ColumnDefinition(replace(column_type, charset=charset, collate=collate), nullable, default, on_update,
                            comment)


def check_definition(defined: ColumnDefinition) -> None:
    """What MySQL refuses in a CREATE TABLE, said before it runs: a DEFAULT or ON UPDATE that does not
    fit the type, NOT NULL with DEFAULT NULL, a comment longer than MySQL keeps."""
    t, default = defined.type, defined.default
    head = t.sql
    temporal = t.base in ("DATETIME", "TIMESTAMP")
    for what, fsp in (("DEFAULT", default.fsp if default is not None and default.kind == "now" else None),
                      ("ON UPDATE", defined.on_update)):
        if fsp is None:
            continue
        if not temporal:
            raise DefinitionSyntaxError(f"{what} CURRENT_TIMESTAMP applies to DATETIME and TIMESTAMP, not to {head}")
        if fsp != t.fsp:
            raise DefinitionSyntaxError(f"{what} {now_sql(fsp)} does not match {head}: MySQL wants the same "
                                        f"fractional digits throughout ({now_sql(t.fsp)})")
    if default is not None and default.kind == "null" and defined.nullable is False:
        raise DefinitionSyntaxError(f"NOT NULL with DEFAULT NULL ({head})")
    if default is not None and default.kind not in ("null", "now"):
        if t.base in _LOB_DEFAULTS:
            raise DefinitionSyntaxError(f"DEFAULT {default.sql}: MySQL takes no literal DEFAULT for a {t.base} column")
        number = default.kind in ("number", "boolean", "bits", "hex") or (
            default.kind == "string" and re.fullmatch(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*", default.value))
        if (t.is_integer or t.base in ("DECIMAL", "FLOAT", "DOUBLE", "BIT", "YEAR")) and not number:
            raise DefinitionSyntaxError(f"DEFAULT {default.sql} does not fit {head}: expected a number")
        if t.base in ("DATE", *TEMPORALS) and (default.kind not in ("string", "number") or not re.fullmatch(
                r"-?[0-9][0-9 :.T-]*", default.value.strip())):
            raise DefinitionSyntaxError(f"DEFAULT {default.sql} is not a {t.base} value")
        if t.base == "ENUM" and default.kind == "string" and default.value not in t.values:
            raise DefinitionSyntaxError(f"DEFAULT {default.sql} is not one of {head}'s values")
        if t.base == "SET" and default.kind == "string" and any(
                m not in t.values for m in default.value.split(",") if default.value):
            raise DefinitionSyntaxError(f"DEFAULT {default.sql} is not a set of {head}'s values")
    if defined.comment is not None and len(defined.comment) > 1024:
        raise DefinitionSyntaxError(f"a column COMMENT holds at most 1024 characters, not {len(defined.comment)}")


def parse_default(text: str) -> ColumnDefault:
    """A DEFAULT value on its own (``0``, ``'text'``, ``NULL``, ``CURRENT_TIMESTAMP(3)`` …), as a
    declared column's ``default`` field has it."""
    return _alone("DEFAULT", text).default  # type: ignore[return-value]


def parse_on_update(text: str) -> int:
    """An ON UPDATE value on its own (``CURRENT_TIMESTAMP(3)``): its fractional digits."""
    return _alone("ON UPDATE", text).on_update  # type: ignore[return-value]


@functools.lru_cache(maxsize=1024)
def _alone(clause: str, text: str) -> ColumnDefinition:
    whole = f"{clause} {text}"
    toks, starts = _definition_tokens(whole)
    found = _attributes(whole, toks, starts, 0, ColumnType("LONGTEXT"))
    alone = ColumnDefinition(ColumnType("LONGTEXT"), default=found.default, on_update=found.on_update)
    if found != alone or (found.default if clause == "DEFAULT" else found.on_update) is None:
        raise DefinitionSyntaxError(f"expected one value, as MySQL writes it after {clause}: "
                                    + (_LITERAL if clause == "DEFAULT" else "CURRENT_TIMESTAMP[(fsp)]"))
    return found
