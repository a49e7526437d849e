"""The real-shaped rows of issue 41: the 33-column table of tests/fixtures/debezium/mysql_all_types.py, one
row per (id, variant), and every form a row takes in the benchmark.

A row is a tuple of the source table's values (the fixture's Python forms: Decimal, date, timedelta,
aware datetime for TIMESTAMP, bytes, the point as ``{x, y, srid}``), derived from a hash of (seed,
variant) alone, so the final state can keep a variant number per key and rebuild its row when it is
checked. Its forms:

* :func:`payload_json`: the row image as Debezium's MySQL connector writes it through the JsonConverter
  (default modes), byte for byte what the fixture's own encoder writes for the same row
  (tests/unit/bench/test_realrows.py), built fast enough for a million events;
* :func:`params`: the values a MySQL client binds (the bare upsert's rows);
* :func:`load_fields`: a LOAD DATA line's fields; :func:`es_doc`: the document cdcflow indexes;
* :func:`row_text`: the canonical text of the checksum, which :data:`MYSQL_CHECKSUM` computes inside
  MySQL and :func:`es_text` from an Elasticsearch document. Floats are compared as exact multiples
  (their values are k/4 and k/1024), temporal values with their microseconds, binary data as hex.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
import zlib
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from tests.fixtures.debezium import mysql_all_types as fx

Row = tuple[Any, ...]
COLUMNS: list[tuple[str, str, bool, Any]] = fx._COLUMNS  # (name, kind, optional, argument), table order
NAMES = [c[0] for c in COLUMNS]
KIND = {c[0]: c[1] for c in COLUMNS}
UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1)
EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
US = dt.timedelta(microseconds=1)
MS = dt.timedelta(milliseconds=1)
NULL_TEXT = "<null>"


def declared_columns() -> list[dict[str, Any]]:
    """The sink's declared columns: the source table's DDL, as the fixture writes it."""
    out: list[dict[str, Any]] = []
    for line in fx.DDL.splitlines()[1:]:
        line = line.strip().rstrip(",")
        if not line or line.startswith(("PRIMARY KEY", ")")):
            continue
        name, rest = line.split(None, 1)
        sql_type = rest.split(" NOT NULL")[0].removesuffix(" NULL").strip()
        out.append({"name": name, "type": sql_type, **({"nullable": False} if "NOT NULL" in rest else {})})
    assert [c["name"] for c in out] == NAMES, "the fixture's DDL and its columns disagree"
    return out


DECLARED = declared_columns()

# -- the values -------------------------------------------------------------------------------------------
_M64 = (1 << 64) - 1
_TEXT = ("Änderungen der Tabelle\tstehen im Binlog; 東京の注文は出荷済み。\nOrder lines: 3 × widget, "
         "2 × gadget — total incl. VAT.\nΚαλημέρα κόσμε; Привет, мир! ¿Qué tal? Ça va.\t"
         "The quick brown fox jumps over the lazy dog, again and again.\n") * 8
_BLOB = bytes(range(256)) * 2
_ENUM = ("small", "medium", "large")
_SET = ("red", "green", "blue")
_TAGS = ("[]", '["a"]', '["a","b"]')
_BOOL = ("false", "true")


def _mix(x: int) -> int:
    """splitmix64: 64 well-mixed bits from any integer."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def row(key: int, variant: int, seed: int = 42) -> Row:
    """The row of id ``key`` written by change number ``variant``; about one value in 16 is NULL."""
    h0 = _mix((seed << 40) ^ variant)
    h1, h2, h3, h4, h5 = (h := _mix(h0)), (h := _mix(h)), (h := _mix(h)), (h := _mix(h)), _mix(h)
    nulls = h5 & _mix(h5) & _mix(h4) & _mix(h3)  # a bit per column, each set with probability 1/16
    fsec = 1 + h4 % 2_147_483_000  # TIMESTAMP's range: 1970-01-01 00:00:01 to 2038-01-19
    text_start = h2 % 1000
    values: list[Any] = [
        key,
        (h0 & 0xFF) - 128,
        (h0 >> 8) & 1,
        bool((h0 >> 9) & 1),
        ((h0 >> 10) & 0xFFFF) - 32768,
        ((h0 >> 26) & 0xFFFFFF) - 8_388_608,
        h1 - (1 << 63),
        h2 >> 1,  # BIGINT UNSIGNED below 2^63: the same number in every bigint.unsigned.handling.mode
        ((h5 >> 20) % 262_143 - 131_071) / 4 or 0.25,  # FLOAT: k/4, exact in 32 bits and in its shortest text
        (1 - 2 * ((h3 >> 40) & 1)) * ((h3 & 0x1_FFFF_FFFF) + 1024) / 1024,  # DOUBLE: k/1024 below 10^7
        Decimal(h4 % 19_999_999_999 - 9_999_999_999).scaleb(-2),  # DECIMAL(10,2)
        "".join(chr(97 + (h4 >> s) % 26) for s in (0, 5, 10)),
        f"customer {variant % 100_000:05d} · Grüße, 東京" + (" 🚀" if h1 & 1 else ""),
        _TEXT[text_start:text_start + 64 + h4 % 256],
        (h1 & 0xFFFF_FFFF).to_bytes(4, "big"),
        _BLOB[h3 % 256:h3 % 256 + (h2 >> 3) % 17],
        _BLOB[h5 % 256:h5 % 256 + 16 + h0 % 185],
        dt.date.fromordinal(EPOCH_ORDINAL - 7300 + h5 % 36_500),
        dt.timedelta(seconds=h0 % 86_400),
        dt.timedelta(milliseconds=h1 % 86_400_000),
        dt.timedelta(microseconds=h2 % 86_400_000_000),
        EPOCH + dt.timedelta(seconds=(h3 >> 20) % 6_311_520_000 - 1_577_880_000),  # 1920-2120
        EPOCH + dt.timedelta(milliseconds=(h4 >> 10) % 6_311_520_000_000 - 1_577_880_000_000),
        EPOCH + dt.timedelta(microseconds=(h5 >> 4) % 6_311_520_000_000_000 - 1_577_880_000_000_000),
        dt.datetime.fromtimestamp(fsec, UTC),
        dt.datetime.fromtimestamp(fsec, UTC).replace(microsecond=(h5 % 1000) * 1000),
        1901 + h0 % 255,
        _ENUM[h1 % 3],
        ",".join(m for i, m in enumerate(_SET) if (h2 >> (20 + i)) & 1),
        bool(h3 & 1),
        h4 & 0x3FF,
        # JSON as the connector sends it: compact, keys in MySQL's order (by length, then bytes)
        (f'{{"id":{key},"qty":{h0 % 50},"name":"item {variant % 997} – Grüße","tags":{_TAGS[h1 % 3]},'
         f'"price":{(h5 % 400_000 + 1) / 4!r},"active":{_BOOL[h2 & 2 != 0]}}}'),
        {"x": (2 * ((h0 >> 30) % 1440) - 1439) / 8, "y": (2 * ((h1 >> 30) % 720) - 719) / 8,
         "srid": 4326 if (h2 >> 60) & 1 else 0},
    ]
    for i, (_name, _kind, optional, _arg) in enumerate(COLUMNS):
        if optional and (nulls >> i) & 1:
            values[i] = None
    return tuple(values)


