"""The demo: fresh demo topic with Debezium change events, then a report of what landed where.

    python -m cdcflow.demo prepare   # recreate the topics, drop the table, reset offsets, produce events
    python -m cdcflow.demo report    # rows read back from MariaDB, DLQ records read back from Kafka
    python -m cdcflow.demo page      # the cdcflow page and API of the running api-server, checked
    python -m cdcflow.demo downstream  # the run of the downstream DAG that the window's asset event started

scripts/demo.sh runs prepare, then ``airflow dags test demo_orders``, then report.
"""

from __future__ import annotations

import sys
import time
import uuid
from decimal import Decimal

import sqlalchemy as sa
from confluent_kafka.admin import AdminClient

from cdcflow import cdcgen
from cdcflow.config import find_pipeline
from cdcflow.connections import get_connection
from cdcflow.window import clients

PIPELINE = "demo_orders"
EVENTS, KEYS, SEED = 400, 60, 2026


def _bootstrap() -> str:
    return str(get_connection("cdcflow_kafka").kafka_config()["bootstrap.servers"])


def prepare() -> None:
    cfg = find_pipeline(PIPELINE)
    topic, dlq = cfg.source.topics[0], cfg.errors.dlq_topic
    admin = AdminClient({"bootstrap.servers": _bootstrap()})
    existing = set(admin.list_topics(timeout=10).topics)
    doomed = [t for t in (topic, dlq) if t in existing]
    if doomed:
        for fut in admin.delete_topics(doomed, operation_timeout=15).values():
            fut.result(15)
        time.sleep(0.5)
    engine = sa.create_engine(get_connection(cfg.sinks[0].conn_id).sqlalchemy_url())
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS `{cfg.sinks[0].table}`")
        if conn.exec_driver_sql("SHOW TABLES LIKE 'cdcflow_tombstones'").first():
            conn.exec_driver_sql("DELETE FROM cdcflow_tombstones WHERE table_name = %s", (cfg.sinks[0].table,))
    store = clients.offset_store(cfg)
    store.offsets.clear(cfg.name)
    store.operator.set_state(cfg.name, "running", "demo")  # a demo stopped from the page earlier runs again
    for sink in cfg.sinks:
        if sink.type == "elasticsearch":
            from elasticsearch import Elasticsearch  # noqa: PLC0415

            es = Elasticsearch(get_connection(sink.conn_id).http_url())
            index = sink.index.replace("{topic}", topic.lower())
            es.options(ignore_status=404).indices.delete(index=index)
            # and the index's tombstones: a delete of an earlier run must not make this run's changes stale
            es.options(ignore_status=404).delete_by_query(index="cdcflow-tombstones", query={"term": {"index": index}},
                                                          refresh=True, conflicts="proceed")
            es.close()
    stream = cdcgen.orders_stream(EVENTS, KEYS, seed=SEED, debezium_types=True)
    cdcgen.produce(_bootstrap(), topic, stream.events, partitions=3)
    print(f"demo topic {topic!r}: {len(stream.events)} Debezium change events for {KEYS} orders "
          f"(inserts, updates, deletes, tombstones, op=r/op=c duplicates, {len(stream.broken)} broken records)")


def _dlq_messages(topic: str) -> list[object]:
    from connectors.kafka.reader import read_topic  # noqa: PLC0415

    return read_topic({"bootstrap.servers": _bootstrap(), "group.id": f"demo-report-{uuid.uuid4().hex}"}, topic)


