"""The table bench/run.py prints at the end of a run (the JSON result file has every figure)."""

from __future__ import annotations

import json
import statistics
from typing import Any

from bench.meter import HARNESS_TOTAL

_CDCFLOW = (("cdcflow_mysql", "cdcflow Kafka->Spark->MySQL (declared columns)"),
            ("cdcflow_mysql_schema", "cdcflow ... MySQL, tables from the record schema"),
            ("cdcflow_mysql_rows", "cdcflow ... MySQL with apply: rows"),
            ("cdcflow_mysql_staged", "cdcflow ... MySQL with every write after the read"),
            ("cdcflow_mysql_smt", "cdcflow ... MySQL through an SMT chain (4 transforms)"),
            ("cdcflow_mysql_unwrap", "cdcflow ... MySQL through ExtractNewRecordState"),
            ("cdcflow_mysql_chain5", "cdcflow ... MySQL through five steps (--chains)"),
            ("cdcflow_mysql_records", "cdcflow ... MySQL through the record model's chain (no unwrap)"),
            ("cdcflow_mysql_sql", "cdcflow ... MySQL through the unwrap and a SqlExpression (Spark stage)"),
            ("cdcflow_mysql_es_plain", "cdcflow ... MySQL + Elasticsearch without a chain (--chains)"),
            ("cdcflow_mysql_es_chain5", "cdcflow ... MySQL + Elasticsearch through five steps"),
            ("cdcflow_mysql_exactly_once", "cdcflow ... MySQL exactly-once (offset_store.sink)"),
            ("cdcflow_mysql_connect", "cdcflow ... on the long-lived Spark (connect)"),
            ("cdcflow_mysql_es", "cdcflow Kafka->Spark->MySQL+Elasticsearch"))
_CPU = ("cdcflow_mysql", "cdcflow_mysql_schema", "cdcflow_mysql_rows", "cdcflow_mysql_staged",
        "cdcflow_mysql_smt", "cdcflow_mysql_es", "raw_consume", "raw_mysql_upsert", "raw_mysql_load", "raw_es_bulk",
        "provider_defaults", "provider_careful")


def _median(r: dict[str, Any], key: str, field: str) -> str:
    """With --repeat: "; median of N: X" (the figure printed first is round 1's, as in the file's
    top level; every round is in ``rounds``)."""
    rounds = [x[key][field] for x in r.get("rounds", []) if key in x]
    return f"; median of {len(rounds)}: {statistics.median(rounds):,.0f}" if len(rounds) > 1 else ""


def print_table(r: dict[str, Any]) -> None:
    def line(k: str, v: str) -> None:
        print(f"  {k:62} {v}")

    w = r["workload"]
    print(f"\n== cdcflow benchmark: shape {w['shape']}, {w['events']:,} events (~{w['event_bytes']:,} bytes each), "
          f"{r['machine']['cores']} cores, {r['machine']['ram_gib']} GiB ==")
    for key, what in _CDCFLOW:
        if key in r:
            k = r[key]
            line(f"{what}, events/s", f"{k['events_per_s']:,}  ({k['seconds']} s, {len(k['windows'])} windows: "
                 f"{[x['seconds'] for x in k['windows']]} s{_median(r, key, 'events_per_s')})")
    if "raw_consume" in r:
        c = r["raw_consume"]
        line("ceiling: bare confluent-kafka consume loop, events/s", f"{c['events_per_s']:,}  "
             f"({c['bytes_per_s'] / 2**20:,.1f} MiB/s{_median(r, 'raw_consume', 'events_per_s')})")
        for key, what, unit in (("raw_mysql_upsert", "bare multi-row upsert, 1 connection", "rows"),
                                ("raw_mysql_load", "bare LOAD DATA LOCAL INFILE into an empty table", "rows"),
                                ("raw_es_bulk", "bare Elasticsearch bulk", "docs")):
            c = r[key]
            line(f"ceiling: {what}, events/s", f"{c.get('events_per_s', 0):,}  (the events' final state: "
                 f"{c[unit]:,} {unit} at {c[f'{unit}_per_s']:,}/s{_median(r, key, 'events_per_s')})")
    for key in ("provider_defaults", "provider_careful"):
        if key in r:
            p = r[key]
            since = p.get("events_per_s_from_operator_start")
            line(f"provider ConsumeFromTopicOperator, {p['loop']} loop (batches of {p['batch']:,}), events/s",
                 f"{p['events_per_s']:,}  (first to last batch {p['operator_seconds']} s; "
                 + (f"{since:,}/s from the operator's start; " if since else "")
                 + f"{p['events_per_s_wall']:,}/s incl. Airflow start{_median(r, key, 'events_per_s')})")
    if "overhead" in r:
        o = r["overhead"]
        line("window overhead: no new data (warm session / fresh process), s",
             f"{o['window_no_new_data_s']} / {o['window_no_new_data_fresh_process_s']}")
        line("window overhead: 1,000 records (warm session / fresh process), s",
             f"{o['window_1000_records_s']} / {o['window_1000_records_fresh_process_s']}")
        line("  fresh process: first on the shared session / on a new session (hourly), s",
             f"{o['window_1000_records_fresh_process_first_s']} / "
             f"{o['window_1000_records_fresh_process_new_session_s']}")
    line("Spark session start (once per process), s", str(r["spark_session_start_s"]))
    rounds = r["ratios"].get("median_of_rounds")
    for k, v in r["ratios"].items():
        if k != "median_of_rounds":
            line(f"ratio {k}" + (f" (median of {rounds})" if rounds and k in r["rounds"][0]["ratios"] else ""), str(v))
    for name in ("cdcflow_mysql", "cdcflow_mysql_exactly_once", "cdcflow_mysql_es", "provider_defaults",
                 "provider_careful"):
        if name in r:
            line(f"peak RSS during {name}, MiB", json.dumps(r[name]["peak_rss_mib"]))
    for name in _CPU:
        if name in r and "cpu_seconds" in r[name]:
            cpu = r[name]["cpu_seconds"]
            line(f"CPU seconds during {name}: harness {cpu[HARNESS_TOTAL]}", json.dumps(cpu))
    line("checks", json.dumps(r["checks"]))