# -- Connect JSON, as the JsonConverter writes it (fixture: _column_value, then _dump) -------------------------
def _b64(data: bytes) -> str:
    return '"' + base64.b64encode(data).decode("ascii") + '"'


def _decimal_b64(value: Decimal, scale: int) -> str:
    unscaled = int(value.scaleb(scale))
    width = (unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()) // 8 + 1
    return _b64(unscaled.to_bytes(width, "big", signed=True))


def _zoned(fsp: int) -> Callable[[dt.datetime], str]:
    def text(v: dt.datetime) -> str:
        base = v.astimezone(UTC).isoformat()[:19]
        if fsp:
            return f'"{base}.{v.microsecond:06d}'[: len(base) + 2 + fsp] + 'Z"'
        return f'"{base}.{v.microsecond:06d}'.rstrip("0").rstrip(".") + 'Z"'
    return text


_WKB_POINT = b"\x01" + struct.pack("<I", 1)  # little-endian WKB, type 1 (Point)


def _point_json(p: Mapping[str, Any]) -> str:
    x, y = p["x"], p["y"]
    wkb = _b64(_WKB_POINT + struct.pack("<dd", x, y))
    return f'{{"x":{x!r},"y":{y!r},"wkb":{wkb},"srid":{p["srid"] or "null"}}}'


# json.dumps(v, ensure_ascii=False) of a string, without json.dumps's own overhead
_text_json: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]


