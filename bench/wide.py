"""Window cost against the width of the table: one window of a Debezium table of N BIGINT columns
(the JsonConverter's {schema, payload} form, as Debezium's MySQL connector writes it), on the
long-lived Spark, for several N in one run.

    scripts/bench.sh --wide               (or: python -m bench.wide [--columns 5,50,200] [--records 1000])

For each N: a fresh topic and table, ``--records`` change events over ``--records / 4`` keys, one
window through ``runner.run_window`` (spark.mode connect), the rows read back and compared. Prints
a table (window seconds, its stages, the ratio to the narrowest) and the Spark server's heap after
a full GC; writes bench/results/<time>-wide.json. Needs the services (scripts/services.sh start).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.connections import get_connection

ROOT = Path(__file__).resolve().parent.parent


def _schema(columns: int) -> dict[str, Any]:
    row = {"type": "struct", "optional": True, "name": "bench.inventory.wide.Value",
           "fields": [{"type": "int64", "optional": i != 0, "field": f"c{i}"} for i in range(columns)]}
    return {"type": "struct", "optional": False, "name": "bench.inventory.wide.Envelope", "fields": [
        {**row, "field": "before"}, {**row, "field": "after"},
        {"type": "struct", "optional": False, "name": "io.debezium.connector.mysql.Source", "field": "source",
         "fields": [{"type": "int64", "optional": False, "field": "ts_ms"},
                    {"type": "string", "optional": True, "field": "table"}]},
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"}]}


def events(columns: int, records: int) -> tuple[list[cdcgen.Event], dict[int, list[int]]]:
    """``records`` creates and updates over ``records // 4`` keys; the rows they leave."""
    schema, state = _schema(columns), {}
    out = []
    keys = max(1, records // 4)
    for n in range(records):
        key = n % keys
        row = [key] + [n * 1000 + i for i in range(1, columns)]
        after = {f"c{i}": v for i, v in enumerate(row)}
        before = ({f"c{i}": v for i, v in enumerate([key] + state[key][1:])} if key in state else None)
        ts = 1_767_225_600_000 + n
        payload = {"before": before, "after": after, "source": {"ts_ms": ts, "table": "wide"},
                   "op": "u" if before else "c", "ts_ms": ts + 3}
        key_bytes = json.dumps({"schema": {"type": "struct", "optional": False, "fields": [
            {"type": "int64", "optional": False, "field": "c0"}]}, "payload": {"c0": key}}).encode()
        out.append(cdcgen.Event(key_bytes, json.dumps({"schema": schema, "payload": payload}).encode()))
        state[key] = row
    return out, state


def heap_after_gc() -> str:
    home = Path(os.environ.get("CDCFLOW_HOME", ROOT / ".local"))
    pid_file = home / "services" / "spark" / "connect.pid"
    try:
        pid = pid_file.read_text().strip()
        subprocess.run(["jcmd", pid, "GC.run"], capture_output=True, timeout=60, check=True)
        out = subprocess.run(["jcmd", pid, "GC.heap_info"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc.__class__.__name__})"
    used = [line for line in out.splitlines() if "used" in line]
    return used[0].strip() if used else out.strip()[:200]


def one(directory: Path, columns: int, records: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    name, topic, table = f"wide_{columns}_{tag}", f"bench.wide.{tag}", f"wide_{columns}_{tag}"
    data = {"name": name, "source": {"topics": [topic], "kafka_conn_id": "cdcflow_kafka"},
            "window": {"max_records": records * 2, "max_duration": "300s", "stop_on_empty": True},
            "initial_offsets": "earliest",
            "sinks": [{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": table,
                       "create_table": True, "primary_key": ["c0"],
                       "columns": [{"name": f"c{i}", "type": "BIGINT"} for i in range(columns)]}],
            "errors": {"tolerance": "all", "dlq_topic": f"{topic}.dlq"}}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    evs, state = events(columns, records)
    bootstrap = get_connection("cdcflow_kafka").kafka_config()["bootstrap.servers"]
    cdcgen.produce(bootstrap, topic, evs, partitions=1)
    cfg = load_pipeline(path)
    started = time.perf_counter()
    stats = runner.run_window(cfg, f"bench-{tag}")
    seconds = time.perf_counter() - started
    import sqlalchemy as sa  # noqa: PLC0415

    engine = sa.create_engine(get_connection("cdcflow_mysql").sqlalchemy_url())
    with engine.connect() as conn:
        rows = [list(r)[:columns] for r in conn.exec_driver_sql(f"SELECT * FROM `{table}` ORDER BY c0")]
        conn.exec_driver_sql(f"DROP TABLE `{table}`")
    engine.dispose()
    correct = rows == [state[k] for k in sorted(state)]
    return {"columns": columns, "records": records, "window_s": round(seconds, 3), "correct": correct,
            "dead_lettered": stats["dead_lettered"], "stages": stats.get("stages", {}), "heap": heap_after_gc()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", default="5,50,200", help="table widths, comma-separated")
    parser.add_argument("--records", type=int, default=1000, help="change events per window")
    args = parser.parse_args(argv)
    widths = [int(c) for c in args.columns.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CDCFLOW_CONFIG_DIR"] = tmp
        os.environ.setdefault("CDCFLOW_OFFSET_STORE_URL", f"sqlite:///{tmp}/offsets.db")
        one(Path(tmp), widths[0], 10)  # warm-up: the server's session and Python workers
        results = [one(Path(tmp), n, args.records) for n in widths]
    base = results[0]["window_s"]
    print(f"{'columns':>8} {'records':>8} {'window s':>9} {'ratio':>6} {'correct':>8}  heap after GC / stages")
    for r in results:
        stages = " ".join(f"{k}={v}" for k, v in r["stages"].items())
        print(f"{r['columns']:>8} {r['records']:>8} {r['window_s']:>9.2f} {r['window_s'] / base:>6.2f} "
              f"{r['correct']!s:>8}  {r['heap']} | {stages}")
    out = ROOT / "bench" / "results" / f"{time.strftime('%Y%m%dT%H%M%S')}-wide.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": "python -m bench.wide " + " ".join(argv or []), "results": results},
                              indent=2))
    print(f"written {out.relative_to(ROOT)}")
    return 0 if all(r["correct"] and not r["dead_lettered"] for r in results) else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # the Spark Connect sessions of the pipelines above (one per pipeline) each close their gRPC
    # channel from __del__ at interpreter exit, and that waits forever: everything is written already
    os._exit(code)
