"""The provider baseline's apply_function_batch: upsert a batch of Debezium messages into MySQL.

What a user of the apache-kafka provider would write: parse each message, keep the last change per
key in the batch, then one multi-row INSERT … ON DUPLICATE KEY UPDATE and one DELETE per batch, on
one reused connection. Timing marks go to $BENCH_PROVIDER_STATS so the harness can separate the
operator's processing time from Airflow's start-up.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pymysql

_conn: Any = None
_first: float | None = None
_count = 0

UPSERT = ("INSERT INTO `{t}` (id, customer, status, amount, updated_at) VALUES (%s, %s, %s, %s, %s) "
          "ON DUPLICATE KEY UPDATE customer = VALUES(customer), status = VALUES(status), amount = VALUES(amount), "
          "updated_at = VALUES(updated_at)")


def _connection() -> Any:
    global _conn
    if _conn is None:
        _conn = pymysql.connect(host="127.0.0.1", port=int(os.environ["CDCFLOW_MYSQL_PORT"]),
                                user=os.environ["CDCFLOW_MYSQL_USER"], password=os.environ["CDCFLOW_MYSQL_PASSWORD"],
                                database=os.environ["CDCFLOW_MYSQL_DATABASE"], autocommit=False)
    return _conn


def upsert_batch(messages: list[Any]) -> None:
    global _first, _count
    if _first is None:
        _first = time.time()
    table = os.environ["BENCH_PROVIDER_TABLE"]
    latest: dict[int, tuple[str, Any]] = {}
    for msg in messages:
        value = json.loads(msg.value())
        if value["op"] == "d":
            latest[value["before"]["id"]] = ("d", None)
        else:
            a = value["after"]
            latest[a["id"]] = ("u", (a["id"], a["customer"], a["status"], a["amount"], a["updated_ms"]))
    conn = _connection()
    with conn.cursor() as cur:
        rows = [row for op, row in latest.values() if op == "u"]
        gone = [(k,) for k, (op, _r) in latest.items() if op == "d"]
        if rows:
            cur.executemany(UPSERT.format(t=table), rows)
        if gone:
            cur.executemany(f"DELETE FROM `{table}` WHERE id = %s", gone)
    conn.commit()
    _count += len(messages)
    with open(os.environ["BENCH_PROVIDER_STATS"], "w") as fh:
        json.dump({"first_batch_start": _first, "last_batch_end": time.time(), "messages": _count}, fh)