def _encoder(kind: str, arg: Any) -> Callable[[Any], str]:
    """The JSON text of one column's value (valid for the values :func:`row` makes: floats whose
    shortest text is their plain decimal, BINARY(4) values of 4 bytes)."""
    if kind in ("int", "tinyint", "smallint", "mediumint", "bigint", "year"):
        return str
    if kind == "bigint_unsigned":  # bigint.unsigned.handling.mode=long: above 2^63-1 it wraps
        return lambda v: str(v - (1 << 64) if v >= 1 << 63 else v)
    if kind in ("boolean", "bit1"):
        return lambda v: "true" if v else "false"
    if kind in ("float", "double"):
        return repr
    if kind == "decimal":
        return lambda v: _decimal_b64(v, arg[1])
    if kind in ("string", "enum", "set", "json"):
        return _text_json
    if kind == "binary":
        return _b64
    if kind == "date":
        return lambda v: str(v.toordinal() - EPOCH_ORDINAL)
    if kind == "time":  # adaptive_time_microseconds: every TIME in µs
        return lambda v: str(v // US)
    if kind == "datetime":  # DATETIME(0-3) in ms, DATETIME(4-6) in µs
        unit = US if arg > 3 else MS
        return lambda v: str((v - EPOCH) // unit)
    if kind == "timestamp":
        return _zoned(arg)
    if kind == "bits":
        width = arg // 8 + (1 if arg % 8 else 0)
        return lambda v: _b64(v.to_bytes(width, "little"))
    if kind == "point":
        return _point_json
    raise ValueError(kind)


_PREFIXES = [f'"{name}":' for name in NAMES]
_ENCODERS = [_encoder(kind, arg) for _n, kind, _o, arg in COLUMNS]


def payload_json(values: Row) -> str:
    """The row image in the change event's payload (``before`` or ``after``)."""
    return "{" + ",".join(p + ("null" if v is None else e(v))
                          for p, e, v in zip(_PREFIXES, _ENCODERS, values, strict=True)) + "}"


# -- MySQL -----------------------------------------------------------------------------------------------
def _point_bytes(p: Mapping[str, Any]) -> bytes:
    """MySQL's internal form of a point: the SRID (4 bytes, little-endian), then the WKB."""
    return struct.pack("<I", p["srid"] or 0) + _WKB_POINT + struct.pack("<dd", p["x"], p["y"])


def _param(kind: str) -> Callable[[Any], Any]:
    if kind in ("boolean", "bit1"):
        return int
    if kind == "timestamp":  # the session runs at +00:00
        return lambda v: v.astimezone(UTC).replace(tzinfo=None)
    if kind == "point":
        return _point_bytes
    return lambda v: v


_PARAMS = [_param(kind) for _n, kind, _o, _a in COLUMNS]


def params(values: Row) -> Row:
    """The values a MySQL client binds for the row (a session at time_zone +00:00)."""
    return tuple(None if v is None else f(v) for f, v in zip(_PARAMS, values, strict=True))


def ddl(table: str) -> str:
    """The table the baselines write: cdcflow's declared columns (without its version column)."""
    cols = [f"`{c['name']}` {c['type']} {'NOT NULL' if c['name'] == 'id' or c.get('nullable') is False else 'NULL'}"
            for c in DECLARED]
    return f"CREATE TABLE `{table}` ({', '.join(cols)}, PRIMARY KEY (id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"


def upsert_sql(table: str) -> str:
    cols = ", ".join(f"`{n}`" for n in NAMES)
    update = ", ".join(f"`{n}` = VALUES(`{n}`)" for n in NAMES[1:])
    return (f"INSERT INTO `{table}` ({cols}) VALUES ({', '.join(['%s'] * len(NAMES))}) "
            f"ON DUPLICATE KEY UPDATE {update}")


def _load_escape(text: str) -> str:
    return (text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
            .replace("\0", "\\0"))


_HEXED = {"binary", "point"}  # loaded through UNHEX: a file of text


def load_columns(table: str, path: str) -> str:
    """LOAD DATA of :func:`load_fields` lines: binary data as hex, BIT(n) as its number."""
    targets, sets = [], []
    for name, kind, _o, _a in COLUMNS:
        if kind in _HEXED or kind in ("bits", "bit1"):  # LOAD DATA would read a BIT's digits as bytes
            targets.append(f"@{name}")
            sets.append(f"`{name}` = UNHEX(@{name})" if kind in _HEXED else f"`{name}` = CAST(@{name} AS UNSIGNED)")
        else:
            targets.append(f"`{name}`")
    return (f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE `{table}` CHARACTER SET utf8mb4 ({', '.join(targets)}) "
            f"SET {', '.join(sets)}")


def load_fields(values: Row) -> str:
    out = []
    for (_n, kind, _o, _a), v in zip(COLUMNS, params(values), strict=True):
        if v is None:
            out.append("\\N")
        elif isinstance(v, bytes):
            out.append(v.hex())
        elif isinstance(v, str):
            out.append(_load_escape(v))
        elif kind in ("time",):
            out.append(time_text(v))
        else:
            out.append(str(v))
    return "\t".join(out)


# -- the canonical text of the checksums -----------------------------------------------------------------
def time_text(v: dt.timedelta) -> str:
    micros = v // US
    seconds, frac = divmod(micros, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{frac:06d}"


def _canonical(kind: str, arg: Any) -> tuple[str, Callable[[Any], str]]:
    """(MySQL expression of column ``{c}``, the same text from the row's value)."""
    if kind in ("boolean", "bit1", "bits"):  # BIT(1) or TINYINT(1), BIT(10): as numbers
        return "{c}+0", lambda v: str(int(v))
    if kind == "float":
        return "CAST({c}*4 AS SIGNED)", lambda v: str(int(v * 4))
    if kind == "double":
        return "CAST({c}*1024 AS SIGNED)", lambda v: str(int(v * 1024))
    if kind == "decimal":
        return "{c}", lambda v: format(v, "f")
    if kind == "binary":
        return "HEX({c})", lambda v: v.hex().upper()
    if kind == "point":
        return "HEX({c})", lambda v: _point_bytes(v).hex().upper()
    if kind == "date":
        return "{c}", lambda v: v.isoformat()
    if kind == "time":
        return "TIME_FORMAT({c}, '%H:%i:%s.%f')", time_text
    if kind == "datetime":
        return "DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s.%f')", lambda v: v.isoformat(sep=" ", timespec="microseconds")
    if kind == "timestamp":  # read at time_zone +00:00
        return ("DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s.%f')",
                lambda v: v.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds"))
    return "{c}", str  # integers, strings, ENUM, SET, JSON (the text the connector sent)


_CANON = [_canonical(kind, arg) for _n, kind, _o, arg in COLUMNS]
MYSQL_CHECKSUM = ("SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', "
                  + ", ".join(f"IFNULL({sql.format(c=f'`{n}`')}, '{NULL_TEXT}')" for n, (sql, _f) in zip(NAMES, _CANON))
                  + "))), 0) FROM `{table}`").replace("%", "%%")
"""Row count and the sum of each row's CRC32 of :func:`row_text` (run with time_zone +00:00; ``%``
doubled for a DB-API ``execute``)."""


def row_text(values: Row) -> str:
    return "|".join(NULL_TEXT if v is None else f(v) for (_s, f), v in zip(_CANON, values, strict=True))


def checksum(rows: list[Row]) -> tuple[int, int]:
    return len(rows), sum(zlib.crc32(row_text(r).encode()) for r in rows)


# -- Elasticsearch ---------------------------------------------------------------------------------------
def _doc_value(kind: str, v: Any) -> Any:
    """What cdcflow puts in the document (docs/types.md, "Elasticsearch gets")."""
    if kind in ("boolean", "bit1"):
        return bool(v)
    if kind in ("binary",):
        return base64.b64encode(v).decode("ascii")
    if kind == "decimal":
        return v
    if kind == "date":
        return v.isoformat()
    if kind == "time":
        return time_text(v)
    if kind == "datetime":
        return v.isoformat(timespec="microseconds")
    if kind == "timestamp":
        return v.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    if kind == "point":
        wkb = _WKB_POINT + struct.pack("<dd", v["x"], v["y"])
        return {"x": v["x"], "y": v["y"], "wkb": base64.b64encode(wkb).decode("ascii"), "srid": v["srid"] or None}
    return v


def es_doc(values: Row) -> dict[str, Any]:
    """The row's document (its Decimal stays a Decimal: encode it as an exact JSON number)."""
    return {n: None if v is None else _doc_value(KIND[n], v) for n, v in zip(NAMES, values, strict=True)}


def _es_canonical(kind: str, arg: Any) -> Callable[[Any], str]:
    """The canonical text of a document's value, as Elasticsearch returns it in _source."""
    if kind in ("boolean", "bit1"):
        return lambda v: "1" if v else "0"
    if kind == "float":
        return lambda v: str(round(v * 4))
    if kind == "double":
        return lambda v: str(round(v * 1024))
    if kind == "decimal":
        quantum = Decimal(1).scaleb(-arg[1])
        return lambda v: format(Decimal(str(v)).quantize(quantum), "f")
    if kind == "binary":
        return lambda v: base64.b64decode(v).hex().upper()
    if kind == "point":
        return lambda v: (struct.pack("<I", v.get("srid") or 0) + base64.b64decode(v["wkb"])).hex().upper()
    if kind in ("datetime",):
        return lambda v: v.replace("T", " ")
    if kind == "timestamp":
        return lambda v: v.removesuffix("Z").replace("T", " ")
    return lambda v: str(int(v)) if isinstance(v, int | float) else str(v)


_ES_CANON = [_es_canonical(kind, arg) for _n, kind, _o, arg in COLUMNS]


def es_text(doc: Mapping[str, Any]) -> str:
    """:func:`row_text` of the row a document holds (a field left out of it is NULL)."""
    return "|".join(NULL_TEXT if (v := doc.get(n)) is None else f(v) for n, f in zip(NAMES, _ES_CANON, strict=True))
