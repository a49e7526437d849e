"""The benchmark's workload shapes (issue 41): the change streams a run produces and the state they imply.

* ``debezium`` (the default): real-shaped events. Debezium's MySQL connector through the JsonConverter
  with schemas (``{schema, payload}``), the 33-column table of tests/fixtures/debezium/mysql_all_types.py
  (bench/realrows.py), ~9-11 KB per event; creates, updates (with their before image) and deletes,
  each delete followed by its tombstone; one topic of 3 partitions keyed by id.
* ``small``: bench/workload.py's schemaless orders events (~405 bytes, 5 columns), as before.
* ``tables50``: the real-shaped rows spread over 50 tables, one topic each (1 partition), read under
  one ``topics_regex`` and routed by ``{source.table}``.

A stream is fixed by (events, keys, seed). ``events`` counts Kafka messages, tombstones included. The
final state is computed from the same sequence of changes that the messages encode, and kept small:
per table, id -> the variant of its row (bench/realrows.row rebuilds it), or the small row itself.
The event bytes are the fixture's own encoding: its schema JSON written once per table, its source
block and key as templates; each row image is spliced in (tests/unit/bench/test_shapes.py compares
them with the fixture's encoder and decodes them with cdcflow's Debezium decoder).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bench import realrows
from bench.models import REAL, SMALL, RowModel
from bench.workload import Workload
from tests.fixtures.debezium import mysql_all_types as fx

SHAPES = ("debezium", "small", "tables50")
DEFAULT_SHAPE = "debezium"
Message = tuple[str, bytes, bytes | None]  # topic, key, value (None: a tombstone)
DELETE_SHARE = 0.05  # of the changes to a live row; ~95% of the keys are live at the end, as in the small shape
# source.ts_ms has second resolution (GTIDs off, see the fixture): 1,000 changes a second. cdcflow orders the
# changes of one second by their offsets (a source_ts_ms version keeps an offset's low 20 bits), which holds
# within a partition of fewer than 2^20 records: up to ~3M events on 3 partitions.
EVENTS_PER_SECOND = 1000
BASE_SECONDS = 1_717_236_000  # 2024-06-01T10:00:00Z, the fixture's first change
MODES = {"time": "adaptive_time_microseconds", "decimal": "precise", "binary": "bytes", "bigint": "long"}


def source_template(server: str, table: str) -> str:
    """The fixture's source block (``_source``) for ``server``/``table``, with %-fields for the change's
    seconds, µs, ns and binlog position."""
    seconds, pos = 987_654_321, 123_456_789  # marks, replaced below
    text = fx._dump({**fx._source(seconds, pos), "name": server, "table": table})
    for field, value, mark in (("ts_ms", seconds * 1000, "%(ms)d"), ("ts_us", seconds * 10**6, "%(us)d"),
                               ("ts_ns", seconds * 10**9, "%(ns)d"), ("pos", pos, "%(pos)d")):
        token = f'"{field}":{value},'
        assert text.count(token) == 1, token
        text = text.replace(token, f'"{field}":{mark},')
    return text


@dataclass(frozen=True)
class _Topic:
    """What every message of one table's topic shares."""

    name: str
    head: bytes  # {"schema":<the envelope's schema>,"payload":
    key_head: bytes  # {"schema":<the key's schema>,"payload":{"id":
    source: str


class SmallShape:
    """bench/workload.py's stream, on one topic of 3 partitions."""

    name, model, partitions, window, routed = "small", SMALL, 3, 250_000, False

    def __init__(self, events: int, keys: int, seed: int) -> None:
        self.events, self.keys, self.seed = events, keys, seed
        self._workload = Workload(events, keys, seed)

    def topics(self, tag: str) -> list[str]:
        return [f"bench.orders.{tag}"]

    def tables(self) -> list[str]:
        return ["orders"]

    def source(self, tag: str) -> dict[str, Any]:
        return {"topics": self.topics(tag)}

    def messages(self, tag: str) -> Iterator[Message]:
        topic = self.topics(tag)[0]
        for key, value, *_ in self._workload.stream():
            yield topic, key, value

    def final_state(self) -> dict[str, dict[int, Any]]:
        return {"orders": dict(self._workload.final_state())}

    def rows(self, stored: dict[int, Any]) -> list[tuple[Any, ...]]:
        return list(stored.values())

    def mix(self) -> str:
        return "70% c / 25% u / 5% d, no tombstones"


