"""Warm the long-lived Spark's shared session before its first window.

    python -m spark_jobs.warm [sc://host:port]    exit 0 whatever happens, with a line saying what did

The first Python task a server runs starts the shared session (``spark_jobs.session.session_name``),
its Python worker daemon (``spark_jobs.daemon``) and workers, and the JVM's first Arrow job: the
first 1,000-record window on a new server took 3.3-3.9 s where the next took 1.5 s.
``scripts/services.sh start spark`` (also when the supervisor restarts the server) runs this once the
server is healthy, and the first window takes 1.7-2.0 s (docs/benchmarks.md). A warm-up that fails
leaves the start as it is: the first window starts the workers itself.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

from spark_jobs.config import SparkConfig
from spark_jobs.session import connect_spark
from spark_jobs.spark_failures import first_line


def _one_row_per_task(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa  # noqa: PLC0415

    for batch in batches:
        yield pa.RecordBatch.from_pydict({"rows": [batch.num_rows]})


def warm(remote: str | None = None, tasks: int = 2) -> float:
    """Run a ``tasks``-task Arrow job on the shared session at ``remote`` (None: where a window's
    session goes, ``spark_jobs.session.resolve_remote``), as a window's read tasks would; the seconds
    it took."""
    started = time.perf_counter()
    spark = connect_spark(SparkConfig(mode="connect", remote=remote))
    rows = spark.range(0, tasks, 1, tasks).mapInArrow(_one_row_per_task, "rows long").collect()
    if sum(r.rows for r in rows) != tasks:
        raise RuntimeError(f"the warm-up job counted {rows} rows, expected {tasks}")
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    remote = args[0] if args else None
    try:
        print(f"spark's shared session is warm: its Python workers started in {warm(remote):.1f} s")
    except Exception as exc:  # noqa: BLE001 - the server is healthy; its first window starts them itself
        print(f"spark's shared session was not warmed ({first_line(exc)}); its first window starts its "
              "Python workers itself")
    return 0


if __name__ == "__main__":
    sys.exit(main())