def _report_elasticsearch(cfg: object, stream: cdcgen.Stream) -> bool:
    from elasticsearch import Elasticsearch  # noqa: PLC0415

    sink = next((s for s in cfg.sinks if s.type == "elasticsearch"), None)  # type: ignore[attr-defined]
    if sink is None:
        return True
    index = sink.index.replace("{topic}", cfg.source.topics[0].lower())  # type: ignore[attr-defined]
    es = Elasticsearch(get_connection(sink.conn_id).http_url())
    es.indices.refresh(index=index)
    hits = es.search(index=index, size=1000, sort=[{"id": "asc"}], version=True)["hits"]["hits"]
    print(f"\n== Elasticsearch index {index!r}: {len(hits)} documents (read back from 127.0.0.1) ==")
    print(f"{'_id':>5}  {'customer':14} {'status':10} {'amount':>9}  {'ordered_on':10}  {'shipped_at':26}  _version")
    for h in hits[:8]:
        d = h["_source"]
        print(f"{h['_id']:>5}  {d['customer'][:14]:14} {d['status']:10} {d['amount']!s:>9}  {d.get('ordered_on')!s:10}  "
              f"{d.get('shipped_at')!s:26}  {h['_version']}")
    if len(hits) > 8:
        print(f"  ... {len(hits) - 8} more")
    # Elasticsearch also holds the record whose customer is too long for MySQL's VARCHAR(32)
    accepted = {json_id(e) for e in stream.broken if e.kind == "broken:too-long"}
    want = {str(i): document(r) for i, r in stream.state.items()}
    got = {h["_id"]: {**h["_source"], "amount": Decimal(str(h["_source"]["amount"]))} for h in hits}
    same = set(got) == set(want) | accepted and all(got[i] == want[i] for i in want)
    print(f"matches the state computed from the events: {'yes' if same else 'NO'}")
    es.close()
    return same


def document(row: dict[str, object]) -> dict[str, object]:
    """The document a row's change leaves: decimals exact, the date and the datetime in ISO-8601."""
    shipped = row["shipped_at"]
    return {**row, "amount": Decimal(str(row["amount"])), "ordered_on": row["ordered_on"].isoformat(),  # type: ignore[attr-defined]
            "shipped_at": None if shipped is None else shipped.isoformat(timespec="microseconds")}  # type: ignore[attr-defined]


def json_id(event: cdcgen.Event) -> str:
    import json  # noqa: PLC0415

    return str(json.loads(event.key or b"{}")["id"])


def report() -> int:
    cfg = find_pipeline(PIPELINE)
    sink = cfg.sinks[0]
    stream = cdcgen.orders_stream(EVENTS, KEYS, seed=SEED, debezium_types=True)
    engine = sa.create_engine(get_connection(sink.conn_id).sqlalchemy_url())
    with engine.connect() as conn:
        rows = [tuple(r) for r in conn.exec_driver_sql(
            f"SELECT id, customer, status, amount, updated_at, ordered_on, shipped_at, `__cdc_version` "
            f"FROM `{sink.table}` ORDER BY id")]
    print(f"\n== MariaDB table {sink.table!r}: {len(rows)} rows (read back from 127.0.0.1) ==")
    print("DECIMAL(10,2), DATE and DATETIME(6) arrived as Debezium writes them: Decimal bytes, days, microseconds")
    print(f"{'id':>5}  {'customer':14} {'status':10} {'amount':>9}  {'updated_at':>14}  {'ordered_on':10}  "
          f"{'shipped_at':26}  version")
    for r in rows[:12]:
        print(f"{r[0]:>5}  {r[1]:14} {r[2]:10} {r[3]!s:>9}  {r[4]:>14}  {r[5]!s:10}  {r[6]!s:26}  {r[7]}")
    if len(rows) > 12:
        print(f"  ... {len(rows) - 12} more")
    want = [(r["id"], r["customer"], r["status"], Decimal(r["amount"]), r["updated_ms"], r["ordered_on"],
             r["shipped_at"]) for _i, r in sorted(stream.state.items())]
    same = [r[:7] for r in rows] == want
    print(f"matches the state computed from the events: {'yes' if same else 'NO'}")

    es_ok = _report_elasticsearch(cfg, stream)

    dead = _dlq_messages(cfg.errors.dlq_topic or "")
    print(f"\n== dead-letter topic {cfg.errors.dlq_topic!r}: {len(dead)} records (read back from the broker) ==")
    for msg in dead:
        h = {k: (v or b"").decode("utf-8", "replace") for k, v in msg.headers() or []}
        value = (msg.value() or b"")[:60]
        print(f"- {h.get('__connect.errors.topic')}[{h.get('__connect.errors.partition')}]@"
              f"{h.get('__connect.errors.offset')} stage={h.get('__connect.errors.stage')}: "
              f"{h.get('__connect.errors.exception.message')}\n    value={value!r}")

    store = clients.offset_store(cfg)
    print(f"\n== committed offsets of pipeline {cfg.name!r} ==")
    for (t, p), o in sorted(store.offsets.load(cfg.name).items()):
        print(f"{t}[{p}] -> {o}")
    return 0 if same and es_ok and len(dead) >= len(stream.broken) else 1


