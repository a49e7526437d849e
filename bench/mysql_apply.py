"""The MySQL sink alone: set-based vs row-based apply of the same changes (no Kafka, no Spark).

    source scripts/env.sh && python -m bench.mysql_apply [--changes 90000]

One writer's view: Arrow batches of 10,000 (as Spark hands them over), 5% deletes; two passes per
table (inserts, then updates of every key), two tables per path. Prints seconds per pass.
"""

from __future__ import annotations

import argparse
import time
import uuid
from decimal import Decimal

import pyarrow as pa

from bench.harness import drop_table, mysql_url
from bench.run import COLUMNS
from cdcflow.config import MySqlSinkConfig
from connectors.mysql.sink import MySqlSink


def changes(n: int, version: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "topic": ["t"] * n, "partition": [0] * n, "offset": list(range(n)), "key": pa.array([b"k"] * n),
        "value": pa.array([b"v" * 400] * n),
        "headers": pa.array([[]] * n, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        "change_op": ["delete" if i % 20 == 0 else "upsert" for i in range(n)],
        "version": pa.array([version + i for i in range(n)], pa.int64()), "c_0": pa.array(range(n), pa.int64()),
        "c_1": [f"customer-{i % 99999:05d}" for i in range(n)], "c_2": ["paid"] * n,
        "c_3": pa.array([Decimal(f"{i % 100000}.25") for i in range(n)], pa.decimal128(10, 2)),
        "c_4": pa.array([1_767_225_600_000 + i for i in range(n)], pa.int64())})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=90_000)
    n = parser.parse_args().changes
    columns = COLUMNS
    for apply in ("set", "rows", "set", "rows"):
        table = f"bench_apply_{uuid.uuid4().hex[:8]}"
        cfg = MySqlSinkConfig(type="mysql", name="m", table=table, primary_key=["id"], columns=columns,
                              create_table=True, apply=apply, batch_size=500)
        sink = MySqlSink(cfg, mysql_url())
        sink.open()
        laps = []
        for version in (1_000, 10_000_000):  # inserts, then updates of the same keys
            batch = changes(n, version)
            started = time.perf_counter()
            for offset in range(0, n, 10_000):
                sink.write_arrow(batch.slice(offset, 10_000))
            sink.flush()
            laps.append(time.perf_counter() - started)
        sink.close()
        drop_table(table)
        print(f"apply: {apply:4}  {n:,} changes: inserts {laps[0]:.2f} s, updates {laps[1]:.2f} s  "
              f"({n / laps[1]:,.0f} changes/s)  {sink.stats.extra}")


if __name__ == "__main__":
    main()
