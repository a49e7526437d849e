"""The benchmark workload: a reproducible Debezium-style change stream and the state it implies.

N change events (JSON without schema, ~400 bytes each), keyed by primary key over ``keys`` distinct
ids, 70% c / 25% u / 5% d, produced to a topic with 3 partitions. The final state (last change per
key, deletes applied) is what every measured path must leave in its sink; ``checksum`` reduces it
to (row count, sum of CRC32 of a canonical row text), the same formula MySQL computes.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

START_TS = 1_767_225_600_000
STATUSES = ("new", "paid", "shipped", "delivered", "cancelled")
PAD = "x" * 120  # brings the envelope to ~400 bytes


@dataclass(frozen=True)
class Workload:
    events: int = 1_000_000
    keys: int = 100_000
    seed: int = 42

    def stream(self) -> Iterator[tuple[bytes, bytes, str, int, tuple[object, ...] | None]]:
        """(key, value, op, id, row-after) in produce order."""
        rng = random.Random(self.seed)
        for n in range(self.events):
            i = rng.randrange(1, self.keys + 1)
            r = rng.random()
            op = "c" if r < 0.70 else "u" if r < 0.95 else "d"
            ts = START_TS + n
            key = b'{"id":%d}' % i
            if op == "d":
                value = json.dumps({"before": {"id": i}, "after": None, "op": "d", "ts_ms": ts,
                                    "source": {"connector": "mysql", "db": "bench", "table": "orders", "ts_ms": ts,
                                               "file": "binlog.000042", "pos": n}}, separators=(",", ":")).encode()
                yield key, value, op, i, None
                continue
            row = (i, f"customer-{rng.randrange(100000):05d}", STATUSES[rng.randrange(5)],
                   f"{rng.randrange(100, 10_000_000) / 100:.2f}", ts)
            after = {"id": i, "customer": row[1], "status": row[2], "amount": row[3], "updated_ms": ts, "note": PAD}
            value = json.dumps({"before": None, "after": after, "op": op, "ts_ms": ts,
                                "source": {"connector": "mysql", "db": "bench", "table": "orders", "ts_ms": ts,
                                           "file": "binlog.000042", "pos": n}}, separators=(",", ":")).encode()
            yield key, value, op, i, row

    def final_state(self) -> dict[int, tuple[object, ...]]:
        state: dict[int, tuple[object, ...]] = {}
        for _k, _v, op, i, row in self.stream():
            if op == "d":
                state.pop(i, None)
            else:
                assert row is not None
                state[i] = row
        return state


def row_text(row: tuple[object, ...]) -> str:
    """The canonical text of a row: MySQL's CONCAT_WS('|', id, customer, status, amount, updated_at)."""
    return "|".join(str(v) for v in row)


def checksum(rows: dict[int, tuple[object, ...]] | list[tuple[object, ...]]) -> tuple[int, int]:
    values = rows.values() if isinstance(rows, dict) else rows
    total = count = 0
    for row in values:
        total += zlib.crc32(row_text(row).encode())
        count += 1
    return count, total


MYSQL_CHECKSUM = ("SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', id, customer, status, amount, updated_at))), 0) "
                  "FROM `{table}`")
