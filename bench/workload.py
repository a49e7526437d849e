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


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.workload --shape debezium --events 1000000``: generate a shape's stream (without
    producing it) and print how fast, how large and which mix (bench/shapes.py has the shapes)."""
    import argparse
    import time

    from bench import shapes

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0] if main.__doc__ else None)
    parser.add_argument("--shape", choices=shapes.SHAPES, default=shapes.DEFAULT_SHAPE)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    shape = shapes.make(args.shape, args.events, args.keys, args.seed)
    started = time.perf_counter()
    size = count = 0
    for _topic, key, value in shape.messages("cli"):
        size += len(key) + (len(value) if value is not None else 0)
        count += 1
    seconds = time.perf_counter() - started
    state = shape.final_state()
    print(f"{shape.name}: {count:,} messages in {seconds:.1f} s ({count / seconds:,.0f}/s), "
          f"{size / max(count, 1):,.0f} bytes each on average; {shape.mix()}; "
          f"final state {sum(len(t) for t in state.values()):,} rows in {len(state)} table(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