class RealShape:
    """Real-shaped events over ``tables`` tables (``debezium``: 1, ``tables50``: 50)."""

    model: RowModel = REAL
    window = 50_000  # ~0.5 GB of events a window (the small shape's 250k windows are ~0.1 GB)

    def __init__(self, events: int, keys: int, seed: int, tables: int = 1) -> None:
        self.events, self.keys, self.seed, self.ntables = events, keys, seed, tables
        self.routed = tables > 1
        self.name = "debezium" if tables == 1 else f"tables{tables}"
        self.partitions = 3 if tables == 1 else 1

    def tables(self) -> list[str]:
        return [fx.TABLE] if not self.routed else [f"t{i:02d}" for i in range(self.ntables)]

    @staticmethod
    def server(tag: str) -> str:
        return f"bench-{tag}"  # the connector's topic.prefix

    def topics(self, tag: str) -> list[str]:
        return [f"{self.server(tag)}.{fx.DATABASE}.{t}" for t in self.tables()]

    def source(self, tag: str) -> dict[str, Any]:
        if not self.routed:
            return {"topics": self.topics(tag)}
        return {"topics_regex": rf"{self.server(tag)}\.{fx.DATABASE}\..*"}

    def changes(self) -> Iterator[tuple[str, int, int, int]]:
        """(op, table, id, variant) per message: c, u and d with the variant of the row they write or
        delete; a tombstone follows each delete (it counts as a message)."""
        rng = random.Random(self.seed)
        live: dict[int, int] = {}  # global key -> the variant of its row
        n = 0
        while n < self.events:
            g = rng.randrange(self.keys)
            table, key = g % self.ntables, g // self.ntables + 1
            held = live.get(g)
            if held is not None and rng.random() < DELETE_SHARE:
                del live[g]
                yield "d", table, key, held
                n += 1
                if n < self.events:
                    yield "tombstone", table, key, held
                    n += 1
                continue
            live[g] = n
            yield ("c" if held is None else "u"), table, key, n
            n += 1

    def mix(self) -> str:
        counts: dict[str, int] = {}
        for op, *_rest in self.changes():
            counts[op] = counts.get(op, 0) + 1
        return " / ".join(f"{100 * counts.get(op, 0) / max(self.events, 1):.1f}% {op}"
                          for op in ("c", "u", "d", "tombstone"))

    def final_state(self) -> dict[str, dict[int, Any]]:
        names = self.tables()
        state: dict[str, dict[int, Any]] = {t: {} for t in names}
        for op, table, key, variant in self.changes():
            if op in ("c", "u"):
                state[names[table]][key] = variant
            else:
                state[names[table]].pop(key, None)
        return state

    def rows(self, stored: dict[int, Any]) -> list[tuple[Any, ...]]:
        return [realrows.row(key, variant, self.seed) for key, variant in stored.items()]

    def _topic(self, tag: str, table: str) -> _Topic:
        server = self.server(tag)
        name = f"{server}.{fx.DATABASE}.{table}"
        schema = fx._dump(fx._envelope_schema(MODES)).replace(fx.TOPIC, name)
        key_schema = fx._dump(fx._KEY_SCHEMA).replace(fx.TOPIC, name)
        return _Topic(name, f'{{"schema":{schema},"payload":'.encode(),
                      f'{{"schema":{key_schema},"payload":{{"id":'.encode(), source_template(server, table))

    def messages(self, tag: str) -> Iterator[Message]:
        topics = [self._topic(tag, t) for t in self.tables()]
        images: dict[tuple[int, int], bytes] = {}  # (table, id) -> its row image: the next change's before
        n = 0
        for op, table, key, variant in self.changes():
            t = topics[table]
            key_bytes = t.key_head + b"%d}}" % key
            if op == "tombstone":
                yield t.name, key_bytes, None
                n += 1
                continue
            before = images.pop((table, key), b"null") if op != "c" else b"null"
            after = b"null"
            if op != "d":
                after = realrows.payload_json(realrows.row(key, variant, self.seed)).encode()
                images[(table, key)] = after
            seconds = BASE_SECONDS + n // EVENTS_PER_SECOND
            processed = seconds * 10**9 + 150_000_000 + n * 7919 % 100_000_000  # the connector's clock, ns
            source = t.source % {"ms": seconds * 1000, "us": seconds * 10**6, "ns": seconds * 10**9,
                                 "pos": 4096 + 640 * n}
            yield t.name, key_bytes, b"".join((
                t.head, b'{"before":', before, b',"after":', after, b',"source":', source.encode(),
                b',"transaction":null,"op":"%s","ts_ms":%d,"ts_us":%d,"ts_ns":%d}}' % (
                    op.encode(), processed // 10**6, processed // 1000, processed)))
            n += 1


def make(shape: str, events: int, keys: int, seed: int) -> SmallShape | RealShape:
    if shape == "small":
        return SmallShape(events, keys, seed)
    if shape == "debezium":
        return RealShape(events, keys, seed)
    if shape == "tables50":
        return RealShape(events, keys, seed, tables=50)
    raise ValueError(f"unknown shape {shape!r}: one of {', '.join(SHAPES)}")
