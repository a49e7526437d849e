"""Reproducible Debezium-style change streams, and the final table state they imply.

Used by the demo, the tests and the benchmarks. Events are state-consistent (c for a new key, u or d
for an existing one, a tombstone after some deletes), a few keys are snapshotted as op=r and then
created again as op=c (the re-snapshot problem), and some values use the JsonConverter's
``{schema, payload}`` wrapper. Broken records can be mixed in; they never change the expected state.
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

STATUSES = ("new", "paid", "shipped", "delivered", "cancelled")


@dataclass(frozen=True)
class Event:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    kind: str = "change"  # change | tombstone | broken:<why>
    expected_stage: str | None = None  # for broken records: the DLQ stage they must arrive with
    timestamp: int | None = None  # the Kafka record timestamp (epoch ms) to produce with; None: now


@dataclass
class Stream:
    events: list[Event] = field(default_factory=list)
    state: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def broken(self) -> list[Event]:
        return [e for e in self.events if e.kind.startswith("broken")]


# The orders table as Debezium's MySQL connector describes it, with the JsonConverter's schemas
# (mysql.adoc "Data type mappings", defaults decimal.handling.mode=precise and
# time.precision.mode=adaptive_time_microseconds): amount DECIMAL(10,2) is a Connect Decimal (base64
# bytes of the unscaled value), ordered_on DATE an io.debezium.time.Date (days since 1970),
# shipped_at DATETIME(6) an io.debezium.time.MicroTimestamp (µs since 1970).
def _orders_row_schema(table: str) -> dict[str, Any]:
    return {"type": "struct", "optional": True, "name": f"demo.inventory.{table}.Value", "fields": [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "customer"},
        {"type": "string", "optional": True, "field": "status"},
        {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
         "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "amount"},
        {"type": "int64", "optional": True, "field": "updated_ms"},
        {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1, "field": "ordered_on"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1,
         "field": "shipped_at"}]}


def _orders_envelope_schema(table: str) -> dict[str, Any]:
    row = _orders_row_schema(table)
    return {"type": "struct", "optional": False, "name": f"demo.inventory.{table}.Envelope", "version": 2, "fields": [
        {**row, "field": "before"}, {**row, "field": "after"},
        {"type": "struct", "optional": False, "name": "io.debezium.connector.mysql.Source", "field": "source",
         "fields": [{"type": "string", "optional": False, "field": "connector"},
                    {"type": "string", "optional": False, "field": "db"},
                    {"type": "string", "optional": True, "field": "table"},
                    {"type": "int64", "optional": False, "field": "ts_ms"}]},
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"}]}


EPOCH_DATE, EPOCH = date(1970, 1, 1), datetime(1970, 1, 1)


def _debezium_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row as the connector encodes it: the Decimal as base64 bytes, the date as days, the
    datetime as µs."""
    unscaled = int(Decimal(row["amount"]).scaleb(2))
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return {**row, "amount": base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode("ascii"),
            "ordered_on": (row["ordered_on"] - EPOCH_DATE).days,
            "shipped_at": None if row["shipped_at"] is None else (row["shipped_at"] - EPOCH) // timedelta(microseconds=1)}


def _typed_key(i: int, table: str) -> bytes:
    return json.dumps({"schema": {"type": "struct", "optional": False, "name": f"demo.inventory.{table}.Key",
                                  "fields": [{"type": "int64", "optional": False, "field": "id"}]},
                       "payload": {"id": i}}, separators=(",", ":")).encode()


def _typed_envelope(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, ts: int,
                    table: str) -> bytes:
    payload = {"before": None if before is None else _debezium_row(before),
               "after": None if after is None else _debezium_row(after), "op": op, "ts_ms": ts + 5,
               "source": {"connector": "mysql", "db": "inventory", "table": table, "ts_ms": ts}}
    return json.dumps({"schema": _orders_envelope_schema(table), "payload": payload}, separators=(",", ":"),
                      ensure_ascii=False).encode()


def _key(i: int, wrapped: bool) -> bytes:
    payload = {"id": i}
    if wrapped:
        return json.dumps({"schema": {"type": "struct", "fields": [{"field": "id", "type": "int64"}]},
                           "payload": payload}).encode()
    return json.dumps(payload).encode()


def _envelope(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, ts: int,
              wrapped: bool, table: str) -> bytes:
    payload = {"before": before, "after": after, "op": op, "ts_ms": ts + 5,
               "source": {"connector": "mysql", "db": "inventory", "table": table, "ts_ms": ts}}
    if wrapped:
        return json.dumps({"schema": {"type": "struct", "name": f"inventory.{table}.Envelope"},
                           "payload": payload}).encode()
    return json.dumps(payload).encode()


def _row(rng: random.Random, i: int, ts: int, typed: bool = False) -> dict[str, Any]:
    row = {"id": i, "customer": f"customer-{rng.randrange(1000):04d}", "status": rng.choice(STATUSES),
           "amount": f"{rng.randrange(100, 100000) / 100:.2f}", "updated_ms": ts}
    if typed:  # dates before 1970 too; shipped_at with microseconds, or not shipped yet
        row["ordered_on"] = EPOCH_DATE + timedelta(days=rng.randrange(-4000, 20000))
        row["shipped_at"] = (None if rng.random() < 0.2 else
                             EPOCH + timedelta(microseconds=rng.randrange(-10**14, 2 * 10**15)))
    return row


# Kept whole (about 70 lines): one generator of the demo's orders, inserts to deletes, top to bottom.
def orders_stream(n: int = 200, keys: int = 40, seed: int = 7, broken: bool = True,
                  start_ts: int = 1_767_225_600_000, table: str = "orders", wrapped: float = 0.2,
                  step_ms: int = 10, record_timestamps: bool = False, debezium_types: bool = False) -> Stream:
    """``n`` change events over ``keys`` order ids; with ``broken``, six poison records too.
    ``wrapped`` is the share of events written with the JsonConverter's {schema, payload} wrapper.
    Events are ``step_ms`` apart in source.ts_ms; with ``record_timestamps`` their Kafka record
    timestamps are the same times (a tombstone gets its delete's). With ``debezium_types`` the rows also
    have ordered_on (DATE) and shipped_at (DATETIME(6)), and every change is encoded as Debezium's MySQL
    connector writes it, schemas included (Decimal bytes, days, µs; see _orders_row_schema)."""
    rng = random.Random(seed)
    out = Stream()
    ts = start_ts
    step = step_ms

    def key(i: int, is_wrapped: bool) -> bytes:
        return _typed_key(i, table) if debezium_types else _key(i, is_wrapped)

    def envelope(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, ts: int,
                 is_wrapped: bool) -> bytes:
        if debezium_types:
            return _typed_envelope(op, before, after, ts, table)
        return _envelope(op, before, after, ts, is_wrapped, table)

    # the re-snapshot problem: a few rows arrive as op=r, then again as op=c
    for i in range(1, min(keys, 4) + 1):
        ts += step
        row = _row(rng, i, ts, debezium_types)
        out.events.append(Event(key(i, False), envelope("r", None, row, ts, False)))
        out.state[i] = row
    for i in range(1, min(keys, 4) + 1):
        ts += step
        row = _row(rng, i, ts, debezium_types)
        out.events.append(Event(key(i, False), envelope("c", None, row, ts, False)))
        out.state[i] = row
    while len(out.events) < n:
        ts += step
        i = rng.randint(1, keys)
        is_wrapped = rng.random() < wrapped
        current = out.state.get(i)
        if current is None:
            row = _row(rng, i, ts, debezium_types)
            out.events.append(Event(key(i, is_wrapped), envelope("c", None, row, ts, is_wrapped)))
            out.state[i] = row
        elif rng.random() < 0.8:
            row = {**current, "status": rng.choice(STATUSES), "amount": f"{rng.randrange(100, 100000) / 100:.2f}",
                   "updated_ms": ts}
            out.events.append(Event(key(i, is_wrapped), envelope("u", current, row, ts, is_wrapped)))
            out.state[i] = row
        else:
            out.events.append(Event(key(i, is_wrapped), envelope("d", current, None, ts, is_wrapped)))
            del out.state[i]
            if rng.random() < 0.5:
                out.events.append(Event(key(i, is_wrapped), None, kind="tombstone"))
    if broken:
        out.events.extend(poison_records(rng, keys, ts, table))
    if record_timestamps:
        stamped, last = [], start_ts
        for e in out.events:
            if e.value:
                try:
                    source = json.loads(e.value)
                    source = source.get("payload", source) if "schema" in source else source
                    last = int(source["source"]["ts_ms"])
                except (ValueError, KeyError, TypeError, AttributeError):
                    pass
            stamped.append(replace(e, timestamp=last))
        out.events = stamped
    return out


def poison_records(rng: random.Random, keys: int, ts: int, table: str) -> list[Event]:
    """Records that must go to the DLQ; their keys are fresh so they never change the expected state."""
    hdr = (("trace-id", b"poison"),)
    k = keys + 1000
    too_long = {"id": k + 3, "customer": "x" * 80, "status": "new", "amount": "1.00", "updated_ms": ts}
    bad_amount = {"id": k + 4, "customer": "c", "status": "new", "amount": "12,5 EUR", "updated_ms": ts}
    return [
        Event(_key(k + 1, False), b"{this is not json", hdr, "broken:not-json", "converter"),
        Event(_key(k + 2, False), json.dumps({"id": k + 2, "note": "no envelope"}).encode(), hdr,
              "broken:no-op", "transform"),
        Event(_key(k + 3, False), _envelope("c", None, too_long, ts + 1, False, table), hdr,
              "broken:too-long", "sink"),
        Event(_key(k + 4, False), _envelope("c", None, bad_amount, ts + 2, False, table), hdr,
              "broken:bad-decimal", "transform"),
        Event(_key(k + 5, False), json.dumps({"op": "x", "after": {"id": k + 5}}).encode(), hdr,
              "broken:unknown-op", "transform"),
        Event(_key(k + 6, False), b"\xff\xfe\x00binary", hdr, "broken:binary", "converter"),
    ]


def expected_rows(state: dict[int, dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The state as (id, customer, status, amount, updated_at) tuples sorted by id."""
    return [(r["id"], r["customer"], r["status"], r["amount"], r["updated_ms"])
            for _i, r in sorted(state.items())]


def produce(bootstrap: str, topic: str, events: list[Event], partitions: int = 3,
            create: bool = True) -> None:
    """Create ``topic`` (if asked) and produce ``events`` keyed, in order, acks=all."""
    from confluent_kafka import Producer  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    if create:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
        for fut in futures.values():
            try:
                fut.result(15)
            except Exception as exc:  # noqa: BLE001
                if "already exists" not in str(exc).lower() and "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "partitioner": "murmur2_random", "linger.ms": 10})
    for e in events:
        while True:
            try:
                producer.produce(topic, key=e.key, value=e.value, headers=list(e.headers), on_delivery=on_delivery,
                                 timestamp=e.timestamp or 0)
                break
            except BufferError:
                producer.poll(0.2)
        producer.poll(0)
    remaining = producer.flush(30)
    if remaining or failures:
        raise RuntimeError(f"producing to {topic}: {remaining} unflushed, failures: {failures[:3]}")