REPORT_DAG = "demo_orders_report"


def downstream_dag() -> object | None:
    """A DAG scheduled on the demo's MySQL table: Airflow runs it after each window that changed the
    table, once that window's offsets are committed. Its one task prints a line from the asset
    event. None when the demo pipeline or its connections are not there."""
    from airflow.providers.standard.operators.python import PythonOperator  # noqa: PLC0415
    from airflow.sdk import DAG, Asset  # noqa: PLC0415

    from cdcflow import assets  # noqa: PLC0415
    from cdcflow.airflow.dag_factory import START_DATE  # noqa: PLC0415
    from cdcflow.errors import CdcflowError  # noqa: PLC0415

    try:
        _topics, targets = assets.declared(find_pipeline(PIPELINE))
    except CdcflowError:
        return None
    table = next((uri for uri in targets if uri.startswith("mysql://")), None)
    if table is None:
        return None
    with DAG(dag_id=REPORT_DAG, schedule=[Asset(table)], start_date=START_DATE, catchup=False,
             is_paused_upon_creation=False, tags=["cdcflow", "demo"],
             doc_md=f"Runs after the pipeline `{PIPELINE}` changed `{table}` (a dbt run or a report would go here).") as dag:
        PythonOperator(task_id="report", python_callable=_report_changes)
    return dag


def _report_changes(**context: object) -> str:
    # the same event can be listed under the asset and under its URI: one line per event
    events = list({(e.asset.uri, e.timestamp): e
                   for evs in context["triggering_asset_events"].values() for e in evs}.values())  # type: ignore[attr-defined]
    lines = [f"{e.asset.uri} changed by {e.extra.get('pipeline')} run {e.extra.get('run_id')}: "
             f"{e.extra.get('upserted')} upserted, {e.extra.get('deleted')} deleted, offsets {e.extra.get('offsets')}"
             for e in events]
    line = "; ".join(lines) or "no asset event"
    print(f"demo_orders_report: {line}")
    return line


def downstream() -> int:
    """Wait for the downstream DAG's run that the demo window's asset event started, and print its line."""
    import json  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    print(f"\n== downstream DAG {REPORT_DAG!r} (scheduled on the asset of table demo_orders) ==")
    newest = clients.offset_store(find_pipeline(PIPELINE)).ledger.last_window(PIPELINE)
    window = newest[0].run_id if newest else "?"
    since = newest[1] if newest else None  # an earlier demo's failed run is not this one's
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        out = subprocess.run(["airflow", "dags", "list-runs", REPORT_DAG, "-o", "json"], capture_output=True,
                             text=True, check=False).stdout
        listed = [line for line in out.splitlines() if line.startswith("[")]  # the JSON, after any warnings
        try:
            runs = json.loads(listed[-1]) if listed else []
        except ValueError:
            runs = []
        # the run started by this demo's window: its task's line names the window's run
        done = [(r["run_id"], line) for r in runs if r.get("state") == "success"
                and window in (line := _last_line(r["run_id"]))]
        if done:
            run_id, line = done[0]
            print(f"run {run_id}: success; its task printed:\n  demo_orders_report: {line}")
            return 0
        if any(r.get("state") == "failed" and _after(r.get("run_after"), since) for r in runs):
            print(f"the downstream run failed: {runs}")
            return 1
        time.sleep(3)
    print("the downstream DAG did not run within 180 s (is the scheduler up? scripts/services.sh status airflow)")
    return 1


def _after(run_after: object, since: object) -> bool:
    """Whether a run came after ``since`` (when the demo's window last changed in the ledger, less a
    margin for the asset event's run, started as the window commits; unknown: it did)."""
    from datetime import UTC, datetime, timedelta  # noqa: PLC0415

    if not isinstance(run_after, str) or not isinstance(since, datetime):
        return True
    since = since if since.tzinfo else since.replace(tzinfo=UTC)
    return datetime.fromisoformat(run_after) >= since - timedelta(seconds=30)


def _last_line(run_id: str) -> str:
    """The line the downstream task printed, from its log file (JSON lines)."""
    import json  # noqa: PLC0415
    import os  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    logs = Path(os.environ.get("AIRFLOW_HOME", ".")) / "logs" / f"dag_id={REPORT_DAG}" / f"run_id={run_id}"
    for log_file in sorted(logs.rglob("*.log")):
        for line in log_file.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                event = str(json.loads(line).get("event", ""))
            except ValueError:
                continue
            if event.startswith("demo_orders_report: "):
                return event.removeprefix("demo_orders_report: ")
    return f"(no log line found under {logs})"


