"""Lag and metrics on real servers: the plugin's /cdcflow/metrics scraped by a real Prometheus (Debian's,
started by scripts/services.sh), Burrow's lag endpoint, the alert rules (promtool and live), and the
Grafana dashboard's metrics checked against what Prometheus actually holds."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.errors import SinkUnavailable
from cdcflow.state import StateStore
from cdcflow.window import clients
from connectors.kafka.reader import discover
from tests.airflow_server import AirflowServer, free_port, make_server
from tests.helpers import bootstrap, mysql_engine, read_topic, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.system, pytest.mark.services]
ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "config" / "prometheus" / "cdcflow-alerts.yml"
DASHBOARD = ROOT / "config" / "grafana" / "cdcflow-dashboard.json"


class Prometheus:
    def __init__(self, home: Path, scrape_port: int) -> None:
        self.port = free_port()
        self.env = {**os.environ, "CDCFLOW_HOME": str(home), "CDCFLOW_PROMETHEUS_PORT": str(self.port),
                    "CDCFLOW_AIRFLOW_PORT": str(scrape_port), "CDCFLOW_PROMETHEUS_INTERVAL": "1s"}

    def services(self, action: str) -> None:
        result = subprocess.run([str(ROOT / "scripts" / "services.sh"), action, "prometheus"], env=self.env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=30) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.api("query", query=expr)["result"]

    def wait_for(self, expr: str, check: Any, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Poll ``expr`` until check(result) holds (a scrape every second)."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if check(result):
                return result
            time.sleep(1)
        raise AssertionError(f"{expr} never satisfied the check within {timeout}s; last: {result}")


def value(result: list[dict[str, Any]]) -> float:
    return sum(float(r["value"][1]) for r in result)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowServer]:
    home = tmp_path_factory.mktemp("metrics")
    srv = make_server(home)
    # the metrics need a token here, which Prometheus reads from the same file (authorization.credentials_file)
    token = home / "metrics.token"
    token.write_text(secrets.token_urlsafe(24) + "\n")
    srv.env["CDCFLOW_METRICS_TOKEN_FILE"] = str(token)
    srv.env["AIRFLOW_CONN_CDCFLOW_MYSQL_DOWN"] = json.dumps(
        {"conn_type": "mysql", "host": "127.0.0.1", "port": free_port(), "login": "x", "password": "x", "schema": "x"})
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def prometheus(server: AirflowServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    prom = Prometheus(tmp_path_factory.mktemp("prometheus-home"), server.port)
    prom.env["CDCFLOW_METRICS_TOKEN_FILE"] = server.env["CDCFLOW_METRICS_TOKEN_FILE"]
    prom.services("start")
    yield prom
    prom.services("stop")


@pytest.fixture
def shared(server: AirflowServer, monkeypatch: pytest.MonkeyPatch) -> StateStore:
    monkeypatch.setenv("CDCFLOW_CONFIG_DIR", str(server.config_dir))
    monkeypatch.setenv("CDCFLOW_OFFSET_STORE_URL", server.store_url)
    monkeypatch.setenv("AIRFLOW_CONN_CDCFLOW_MYSQL_DOWN", server.env["AIRFLOW_CONN_CDCFLOW_MYSQL_DOWN"])
    return StateStore(server.store_url)


def test_the_metrics_need_the_token_of_the_file_when_one_is_set(server: AirflowServer) -> None:
    token = Path(server.env["CDCFLOW_METRICS_TOKEN_FILE"]).read_text().strip()
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        refused = server.request("GET", "/cdcflow/metrics", user=None, headers=headers)
        assert refused.status == 401 and "CDCFLOW_METRICS_TOKEN_FILE" in refused.body["message"]
    scraped = server.request("GET", "/cdcflow/metrics", user=None, headers={"Authorization": f"Bearer {token}"})
    assert scraped.status == 200 and "cdcflow_spark_up" in scraped.text


def test_promtool_accepts_the_alert_rules() -> None:
    result = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout


def test_prometheus_sees_the_brokers_lag_and_the_records_mysql_took(
        server: AirflowServer, prometheus: Prometheus, shared: StateStore, spark: Any) -> None:
    tag = unique("prom")
    cfg = load_pipeline(write_pipeline(server.config_dir, tag, f"t.{tag}", tag))
    topic = cfg.source.topics[0]
    stream = cdcgen.orders_stream(150, 25, seed=31)
    cdcgen.produce(bootstrap(), topic, stream.events)
    runner.run_window(cfg, "first", {"max_records": 60}, shared, spark)

    ends = {(s.topic, s.partition): s.end for s in discover(clients.consumer_conf(cfg), [topic])}
    stored = shared.offsets.load(cfg.name)
    broker_lag = sum(ends[tp] - stored.get(tp, 0) for tp in ends)
    assert broker_lag == len(stream.events) - 60
    sel = f'{{pipeline="{cfg.name}"}}'
    got = prometheus.wait_for(f"cdcflow_lag_records{sel}", lambda r: len(r) == len(ends) and value(r) == broker_lag)
    for r in got:
        tp = (r["metric"]["topic"], int(r["metric"]["partition"]))
        assert float(r["value"][1]) == ends[tp] - stored.get(tp, 0)
    assert value(prometheus.query(f"cdcflow_records_read_total{sel}")) == 60
    assert value(prometheus.query(f"cdcflow_log_end_offset{sel}")) == sum(ends.values())

    runner.run_window(cfg, "second", {}, shared, spark)
    prometheus.wait_for(f"cdcflow_records_read_total{sel}", lambda r: value(r) == len(stream.events))
    assert value(prometheus.query(f"cdcflow_pipeline_lag_records{sel}")) == 0
    assert value(prometheus.query(f'cdcflow_windows_total{{pipeline="{cfg.name}",outcome="committed"}}')) == 2
    # what MySQL and the broker say
    with mysql_engine().connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT COUNT(*) FROM `{cfg.sinks[0].table}`").scalar_one()
    assert rows == len(stream.state)
    dlq = read_topic(cfg.errors.dlq_topic or "")
    rejected_by_mysql = [m for m in dlq if dict(m.headers())["__connect.errors.stage"] == b"sink"]
    assert value(prometheus.query(f'cdcflow_sink_records_total{{pipeline="{cfg.name}",outcome="failed"}}')) \
        == len(rejected_by_mysql) == 1
    assert value(prometheus.query(f"cdcflow_dead_letters_total{sel}")) == len(dlq) == len(stream.broken)
    by_class = prometheus.query(f'cdcflow_dead_letters_total{{pipeline="{cfg.name}",stage="sink"}}')
    assert [r["metric"]["error_class"] for r in by_class] == ["pymysql.err.DataError"]
    assert value(prometheus.query(f"cdcflow_window_duration_seconds_count{sel}")) == 2
    assert value(prometheus.query(f"cdcflow_seconds_since_last_successful_window{sel}")) < 120

    # the long-lived Spark's state: up where the windows ran; down where a pipeline names a dead server
    dead = f"sc://127.0.0.1:{free_port()}"
    write_pipeline(server.config_dir, unique("promdead"), f"t.{tag}.dead", tag, spark={"remote": dead})
    live = cfg.spark.remote or os.environ.get("CDCFLOW_SPARK_REMOTE", "sc://127.0.0.1:15002")
    prometheus.wait_for(f'cdcflow_spark_up{{remote="{dead}"}}', lambda r: len(r) == 1 and value(r) == 0)
    assert value(prometheus.query(f'cdcflow_spark_up{{remote="{live}"}}')) == 1

    # Burrow's JSON for the same pipeline, by consumer group
    burrow = server.request("GET", f"/cdcflow/v3/kafka/{cfg.source.kafka_conn_id}/consumer/{cfg.group_id}/lag")
    assert burrow.status == 200, burrow.text
    status = burrow.body["status"]
    assert status["group"] == cfg.group_id and status["status"] == "OK" and status["totallag"] == 0
    assert status["partition_count"] == len(ends) and {p["status"] for p in status["partitions"]} == {"OK"}
    assert server.request("GET", f"/cdcflow/v3/kafka/other/consumer/{cfg.group_id}/lag").status == 404

    # every metric the dashboard and the alert rules use exists in Prometheus now
    names = set(prometheus.api("label/__name__/values"))
    wanted = set()
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    exprs += [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    for expr in exprs:
        wanted |= set(re.findall(r"\b(cdcflow_[a-z_]+)\b", expr))
    assert wanted and wanted <= names, sorted(wanted - names)


def test_a_stuck_pipeline_turns_stop_and_a_failing_one_fires_its_alert(
        server: AirflowServer, prometheus: Prometheus, shared: StateStore, spark: Any) -> None:
    tag = unique("stuck")
    stuck = load_pipeline(write_pipeline(server.config_dir, tag, f"t.{tag}", tag,
                                         monitor={"stop_after": "3s", "window": 3}))
    cdcgen.produce(bootstrap(), stuck.source.topics[0], cdcgen.orders_stream(40, 10, seed=4, broken=False).events)
    runner.run_window(stuck, "only", {"max_records": 5}, shared, spark)  # then nothing: records wait
    stop_rule = next(r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
                     if r["alert"] == "CdcflowPartitionStopped")
    hit = prometheus.wait_for(stop_rule, lambda r: any(x["metric"]["pipeline"] == stuck.name for x in r), 60)
    assert {x["metric"]["pipeline"] for x in hit} >= {stuck.name}
    lag = server.request("GET", f"/cdcflow/connectors/{stuck.name}/lag").body["status"]
    assert lag["status"] == "ERR" and "STOP" in {p["status"] for p in lag["partitions"] if p["current_lag"] > 0}

    tag = unique("down")
    down = load_pipeline(write_pipeline(server.config_dir, tag, f"t.{tag}", tag))
    data = yaml.safe_load((server.config_dir / f"{tag}.yaml").read_text())
    data["sinks"][0]["conn_id"] = "cdcflow_mysql_down"
    (server.config_dir / f"{tag}.yaml").write_text(yaml.safe_dump(data))
    down = load_pipeline(server.config_dir / f"{tag}.yaml")
    cdcgen.produce(bootstrap(), down.source.topics[0], cdcgen.orders_stream(20, 5, seed=2, broken=False).events)
    server.sync_dags()  # FAILED is the newest window's outcome of a DAG Airflow knows
    with pytest.raises(SinkUnavailable):
        runner.run_window(down, "fails", {}, shared, spark)
    assert shared.offsets.load(down.name) == {}  # no offset moved

    def firing(_r: Any) -> bool:
        alerts = prometheus.api("alerts")["alerts"]
        return any(a["labels"]["alertname"] == "CdcflowWindowFailing" and a["labels"]["pipeline"] == down.name
                   and a["state"] == "firing" for a in alerts)

    prometheus.wait_for(f'cdcflow_last_window_failed{{pipeline="{down.name}"}}', firing, 60)
    status = server.request("GET", f"/cdcflow/connectors/{down.name}/status").body
    assert status["connector"]["state"] == "PAUSED"  # as Connect: the connector is paused, its task failed
    assert status["tasks"][0]["state"] == "FAILED" and "127.0.0.1" in status["tasks"][0]["trace"]
