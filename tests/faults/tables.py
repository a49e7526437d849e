"""The fault campaign's history table (``mode: history``, ``track_history: [status]``) and soft-delete
table (``delete: soft``), and their checks against what the produced events alone say (issue 44).

The expected tables are written here from the events, by the rules docs/history.md and
docs/soft-deletes.md state, not by cdcflow's code: per key, in source-time order (cdcgen's events are
10 ms apart), a snapshot read opens an ``r`` version; a create or update opens a version (``c``
after nothing or a delete, else ``u``) or, when its status equals the current version's, updates it
in place; a delete opens a ``d`` version with its before image; each version is valid until the
next one starts.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

HISTORY_TRACKED = "status"
# wider than the state table's VARCHAR(32): the campaign's over-long customer is one MySQL accepts
# here, so each poison record still reaches the DLQ once (from the state table's sink)
COLUMNS = [{"name": "id", "type": "BIGINT"}, {"name": "customer", "type": "VARCHAR(64)"},
           {"name": "status", "type": "VARCHAR(16)"}, {"name": "amount", "type": "DECIMAL(10,2)"},
           {"name": "updated_at", "type": "BIGINT", "field": "updated_ms"}]
Found = Callable[[str, Any, str], None]  # (kind, key, note): harness._found bound to an outcome


def sinks(table: str) -> list[dict[str, Any]]:
    common = {"type": "mysql", "conn_id": "cdcflow_mysql", "create_table": True, "primary_key": ["id"],
              "columns": COLUMNS, "set_rows": 100}
    return [{**common, "name": "history", "table": f"{table}_h", "mode": "history",
             "track_history": [HISTORY_TRACKED]},
            {**common, "name": "soft", "table": f"{table}_s", "delete": "soft"}]


def _at(ms: int | None) -> dt.datetime | None:
    return None if ms is None else dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ms)


def _changes(events: list[Any]) -> dict[int, list[tuple[int, str, dict[str, Any]]]]:
    """Per key, (source ms, op, image) of each change MySQL takes, in source-time order: the valid
    changes and the over-long row (the history and soft tables take it), not the tombstones."""
    out: dict[int, list[tuple[int, str, dict[str, Any]]]] = {}
    for e in events:
        if not e.value or e.kind not in ("change", "broken:long"):
            continue
        doc = json.loads(e.value)
        doc = doc["payload"] if "schema" in doc else doc
        image = doc["before"] if doc["op"] == "d" else doc["after"]
        out.setdefault(image["id"], []).append((doc["source"]["ts_ms"], doc["op"], image))
    return {k: sorted(v, key=lambda c: c[0]) for k, v in out.items()}


def _values(image: dict[str, Any]) -> tuple[Any, ...]:
    return image["customer"], image["status"], f"{float(image['amount']):.2f}", image["updated_ms"]


def expected_history(events: list[Any]) -> dict[int, list[tuple[Any, ...]]]:
    """Per key: (values, valid_from, valid_to, current, op) of each version."""
    out = {}
    for key, changes in _changes(events).items():
        rows: list[list[Any]] = []  # [values, start ms, op]
        for ms, op, image in changes:
            live = bool(rows) and rows[-1][2] != "d"
            if op == "d":
                if live or not rows:
                    rows.append([_values(image), ms, "d"])
            elif op == "r":  # a snapshot read opens a version of its own
                rows.append([_values(image), ms, "r"])
            elif live and image[HISTORY_TRACKED] == rows[-1][0][1]:
                rows[-1][0] = _values(image)  # in place
            else:
                rows.append([_values(image), ms, "u" if live else "c"])
        out[key] = [(values, _at(start), _at(rows[i + 1][1]) if i + 1 < len(rows) else None,
                     int(i + 1 == len(rows) and op != "d"), op) for i, (values, start, op) in enumerate(rows)]
    return out


def expected_soft(events: list[Any]) -> dict[int, tuple[Any, ...]]:
    """Per key: (values, deleted_at): the last upsert's values, and the delete's time if a delete came last."""
    out: dict[int, tuple[Any, ...]] = {}
    for key, changes in _changes(events).items():
        values, deleted = None, None
        for ms, op, image in changes:
            if op == "d":
                deleted = _at(ms) if values is not None else deleted
            else:
                values, deleted = _values(image), None
        if values is not None:
            out[key] = (values, deleted)
    return out


def check(conn: Any, table: str, events: list[Any], found: Found) -> None:
    """The history and soft tables against the events: a version or row missing is ``lost``, one too
    many ``duplicated``, one with other values or another interval ``regressed``."""
    got: dict[int, list[tuple[Any, ...]]] = {}
    for r in conn.exec_driver_sql(
            "SELECT id, customer, status, amount, updated_at, __valid_from, __valid_to, __current, __op "
            f"FROM `{table}_h` ORDER BY id, __version"):
        got.setdefault(r[0], []).append(((r[1], r[2], f"{float(r[3]):.2f}", int(r[4])), *r[5:]))
    for key, want in expected_history(events).items():
        have = got.pop(key, [])
        if len(have) < len(want):
            found("lost", ("history", key, len(want)), f"history: {key} has {len(have)} versions, expected {want}")
        elif len(have) > len(want):
            found("duplicated", ("history", key, len(want)), f"history: {key} has {have}, expected {want}")
        elif have != want:
            found("regressed", ("history", key, len(want)), f"history: {key} has {have}, expected {want}")
    for key in got:
        found("duplicated", ("history", key, "extra"), f"history: {key} should have no version")
    soft = {r[0]: ((r[1], r[2], f"{float(r[3]):.2f}", int(r[4])), r[5]) for r in conn.exec_driver_sql(
        f"SELECT id, customer, status, amount, updated_at, __deleted_at FROM `{table}_s`")}
    for key, want_row in expected_soft(events).items():
        if key not in soft:
            found("lost", ("soft", key, "lost"), f"soft: {key} lost")
        elif soft.pop(key) != want_row:
            found("regressed", ("soft", key, want_row), f"soft: {key} is not {want_row}")
    for key in soft:
        found("duplicated", ("soft", key, "extra"), f"soft: {key} should not exist")
