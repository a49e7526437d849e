"""The provider baselines' ``apply_function_batch``: Debezium messages from the apache-kafka provider's
ConsumeFromTopicOperator, upserted into MySQL. Run by bench/baselines.py through ``airflow dags test``.

Two loops, both what a user of the provider writes, on one reused connection with a commit per batch,
keeping the last change per key within the batch:

* :func:`provider_defaults`: the benchmark's baseline until issue 41, kept so the ratio's history
  stays comparable: batches of 500, ``executemany`` for the upsert and for the deletes, and PyMySQL
  batches only INSERT and REPLACE, so the deletes go one statement per row.
* :func:`provider_careful`: what an engineer who knows the provider writes: batches of 5,000, one
  multi-row ``INSERT … ON DUPLICATE KEY UPDATE`` per batch (PyMySQL's statement limit raised to the
  server's packet size) and one ``DELETE … WHERE id IN (…)``.

Messages are read the plain way: ``json.loads`` of the value, its ``payload`` when the JsonConverter
wrapped it with its schema, and the Connect encodings converted by column (bench/realrows.py names
the columns; the tables are the ones cdcflow writes, so the same final-state check applies). A
tombstone deletes its key. Timing marks go to $BENCH_PROVIDER_STATS so the harness separates the
operator's processing time from Airflow's start-up (and the consumer's start from the first batch).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import struct
import time
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from bench.models import REAL, SMALL, RowModel
from bench.realrows import COLUMNS

DEFAULT_BATCH = 500  # the provider baseline's batches before issue 41 (the operator's own default is 1,000)
CAREFUL_BATCH = 5_000
Row = tuple[Any, ...]
Change = tuple[str, Any, Row | None]  # table, key, row (None: delete)

_conn: Any = None
_stmt_limit = 1_024_000
_first: float | None = None
_operator_start: float | None = None
_count = 0
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)


# -- reading a message ---------------------------------------------------------------------------------
def _convert(kind: str, arg: Any) -> Callable[[Any], Any]:
    """A Connect-encoded value (Debezium's MySQL connector, default modes) -> what PyMySQL binds."""
    if kind == "decimal":
        scale = arg[1]
        return lambda v: Decimal(int.from_bytes(base64.b64decode(v), "big", signed=True)).scaleb(-scale)
    if kind == "bigint_unsigned":  # bigint.unsigned.handling.mode=long wraps above 2^63-1
        return lambda v: v + (1 << 64) if v < 0 else v
    if kind == "binary":
        return base64.b64decode
    if kind == "date":
        return lambda v: _EPOCH_DATE + dt.timedelta(days=v)
    if kind == "time":
        return lambda v: dt.timedelta(microseconds=v)
    if kind == "datetime":
        unit = 1 if arg > 3 else 1000
        return lambda v: _EPOCH + dt.timedelta(microseconds=v * unit)
    if kind == "timestamp":  # the session runs at +00:00
        return lambda v: dt.datetime.fromisoformat(v).astimezone(dt.UTC).replace(tzinfo=None)
    if kind == "bits":
        return lambda v: int.from_bytes(base64.b64decode(v), "little")
    if kind == "point":  # MySQL's internal form: the SRID, then the WKB
        return lambda v: struct.pack("<I", v["srid"] or 0) + base64.b64decode(v["wkb"])
    return lambda v: v


_CONVERTERS = [(name, _convert(kind, arg)) for name, kind, _opt, arg in COLUMNS]


def real_row(after: dict[str, Any]) -> Row:
    return tuple(None if (v := after[name]) is None else f(v) for name, f in _CONVERTERS)


def read_real(msg: Any) -> tuple[Any, Row | None]:
    """(key, row or None) of a real-shaped message: ``{schema, payload}``, or a tombstone."""
    value = msg.value()
    if value is None:
        return json.loads(msg.key())["payload"]["id"], None
    payload = json.loads(value)["payload"]
    if payload["op"] == "d":
        return payload["before"]["id"], None
    after = payload["after"]
    return after["id"], real_row(after)


def read_small(msg: Any) -> tuple[Any, Row | None]:
    """(key, row or None) of bench/workload.py's schemaless envelope."""
    value = json.loads(msg.value())
    if value["op"] == "d":
        return value["before"]["id"], None
    a = value["after"]
    return a["id"], (a["id"], a["customer"], a["status"], a["amount"], a["updated_ms"])


def latest(messages: Iterable[Any], read: Callable[[Any], tuple[Any, Row | None]],
           table_of: Callable[[str], str]) -> dict[str, dict[Any, Row | None]]:
    """The last change per key within the batch, per table: its row, or None for a delete."""
    out: dict[str, dict[Any, Row | None]] = {}
    for msg in messages:
        key, row = read(msg)
        out.setdefault(table_of(msg.topic()), {})[key] = row
    return out


def careful_statements(table: str, changes: dict[Any, Row | None],
                       model: RowModel) -> list[tuple[str, list[Any], bool]]:
    """(SQL, arguments, whether ``executemany``): one multi-row upsert of the rows (PyMySQL's
    ``executemany`` writes one INSERT of them all) and one DELETE … IN of the deleted keys."""
    rows = [row for row in changes.values() if row is not None]
    gone = [key for key, row in changes.items() if row is None]
    out = []
    if rows:
        out.append((model.upsert_sql(table), rows, True))
    if gone:
        out.append((f"DELETE FROM `{table}` WHERE id IN ({', '.join(['%s'] * len(gone))})", gone, False))
    return out


# -- the run -------------------------------------------------------------------------------------------
def _settings() -> tuple[RowModel, Callable[[Any], tuple[Any, Row | None]], Callable[[str], str]]:
    """The rows ($BENCH_PROVIDER_MODEL) and the table ($BENCH_PROVIDER_TABLE, ``{table}``: the topic's last part)."""
    real = os.environ.get("BENCH_PROVIDER_MODEL", "real") == "real"
    template = os.environ["BENCH_PROVIDER_TABLE"]
    return (REAL, read_real, lambda topic: template.format(table=topic.rsplit(".", 1)[-1])) if real else (
        SMALL, read_small, lambda _topic: template)


def _connection() -> Any:
    global _conn, _stmt_limit
    if _conn is None:
        import pymysql

        _conn = pymysql.connect(host="127.0.0.1", port=int(os.environ["CDCFLOW_MYSQL_PORT"]),
                                user=os.environ["CDCFLOW_MYSQL_USER"], password=os.environ["CDCFLOW_MYSQL_PASSWORD"],
                                database=os.environ["CDCFLOW_MYSQL_DATABASE"], charset="utf8mb4", autocommit=False,
                                init_command="SET time_zone = '+00:00'")
        with _conn.cursor() as cur:
            cur.execute("SELECT @@max_allowed_packet")
            _stmt_limit = int(cur.fetchone()[0]) - 64 * 1024  # a batch's upsert in one statement
    return _conn


def operator_started(_context: Any = None) -> None:
    """The operator's ``on_execute_callback``: its start, after Airflow's and before the consumer's (its
    group join and first fetch come before the first batch)."""
    global _operator_start
    _operator_start = time.time()


def _started() -> None:
    global _first
    if _first is None:
        _first = time.time()


def _done(n: int) -> None:
    global _count
    _count += n
    with open(os.environ["BENCH_PROVIDER_STATS"], "w") as fh:
        json.dump({"operator_start": _operator_start, "first_batch_start": _first, "last_batch_end": time.time(),
                   "messages": _count}, fh)


def provider_defaults(messages: list[Any]) -> None:
    _started()
    model, read, table_of = _settings()
    conn = _connection()
    with conn.cursor() as cur:
        for table, changes in latest(messages, read, table_of).items():
            rows = [row for row in changes.values() if row is not None]
            gone = [(key,) for key, row in changes.items() if row is None]
            if rows:
                cur.executemany(model.upsert_sql(table), rows)
            if gone:  # PyMySQL sends one DELETE per row
                cur.executemany(f"DELETE FROM `{table}` WHERE id = %s", gone)
    conn.commit()
    _done(len(messages))


def provider_careful(messages: list[Any]) -> None:
    _started()
    model, read, table_of = _settings()
    conn = _connection()
    with conn.cursor() as cur:
        cur.max_stmt_length = _stmt_limit
        for table, changes in latest(messages, read, table_of).items():
            for sql, args, many in careful_statements(table, changes, model):
                if many:
                    cur.executemany(sql, args)
                else:
                    cur.execute(sql, args)
    conn.commit()
    _done(len(messages))


upsert_batch = provider_defaults  # the name bench/dags/provider_baseline.py used before issue 41
