"""The provider baselines' loops (bench/provider_fns.py), without a server: PyMySQL's own cursor on a
connection that is never opened records the statements it would send. The careful loop keeps the
last change per key of a batch and sends one multi-row upsert and one DELETE … IN per table; the
provider's defaults send the upsert and one DELETE per row. Both read the real-shaped events back to
the values the bare upsert binds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pymysql
import pymysql.cursors
import pytest

from bench import provider_fns, realrows, shapes


class Message:
    """What ConsumeFromTopicOperator hands apply_function_batch: confluent-kafka's Message."""

    def __init__(self, topic: str, key: bytes, value: bytes | None) -> None:
        self._topic, self._key, self._value = topic, key, value

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value


class Recorded(pymysql.cursors.Cursor):
    sent: ClassVar[list[str]] = []

    def _query(self, q: str | bytearray) -> int:
        Recorded.sent.append(q.decode(errors="surrogateescape") if isinstance(q, bytearray) else q)  # as executemany sends it
        self._rows = ()
        return 1


class Offline:
    """A PyMySQL connection never opened, whose cursors record their SQL."""

    def __init__(self) -> None:
        self.conn = pymysql.connect(defer_connect=True, charset="utf8mb4")
        self.conn.server_status = 0
        self.commits = 0

    def cursor(self) -> Recorded:
        return Recorded(self.conn)

    def commit(self) -> None:
        self.commits += 1


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Offline]:
    conn = Offline()
    Recorded.sent = []
    monkeypatch.setattr(provider_fns, "_conn", conn)
    monkeypatch.setattr(provider_fns, "_stmt_limit", 16 * 1024 * 1024 - 64 * 1024)
    monkeypatch.setattr(provider_fns, "_first", None)
    monkeypatch.setattr(provider_fns, "_count", 0)
    monkeypatch.setenv("BENCH_PROVIDER_MODEL", "real")
    monkeypatch.setenv("BENCH_PROVIDER_TABLE", "bench_provider_{table}")
    monkeypatch.setenv("BENCH_PROVIDER_STATS", str(tmp_path / "stats.json"))
    yield conn


def batch(events: int = 3_000, keys: int = 400, tables: int = 1) -> tuple[list[Message], shapes.RealShape]:
    shape = shapes.RealShape(events, keys, seed=4, tables=tables)
    return [Message(*m) for m in shape.messages("p")], shape


def test_latest_keeps_the_last_change_per_key() -> None:
    messages, shape = batch()
    got = provider_fns.latest(messages, provider_fns.read_real, lambda topic: topic.rsplit(".", 1)[-1])
    last: dict[int, tuple[str, int]] = {}
    for op, _t, key, variant in shape.changes():
        last[key] = (op, variant)
    assert list(got) == ["all_types"] and set(got["all_types"]) == set(last)
    for key, row in got["all_types"].items():
        op, variant = last[key]
        if op in ("d", "tombstone"):
            assert row is None
        else:  # the values the bare upsert binds for the same row
            assert row == realrows.params(realrows.row(key, variant, 4))


def test_careful_loop_sends_one_upsert_and_one_delete_in_per_table(offline: Offline) -> None:
    messages, _shape = batch(events=3_000, keys=2_000, tables=2)
    provider_fns.provider_careful(messages)
    final = provider_fns.latest(messages, provider_fns.read_real, lambda topic: topic.rsplit(".", 1)[-1])
    assert offline.commits == 1 and len(Recorded.sent) == 4  # per table: one INSERT, one DELETE
    for table in ("t00", "t01"):
        inserts = [q for q in Recorded.sent if q.startswith(f"INSERT INTO `bench_provider_{table}`")]
        deletes = [q for q in Recorded.sent if q.startswith(f"DELETE FROM `bench_provider_{table}`")]
        assert len(inserts) == 1 and len(deletes) == 1
        upserted = sum(1 for row in final[table].values() if row is not None)
        assert inserts[0].count("),(") == upserted - 1  # one multi-row statement of every surviving row
        gone = sorted(k for k, row in final[table].items() if row is None)
        head = f"DELETE FROM `bench_provider_{table}` WHERE id IN ("
        assert gone and deletes[0].startswith(head) and deletes[0].endswith(")")
        assert sorted(int(k) for k in deletes[0][len(head):-1].split(", ")) == gone
    stats = json.loads(Path(provider_fns.os.environ["BENCH_PROVIDER_STATS"]).read_text())
    assert stats["messages"] == 3_000 and stats["last_batch_end"] >= stats["first_batch_start"]


def test_careful_statements_for_a_batch() -> None:
    rows = {1: ("a",), 2: None, 3: ("c",), 4: None}
    statements = provider_fns.careful_statements("t", rows, provider_fns.SMALL)  # type: ignore[arg-type]
    assert [(sql.split(" ")[0], args, many) for sql, args, many in statements] == [
        ("INSERT", [("a",), ("c",)], True), ("DELETE", [2, 4], False)]
    assert statements[1][0] == "DELETE FROM `t` WHERE id IN (%s, %s)"
    assert provider_fns.careful_statements("t", {5: ("e",)}, provider_fns.SMALL)[0][2]  # no DELETE without deletes


def test_provider_defaults_deletes_row_by_row(offline: Offline) -> None:
    messages, _shape = batch(events=500, keys=60)
    provider_fns.provider_defaults(messages)
    final = provider_fns.latest(messages, provider_fns.read_real, lambda topic: "x")["x"]
    deletes = [q for q in Recorded.sent if q.startswith("DELETE")]
    assert len(deletes) == sum(1 for row in final.values() if row is None) > 1
    assert all(" WHERE id = " in q for q in deletes)
    assert len([q for q in Recorded.sent if q.startswith("INSERT")]) == 1 and offline.commits == 1


def test_the_small_events_too(monkeypatch: pytest.MonkeyPatch, offline: Offline) -> None:
    monkeypatch.setenv("BENCH_PROVIDER_MODEL", "small")
    monkeypatch.setenv("BENCH_PROVIDER_TABLE", "bench_provider")
    shape = shapes.make("small", 2_000, 300, 2)
    messages = [Message(*m) for m in shape.messages("s")]
    provider_fns.provider_careful(messages)
    assert [q.split(" ")[0] for q in Recorded.sent] == ["INSERT", "DELETE"]
    final = provider_fns.latest(messages, provider_fns.read_small, lambda _t: "x")["x"]
    state: dict[int, Any] = {}
    for key, value in ((json.loads(m.key())["id"], json.loads(m.value() or b"{}")) for m in messages):
        state[key] = None if value["op"] == "d" else value["after"]["customer"]
    assert {k: (r[1] if r else None) for k, r in final.items()} == state
