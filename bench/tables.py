"""Window cost against the number of tables: a Debezium deployment's pipeline (topics_regex, one topic
per table, ``{source.table}`` routing, tables created from the Connect schema) where every table has
a few changes, for 1 and for N tables, on the long-lived Spark, in one run.

    scripts/bench.sh --tables             (or: python -m bench.tables [--tables 1,50] [--rounds 2] [--es])
    scripts/bench.sh --tables --events 10000    the rate: that many events over 1 table and over 50


The events are tests/fixtures/debezium/mysql_all_types.py (33 columns, Debezium's own encodings), six
per table. Each round runs one window that creates the tables and a second window with one update
per table (the steady state: the tables exist). Prints the window seconds, the stages and the cost
per table; writes bench/results/<time>-tables.json. Needs the services (scripts/services.sh start).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
from tests.fixtures.debezium import mysql_all_types as fx

ROOT = Path(__file__).resolve().parent.parent


def _renamed(event: tuple[bytes, bytes | None], table: str, later_s: int = 0) -> cdcgen.Event:
    key, value = event
    if value is not None:
        value = (value.replace(b'"table":"all_types"', f'"table":"{table}"'.encode())
                 .replace(b".all_types.", f".{table}.".encode()))
        if later_s:
            doc = json.loads(value)
            doc["payload"]["source"]["ts_ms"] += later_s * 1000
            doc["payload"]["after"]["c_varchar"] = f"later {later_s}"
            value = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    return cdcgen.Event(key.replace(b".all_types.", f".{table}.".encode()), value)


def one(directory: Path, tables: int, es: bool = False) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    prefix = f"bt{tag}"
    name = f"tables_{tables}_{tag}"
    data = {"name": name, "source": {"topics_regex": rf"{prefix}\.inventory\..*", "kafka_conn_id": "cdcflow_kafka"},
            "window": {"max_records": 100_000, "max_duration": "300s", "stop_on_empty": True},
            "initial_offsets": "earliest",
            "sinks": [{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": f"{prefix}_{{source.table}}",
                       "create_table": True}]
            + ([{"type": "elasticsearch", "name": "e", "conn_id": "cdcflow_elasticsearch", "index": "{topic}",
                 "id_fields": ["id"]}] if es else []),
            "errors": {"tolerance": "all", "dlq_topic": f"{prefix}.dlq"}}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    bootstrap = get_connection("cdcflow_kafka").kafka_config()["bootstrap.servers"]
    names = [f"t{i:02d}" for i in range(tables)]
    for t in names:
        cdcgen.produce(bootstrap, f"{prefix}.inventory.{t}", [_renamed(e, t) for e in fx.events()], partitions=1)
    cfg = load_pipeline(path)
    started = time.perf_counter()
    first = runner.run_window(cfg, f"bench-{tag}-1")
    first_s = time.perf_counter() - started
    update = fx.events()[3]
    for t in names:
        cdcgen.produce(bootstrap, f"{prefix}.inventory.{t}", [_renamed(update, t, 600)], partitions=1, create=False)
    started = time.perf_counter()
    second = runner.run_window(cfg, f"bench-{tag}-2")
    second_s = time.perf_counter() - started
    import sqlalchemy as sa  # noqa: PLC0415

    engine = sa.create_engine(get_connection("cdcflow_mysql").sqlalchemy_url())
    with engine.begin() as conn:
        correct = all(conn.exec_driver_sql(f"SELECT c_varchar FROM `{prefix}_{t}` WHERE id = 1").scalar() == "later 600"
                      for t in names)
        for t in names:
            conn.exec_driver_sql(f"DROP TABLE `{prefix}_{t}`")
    engine.dispose()
    if es:  # every index has the later document
        import requests  # noqa: PLC0415

        url = get_connection("cdcflow_elasticsearch").http_url()
        requests.post(f"{url}/{prefix}.inventory.*/_refresh", timeout=60).raise_for_status()
        for t in names:
            doc = requests.get(f"{url}/{prefix}.inventory.{t}/_doc/1", timeout=30).json()
            correct = correct and doc.get("_source", {}).get("c_varchar") == "later 600"
        requests.delete(f"{url}/{prefix}.inventory.*", timeout=60)
    return {"tables": tables, "records": [first["records"], second["records"]], "create_window_s": round(first_s, 3),
            "steady_window_s": round(second_s, 3), "dead_lettered": first["dead_lettered"] + second["dead_lettered"],
            "correct": correct, "stages": second.get("stages", {})}


def _inserts(table: str, first_id: int, n: int, later_s: int) -> list[cdcgen.Event]:
    """``n`` changes of the fixture's first row (ids from ``first_id``), for ``table``, at ``later_s``."""
    first = _renamed(fx.events()[0], table)
    key, value = first.key, first.value
    key_doc, doc = json.loads(key), json.loads(value)
    out = []
    for i in range(first_id, first_id + n):
        key_doc["payload"]["id"] = doc["payload"]["after"]["id"] = i
        doc["payload"]["source"]["ts_ms"] = doc["payload"]["ts_ms"] = 1_700_000_000_000 + later_s * 1000 + i
        doc["payload"]["op"] = "c" if not later_s else "u"
        out.append(cdcgen.Event(json.dumps(key_doc, separators=(",", ":")).encode(),
                                json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()))
    return out