def page() -> int:
    """Log in to the api-server as the demo admin, read the demo pipeline's status through the
    cdcflow API and its page, and print where to open it."""
    import json  # noqa: PLC0415
    import os  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    base = f"http://127.0.0.1:{os.environ.get('CDCFLOW_AIRFLOW_PORT', '18080')}"
    pw_file = os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
    password = json.load(open(pw_file, encoding="utf-8"))["admin"]  # noqa: SIM115

    def call(path: str, body: object = None, token: str | None = None, accept: str = "application/json") -> str:
        req = urllib.request.Request(base + path, data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json", "Accept": accept})
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.read().decode()

    token = json.loads(call("/auth/token", {"username": "admin", "password": password}))["access_token"]
    status = json.loads(call(f"/cdcflow/connectors/{PIPELINE}/status", token=token))
    html = call(f"/cdcflow/pipelines/{PIPELINE}", token=token, accept="text/html")
    lag = json.loads(call(f"/cdcflow/connectors/{PIPELINE}/partitions", token=token))
    shown = PIPELINE in html and "Dead letters" in html and "Last windows" in html
    cfg = find_pipeline(PIPELINE)
    burrow = json.loads(call(f"/cdcflow/v3/kafka/{cfg.source.kafka_conn_id}/consumer/{cfg.group_id}/lag",
                             token=token))["status"]
    print(f"\n== the cdcflow page (Airflow api-server, user admin, password in {pw_file}) ==")
    print(f"pipelines:      {base}/cdcflow/")
    print(f"this pipeline:  {base}/cdcflow/pipelines/{PIPELINE}   (also a tab on the DAG's page in Airflow's UI)")
    print(f"REST API:       curl -H 'Authorization: Bearer <token>' {base}/cdcflow/connectors/{PIPELINE}/status")
    print(f"status:         {status['connector']['state']}; total lag {sum(p['lag'] for p in lag)} records over "
          f"{len(lag)} partitions; page shows the pipeline: {'yes' if shown else 'NO'}")
    print(f"\n== lag status (Burrow's rules; GET /cdcflow/v3/kafka/{cfg.source.kafka_conn_id}/consumer/"
          f"{cfg.group_id}/lag) ==")
    print(f"group {burrow['group']}: {burrow['status']}, total lag {burrow['totallag']}, "
          f"window {burrow['complete']:.0%} full")
    for p in burrow["partitions"]:
        print(f"  {p['topic']}[{p['partition']}] {p['status']:6} lag {p['current_lag']}  ({p['reason']})")
    prom = f"http://127.0.0.1:{os.environ.get('CDCFLOW_PROMETHEUS_PORT', '19090')}"
    scraped = None
    deadline = time.monotonic() + 45  # Prometheus scrapes every 15 s: wait for a scrape after the window
    while time.monotonic() < deadline:
        try:
            q = urllib.request.urlopen(f"{prom}/api/v1/query?query=cdcflow_pipeline_lag_records", timeout=10)
            result = json.load(q)["data"]["result"]
            scraped = next((r["value"][1] for r in result if r["metric"].get("pipeline") == PIPELINE), None)
        except OSError:
            scraped = None
        if scraped is not None and float(scraped) == burrow["totallag"]:
            break
        time.sleep(1)
    agrees = scraped is not None and float(scraped) == burrow["totallag"]
    print(f"\n== Prometheus ({prom}, alert rules config/prometheus/cdcflow-alerts.yml) ==")
    print(f"cdcflow_pipeline_lag_records{{pipeline=\"{PIPELINE}\"}} = {scraped if scraped is not None else 'not scraped'}"
          f" ({'agrees with the API' if agrees else 'does NOT agree with the API yet'}; metrics: {base}/cdcflow/metrics)")
    return 0 if shown else 1


if __name__ == "__main__":
    action = sys.argv[1] if len(sys.argv) > 1 else "report"
    if action == "prepare":
        prepare()
        raise SystemExit(0)
    if action == "page":
        raise SystemExit(page())
    if action == "downstream":
        raise SystemExit(downstream())
    raise SystemExit(report())