def rate(directory: Path, tables: int, events: int) -> dict[str, Any]:
    """``events`` changes spread over ``tables`` tables (one topic each): a window that creates the
    tables, then the same number of updates in a steady window; its events per second."""
    tag = uuid.uuid4().hex[:8]
    prefix = f"br{tag}"
    name = f"rate_{tables}_{tag}"
    data = {"name": name, "source": {"topics_regex": rf"{prefix}\.inventory\..*", "kafka_conn_id": "cdcflow_kafka"},
            "window": {"max_records": 1_000_000, "max_duration": "600s", "stop_on_empty": True},
            "initial_offsets": "earliest",
            "sinks": [{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": f"{prefix}_{{source.table}}",
                       "create_table": True}],
            "errors": {"tolerance": "all", "dlq_topic": f"{prefix}.dlq"}}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    bootstrap = get_connection("cdcflow_kafka").kafka_config()["bootstrap.servers"]
    names = [f"t{i:02d}" for i in range(tables)]
    per = events // tables
    for t in names:
        cdcgen.produce(bootstrap, f"{prefix}.inventory.{t}", _inserts(t, 1, per, 0), partitions=1)
    cfg = load_pipeline(path)
    first = runner.run_window(cfg, f"rate-{tag}-1")
    for t in names:
        cdcgen.produce(bootstrap, f"{prefix}.inventory.{t}", _inserts(t, 1, per, 600), partitions=1, create=False)
    started = time.perf_counter()
    second = runner.run_window(cfg, f"rate-{tag}-2")
    seconds = time.perf_counter() - started
    import sqlalchemy as sa  # noqa: PLC0415

    engine = sa.create_engine(get_connection("cdcflow_mysql").sqlalchemy_url())
    with engine.begin() as conn:
        correct = all(conn.exec_driver_sql(f"SELECT COUNT(*), SUM(id) FROM `{prefix}_{t}`").one() == (per, per * (per + 1) // 2)
                      for t in names)
        for t in names:
            conn.exec_driver_sql(f"DROP TABLE `{prefix}_{t}`")
    engine.dispose()
    return {"tables": tables, "records": [first["records"], second["records"]], "steady_window_s": round(seconds, 3),
            "events_per_s": round(second["records"] / seconds), "dead_lettered": first["dead_lettered"]
            + second["dead_lettered"], "correct": correct and second["records"] == per * tables,
            "stages": second.get("stages", {})}


def rates(counts: list[int], events: int, rounds: int, argv: list[str] | None) -> int:
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CDCFLOW_CONFIG_DIR"] = tmp
        os.environ.setdefault("CDCFLOW_OFFSET_STORE_URL", f"sqlite:///{tmp}/offsets.db")
        rate(Path(tmp), 1, min(events, 1000))  # warm-up
        for _round in range(rounds):
            results += [rate(Path(tmp), n, events) for n in counts]
    summary = {n: statistics.median(r["events_per_s"] for r in results if r["tables"] == n) for n in counts}
    for n in counts:
        print(f"{n:>4} tables: {summary[n]:>9,.0f} events/s (steady window, median of {rounds})")
    ratio = round(summary[counts[-1]] / summary[counts[0]], 3)
    print(f"rate with {counts[-1]} tables / with {counts[0]}: {ratio}")
    out = ROOT / "bench" / "results" / f"{time.strftime('%Y%m%dT%H%M%S')}-tables-rate.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": "python -m bench.tables " + " ".join(argv or sys.argv[1:]),
                               "summary": summary, "ratio": ratio, "results": results}, indent=2))
    print(f"written {out.relative_to(ROOT)}")
    return 0 if all(r["correct"] and not r["dead_lettered"] for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default="1,50", help="table counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--es", action="store_true", help="an Elasticsearch sink too, one index per topic")
    parser.add_argument("--events", type=int, default=0,
                        help="measure the rate instead: this many events over each table count (issue 25's 50 tables)")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.tables.split(",")]
    if args.events:
        return rates(counts, args.events, args.rounds, argv)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CDCFLOW_CONFIG_DIR"] = tmp
        os.environ.setdefault("CDCFLOW_OFFSET_STORE_URL", f"sqlite:///{tmp}/offsets.db")
        one(Path(tmp), 1, args.es)  # warm-up
        for _round in range(args.rounds):
            results += [one(Path(tmp), n, args.es) for n in counts]
    print(f"{'tables':>7} {'create window s':>16} {'steady window s':>16} {'correct':>8}")
    summary = {}
    for n in counts:
        mine = [r for r in results if r["tables"] == n]
        summary[n] = {k: statistics.median(r[k] for r in mine) for k in ("create_window_s", "steady_window_s")}
        print(f"{n:>7} {summary[n]['create_window_s']:>16.2f} {summary[n]['steady_window_s']:>16.2f} "
              f"{str(all(r['correct'] and not r['dead_lettered'] for r in mine)):>8}")
    if len(counts) > 1:
        lo, hi = counts[0], counts[-1]
        per = (summary[hi]["steady_window_s"] - summary[lo]["steady_window_s"]) / (hi - lo)
        print(f"steady state: {per * 1000:.0f} ms per extra table ({lo} -> {hi} tables, medians of {args.rounds})")
    out = ROOT / "bench" / "results" / f"{time.strftime('%Y%m%dT%H%M%S')}-tables.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": "python -m bench.tables " + " ".join(argv or sys.argv[1:]),
                               "summary": summary, "results": results}, indent=2))
    print(f"written {out.relative_to(ROOT)}")
    return 0 if all(r["correct"] and not r["dead_lettered"] for r in results) else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # see bench/wide.py: the pipelines' Spark Connect sessions would hang the exit
