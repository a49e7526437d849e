"""The operator's control plane on real servers: Airflow's api-server with the cdcflow plugin (started
here), Kafka, MariaDB and Spark. Real HTTP for every endpoint and action, Airflow's own auth, the Kafka
Connect offsets examples, DLQ redrive end to end, and a real browser on the page."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.errors import PipelineStopped
from cdcflow.state import StateStore
from tests.airflow_server import PASSWORDS, AirflowServer, make_server
from tests.helpers import bootstrap, expected, mysql_engine, read_topic, table_rows, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.system, pytest.mark.services]
ROOT = Path(__file__).resolve().parents[4]
SCREENSHOTS = ROOT / ".local" / "screenshots"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowServer]:
    srv = make_server(tmp_path_factory.mktemp("control"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def use_server_store(server: AirflowServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process reads and runs windows with the same config dir and offset store as the server."""
    monkeypatch.setenv("CDCFLOW_CONFIG_DIR", str(server.config_dir))
    monkeypatch.setenv("CDCFLOW_OFFSET_STORE_URL", server.store_url)


def _pipeline(server: AirflowServer, prefix: str, **overrides: Any) -> Any:
    tag = unique(prefix)
    return load_pipeline(write_pipeline(server.config_dir, tag, f"t.{tag}", tag, **overrides))


def _store(server: AirflowServer) -> StateStore:
    return StateStore(server.store_url)


def _dag(server: AirflowServer, name: str) -> dict[str, Any]:
    r = server.request("GET", f"/api/v2/dags/{name}")
    assert r.status == 200, r.text
    return r.body


# -- the plugin is registered and authenticated -----------------------------------------------------

def test_plugin_is_registered_with_nav_and_dag_links(server: AirflowServer) -> None:
    r = server.request("GET", "/api/v2/plugins")
    assert r.status == 200, r.text
    [plugin] = [p for p in r.body["plugins"] if p["name"] == "cdcflow"]
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/cdcflow"]
    views = {v["destination"]: v["href"] for v in plugin["external_views"]}
    assert views == {"nav": "/cdcflow/", "dag": "/cdcflow/pipelines/{DAG_ID}"}


ENDPOINTS = [("GET", "/cdcflow/connectors"), ("GET", "/cdcflow/connectors/x"), ("GET", "/cdcflow/connectors/x/status"),
             ("GET", "/cdcflow/connectors/x/config"), ("GET", "/cdcflow/connectors/x/topics"),
             ("PUT", "/cdcflow/connectors/x/pause"), ("PUT", "/cdcflow/connectors/x/resume"),
             ("PUT", "/cdcflow/connectors/x/stop"), ("POST", "/cdcflow/connectors/x/restart"),
             ("GET", "/cdcflow/connectors/x/offsets"), ("PATCH", "/cdcflow/connectors/x/offsets"),
             ("DELETE", "/cdcflow/connectors/x/offsets"), ("GET", "/cdcflow/connector-plugins"),
             ("PUT", "/cdcflow/connector-plugins/cdcflow.Pipeline/config/validate"),
             ("GET", "/cdcflow/connectors/x/dlq"), ("POST", "/cdcflow/connectors/x/dlq/redrive"),
             ("GET", "/cdcflow/connectors/x/windows"), ("POST", "/cdcflow/connectors/x/replay"),
             ("POST", "/cdcflow/connectors/x/run"), ("GET", "/cdcflow/connectors/x/partitions"),
             ("POST", "/cdcflow/connectors/x/offsets/reset"), ("GET", "/cdcflow/pipelines/x"), ("GET", "/cdcflow/"),
             ("PUT", "/cdcflow/connectors/x/config"), ("DELETE", "/cdcflow/connectors/x")]


def test_every_endpoint_needs_a_user(server: AirflowServer) -> None:
    for method, path in ENDPOINTS:
        r = server.request(method, path, {} if method in ("PATCH", "POST", "PUT") else None, user=None)
        assert r.status == 401, (method, path, r.text)
        assert r.body == {"error_code": 401, "message": "Not authenticated"}, (method, path)
    bad = server.request("GET", "/cdcflow/connectors", user=None, headers={"Authorization": "Bearer not-a-jwt"})
    assert bad.status in (401, 403) and bad.body["error_code"] == bad.status


def test_the_page_sends_a_browser_without_a_session_to_airflows_login(server: AirflowServer) -> None:
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    req = urllib.request.Request(server.base + "/cdcflow/", headers={"Accept": "text/html"})
    try:
        urllib.request.build_opener(NoRedirect).open(req, timeout=30)
        raise AssertionError("expected a redirect")
    except urllib.error.HTTPError as err:
        assert err.code == 303
        assert "/auth/login" in err.headers["Location"] and "next=" in err.headers["Location"]


def test_a_reader_gets_403_on_every_action(server: AirflowServer) -> None:
    cfg = _pipeline(server, "ro")
    server.sync_dags()
    name = cfg.name
    assert server.request("GET", f"/cdcflow/connectors/{name}/status", user="viewer").status == 200
    assert name in server.request("GET", "/cdcflow/connectors", user="viewer").body
    actions = [("PUT", "pause", None), ("PUT", "resume", None), ("PUT", "stop", None), ("POST", "restart", None),
               ("PATCH", "offsets", {"offsets": []}), ("DELETE", "offsets", None), ("POST", "run", {}),
               ("POST", "replay", {"start_offsets": {cfg.source.topics[0]: {"0": 0}}}),
               ("POST", "offsets/reset", {"to": "earliest"}), ("POST", "dlq/redrive", {})]
    for method, action, body in actions:
        r = server.request(method, f"/cdcflow/connectors/{name}/{action}", body, user="viewer")
        assert r.status == 403, (action, r.text)
        assert r.body["error_code"] == 403 and "viewer" in r.body["message"] and name in r.body["message"]
    assert _dag(server, name)["is_paused"] is True  # nothing changed
    assert _store(server).operator.get_state(name) == "running"


def test_unknown_pipeline_is_404_in_connects_shape(server: AirflowServer) -> None:
    for method, path in (("GET", "/cdcflow/connectors/nope/status"), ("PUT", "/cdcflow/connectors/nope/pause"),
                         ("GET", "/cdcflow/connectors/nope")):
        r = server.request(method, path)
        assert r.status == 404, r.text
        assert r.body["error_code"] == 404 and r.body["message"].startswith("Connector nope not found")


# -- Connect's API ----------------------------------------------------------------------------------

def test_connectors_list_info_status_config_topics(server: AirflowServer) -> None:
    cfg = _pipeline(server, "info")
    server.sync_dags()
    name, topic = cfg.name, cfg.source.topics[0]
    listed = server.request("GET", "/cdcflow/connectors").body
    assert name in listed and isinstance(listed, list)
    expanded = server.request("GET", "/cdcflow/connectors?expand=status&expand=info").body[name]
    assert expanded["status"] == {"name": name, "connector": {"state": "PAUSED", "worker_id": "airflow"},
                                  "tasks": [{"id": 0, "state": "PAUSED", "worker_id": "airflow"}], "type": "sink"}
    assert expanded["info"]["type"] == "sink" and expanded["info"]["tasks"] == [{"connector": name, "task": 0}]
    config = server.request("GET", f"/cdcflow/connectors/{name}/config").body
    assert config["connector.class"] == "cdcflow.Pipeline" and config["topics"] == topic
    assert config["sinks.0.type"] == "mysql" and config["window.max_records"] == "100000"
    assert all(isinstance(v, str) for v in config.values())
    assert server.request("GET", f"/cdcflow/connectors/{name}").body == expanded["info"]
    assert server.request("GET", f"/cdcflow/connectors/{name}/topics").body == {name: {"topics": [topic]}}


def test_a_kafka_connect_client_from_pypi_logs_in_with_http_basic(server: AirflowServer) -> None:
    """kafka-connect-py, as its users run it: HTTP Basic with Airflow's users (issue 26), Connect's root
    resource, and KIP-1017's /health without credentials."""
    import requests
    from kafka_connect import KafkaConnect

    from cdcflow import __version__

    cfg = _pipeline(server, "kcp")
    server.sync_dags()
    name, topic, url = cfg.name, cfg.source.topics[0], server.base + "/cdcflow"
    admin = KafkaConnect(url, auth=f"admin:{PASSWORDS['admin']}")
    root = admin.get_cluster_info()
    assert root["version"] == __version__ and set(root) == {"version", "commit", "kafka_cluster_id"}
    assert name in admin.list_connectors()
    assert admin.get_connector_status(name)["connector"]["state"] == "PAUSED"
    assert admin.get_connector_config(name)["topics"] == topic
    assert admin.list_connector_topics(name) == {name: {"topics": [topic]}}
    assert "cdcflow.Pipeline" in [p["class"] for p in admin.list_connector_plugins()]
    admin.resume_connector(name)
    assert admin.get_connector_status(name)["connector"]["state"] == "RUNNING"
    admin.pause_connector(name)
    assert admin.get_connector_status(name)["connector"]["state"] == "PAUSED"
    # the same users and roles as Airflow's: a viewer reads and may not change; a wrong password is 401
    viewer = KafkaConnect(url, auth=f"viewer:{PASSWORDS['viewer']}")
    assert viewer.get_connector_status(name)["name"] == name
    with pytest.raises(requests.HTTPError) as refused:
        viewer.resume_connector(name)
    assert refused.value.response.status_code == 403 and "viewer" in refused.value.response.json()["message"]
    for auth in (f"admin:{PASSWORDS['viewer']}", "nobody:x"):
        with pytest.raises(requests.HTTPError) as wrong:
            KafkaConnect(url, auth=auth).list_connectors()
        assert wrong.value.response.status_code == 401, auth
        assert wrong.value.response.json()["message"].startswith(f"user '{auth.split(':')[0]}': ")
    garbled = server.request("GET", "/cdcflow/connectors", user=None, headers={"Authorization": "Basic !!"})
    assert garbled.status == 401 and "base64 of USER:PASSWORD" in garbled.body["message"]
    health = requests.get(url + "/health", timeout=30)
    assert health.status_code == 200 and health.json() == {"status": "healthy",
                                                           "message": "cdcflow is ready to handle requests"}


def test_a_kafka_connect_client_creates_changes_and_deletes_a_pipeline(server: AirflowServer,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """PUT /connectors/{name}/config and DELETE /connectors/{name} with kafka-connect-py (issue 26):
    201 for a new pipeline, 200 for a change, 400 naming the field for a bad config, 409 until
    STOPPED, then 204 and the file is gone. The file is nested YAML in the server's config dir."""
    import requests
    import yaml
    from kafka_connect import KafkaConnect

    answers: list[requests.Response] = []  # what the client got, as it got it (real HTTP)
    for verb in ("put", "delete"):
        real = getattr(requests, verb)
        monkeypatch.setattr(requests, verb, lambda *a, real=real, **kw: answers.append(real(*a, **kw)) or answers[-1])
    name = unique("crud")
    topic, path, url = f"t.{name}", server.config_dir / f"{name}.yaml", server.base + "/cdcflow"
    admin = KafkaConnect(url, auth=f"admin:{PASSWORDS['admin']}")
    config = {"connector.class": "cdcflow.Pipeline", "tasks.max": "1", "topics": topic,
              "window.max_records": "500", "window.max_duration": "30s",
              "sinks.0.type": "mysql", "sinks.0.name": "orders", "sinks.0.table": name,
              "sinks.0.create_table": "true", "sinks.0.primary_key": '["id"]',
              "errors.tolerance": "all", "errors.dlq_topic": f"{topic}.dlq"}
    try:
        created = admin.update_connector(name, config)
        assert answers[-1].status_code == 201, answers[-1].text
        assert answers[-1].headers["Location"] == f"/cdcflow/connectors/{name}"
        assert created["name"] == name and created["type"] == "sink" and created["config"]["topics"] == topic
        written = yaml.safe_load(path.read_text())  # nested, readable YAML; defaults left out
        assert written["name"] == name and written["source"] == {"topics": [topic]}
        assert written["sinks"] == [{"type": "mysql", "name": "orders", "table": name, "primary_key": ["id"],
                                     "create_table": True}]
        got = admin.get_connector_config(name)
        assert {k: got[k] for k in config} == {**config, "window.max_duration": "30.0"}
        status = admin.get_connector_status(name)["connector"]
        assert status["state"] == "UNASSIGNED" and "min_file_process_interval" in status["trace"]

        # a change: 200, the same file
        admin.update_connector(name, {**got, "window.max_records": "250"})
        assert answers[-1].status_code == 200, answers[-1].text
        assert admin.get_connector_config(name)["window.max_records"] == "250"
        assert yaml.safe_load(path.read_text())["window"]["max_records"] == 250
        assert sorted(p.name for p in server.config_dir.iterdir() if name in p.name) == [path.name]

        # a bad config: Connect's 400, naming the field and what was expected; the file stays
        with pytest.raises(requests.HTTPError) as bad:
            admin.update_connector(name, {**got, "window.max_records": "0", "errors.tolerance": "some"})
        assert bad.value.response.status_code == 400
        body = bad.value.response.json()
        assert body["error_code"] == 400 and set(body) == {"error_code", "message"}
        assert "window.max_records: expected input should be greater than or equal to 1" in body["message"]
        assert "errors.tolerance: expected input should be 'none' or 'all'" in body["message"]
        with pytest.raises(requests.HTTPError) as other:
            admin.update_connector(name, {**got, "name": "another"})
        assert other.value.response.json()["message"] == (
            f"Connector name configuration (another) doesn't match connector name in the URL ({name})")
        assert yaml.safe_load(path.read_text())["window"]["max_records"] == 250
        # names that are not pipeline names never reach the file system
        for bad_name in ("..", ".hidden", "a%5Cb"):
            r = server.request("PUT", f"/cdcflow/connectors/{bad_name}/config", config)
            assert r.status == 400 and "not a valid pipeline name" in r.body["message"], (bad_name, r.text)
            r = server.request("DELETE", f"/cdcflow/connectors/{bad_name}")
            assert r.status == 400 and "not a valid pipeline name" in r.body["message"], (bad_name, r.text)
        assert sorted(p.name for p in server.config_dir.parent.iterdir() if p.suffix in (".yaml", ".yml")) == []
        # a viewer may neither create, change nor delete
        for method, p, body in (("PUT", f"/cdcflow/connectors/{name}/config", got),
                                ("PUT", f"/cdcflow/connectors/{unique('crud')}/config", config),
                                ("DELETE", f"/cdcflow/connectors/{name}", None)):
            r = server.request(method, p, body, user="viewer")
            assert r.status == 403 and "viewer" in r.body["message"], (method, p, r.text)

        # DELETE only while STOPPED
        with pytest.raises(requests.HTTPError) as running:
            admin.delete_connector(name)
        assert running.value.response.status_code == 409
        message = running.value.response.json()["message"]
        assert "STOPPED" in message and f"'/connectors/{name}/stop'" in message and "kept" in message
        assert path.exists()
        server.sync_dags()  # what the dag-processor does within min_file_process_interval
        admin.stop_connector(name)
        assert admin.delete_connector(name) is None and answers[-1].status_code == 204
        assert not path.exists()
        with pytest.raises(requests.HTTPError) as gone:
            admin.get_connector_config(name)
        assert gone.value.response.status_code == 404
        assert gone.value.response.json()["message"].startswith(f"Connector {name} not found")
        assert name not in admin.list_connectors()
        assert _store(server).operator.get_state(name) == "stopped"  # kept: the same name created again continues
    finally:
        path.unlink(missing_ok=True)


def test_pause_resume_stop_restart_map_onto_airflow(server: AirflowServer, use_server_store: None) -> None:
    cfg = _pipeline(server, "life")
    server.sync_dags()
    name, url = cfg.name, f"/cdcflow/connectors/{cfg.name}"
    assert server.request("PUT", f"{url}/resume").status == 202
    assert _dag(server, name)["is_paused"] is False
    assert server.request("GET", f"{url}/status").body["connector"]["state"] == "RUNNING"
    assert server.request("PUT", f"{url}/pause").status == 202
    assert _dag(server, name)["is_paused"] is True
    assert server.request("GET", f"{url}/status").body["connector"]["state"] == "PAUSED"

    restart = server.request("POST", f"{url}/restart")
    assert restart.status == 202, restart.text
    runs = server.request("GET", f"/api/v2/dags/{name}/dagRuns").body["dag_runs"]
    assert [r["dag_run_id"] for r in runs] == [restart.body["run_id"]]
    assert runs[0]["state"] == "queued" and runs[0]["triggering_user_name"] == "admin"

    assert server.request("PUT", f"{url}/stop").status == 204
    st = server.request("GET", f"{url}/status").body
    assert st["connector"]["state"] == "STOPPED" and st["tasks"] == []  # as Connect: no tasks when stopped
    assert _dag(server, name)["is_paused"] is True
    # a stopped pipeline plans no window, not even the queued one: the run is skipped, offsets stay
    with pytest.raises(PipelineStopped, match="STOPPED"):
        runner.plan(cfg, restart.body["run_id"], {}, _store(server))
    refused = server.request("POST", f"{url}/restart")
    assert refused.status == 409 and "STOPPED" in refused.body["message"]
    assert server.request("PUT", f"{url}/resume").status == 202
    assert _store(server).operator.get_state(name) == "running" and _dag(server, name)["is_paused"] is False


def test_replay_and_run_now_are_validated_and_triggered(server: AirflowServer) -> None:
    cfg = _pipeline(server, "replay")
    server.sync_dags()
    url, topic = f"/cdcflow/connectors/{cfg.name}", cfg.source.topics[0]
    bad = server.request("POST", f"{url}/replay", {"start_offsets": {"other.topic": {"0": 5}}})
    assert bad.status == 400 and "not a topic of this pipeline" in bad.body["message"]
    bad = server.request("POST", f"{url}/run", {"conf": {"max_records": 0}})
    assert bad.status == 400 and "max_records: expected an integer >= 1" in bad.body["message"]
    ok = server.request("POST", f"{url}/replay", {"start_offsets": {topic: {"0": 7}}})
    assert ok.status == 202, ok.text
    run = server.request("GET", f"/api/v2/dags/{cfg.name}/dagRuns/{ok.body['run_id']}").body
    assert run["conf"] == {"start_offsets": {topic: {"0": 7}}}
    bad = server.request("POST", f"{url}/replay", {"start_time": "2026-11-20T10:00:00Z"[:-1],
                                                    "end_time": "2026-11-20T11:00:00Z"})
    assert bad.status == 400 and "start_time: '2026-11-20T10:00:00' has no time zone" in bad.body["message"]
    bad = server.request("POST", f"{url}/replay", {"end_time": "2026-11-20T11:00:00Z"})
    assert bad.status == 400 and "end_time needs start_time" in bad.body["message"]
    times = {"start_time": "2026-11-20T10:00:00Z", "end_time": "2026-11-20T11:00:00Z"}
    ok = server.request("POST", f"{url}/replay", times)
    assert ok.status == 202, ok.text
    run = server.request("GET", f"/api/v2/dags/{cfg.name}/dagRuns/{ok.body['run_id']}").body
    assert run["conf"] == times


def test_offsets_follow_connects_rules_and_examples(server: AirflowServer, use_server_store: None,
                                                  spark: Any) -> None:
    """GET/PATCH/DELETE /offsets with the request and response bodies of the Connect docs (seed 002,
    numbers sent as strings as in its example); 409 with Connect's message unless STOPPED."""
    cfg = _pipeline(server, "offs")
    server.sync_dags()
    name, topic, url = cfg.name, cfg.source.topics[0], f"/cdcflow/connectors/{cfg.name}/offsets"
    stream = cdcgen.orders_stream(60, 12, seed=3, broken=False)
    cdcgen.produce(bootstrap(), topic, stream.events)
    stats = runner.run_window(cfg, "w1", {}, _store(server), spark)
    assert stats["records"] == len(stream.events)

    got = server.request("GET", url)
    assert got.status == 200
    ends = _store(server).offsets.load(name)
    assert got.body == {"offsets": [{"partition": {"kafka_topic": topic, "kafka_partition": p},
                                     "offset": {"kafka_offset": o}} for (_t, p), o in sorted(ends.items())]}

    seed_example = {"offsets": [{"offset": {"kafka_offset": "0"},
                                 "partition": {"kafka_partition": "0", "kafka_topic": topic}}]}
    refused = server.request("PATCH", url, seed_example)
    assert refused.status == 409
    assert refused.body == {"error_code": 409, "message": (
        "Connectors must be in the STOPPED state before their offsets can be modified. This can be done for the "
        f"specified connector by issuing a 'PUT' request to the '/connectors/{name}/stop' endpoint")}
    assert server.request("DELETE", url).status == 409
    assert _store(server).offsets.load(name) == ends  # nothing moved

    assert server.request("PUT", f"/cdcflow/connectors/{name}/stop").status == 204
    altered = server.request("PATCH", url, seed_example)
    assert altered.status == 200, altered.text
    assert altered.body == {"message": "The offsets for this connector have been altered successfully"}
    assert _store(server).offsets.load(name) == {**ends, (topic, 0): 0}
    outside = server.request("PATCH", url, {"offsets": [{"partition": {"kafka_topic": topic, "kafka_partition": 0},
                                                         "offset": {"kafka_offset": 10**9}}]})
    assert outside.status == 400 and "outside the log" in outside.body["message"]
    wrong = server.request("PATCH", url, {"offsets": [{"partition": {"kafka_topic": "x", "kafka_partition": 0},
                                                       "offset": {"kafka_offset": 1}}]})
    assert wrong.status == 400 and "not a partition of this pipeline" in wrong.body["message"]

    latest = server.request("POST", f"{url}/reset", {"to": "latest"})
    assert latest.status == 200 and _store(server).offsets.load(name) == ends
    earliest = server.request("POST", f"{url}/reset", {"to": "earliest"})
    assert earliest.status == 200 and set(_store(server).offsets.load(name).values()) == {0}
    future = server.request("POST", f"{url}/reset", {"to": "timestamp", "timestamp": "2999-01-01T00:00:00Z"})
    assert future.status == 200 and _store(server).offsets.load(name) == ends  # nothing at/after: the log end
    no_zone = server.request("POST", f"{url}/reset", {"to": "timestamp", "timestamp": "2026-01-01T00:00:00"})
    assert no_zone.status == 400 and "no time zone" in no_zone.body["message"]

    deleted = server.request("DELETE", url)
    assert deleted.status == 200
    assert deleted.body == {"message": "The offsets for this connector have been reset successfully"}
    assert _store(server).offsets.load(name) == {}
    assert server.request("GET", url).body == {"offsets": []}


def test_reset_to_a_timestamp_finds_the_first_record_at_or_after_it(server: AirflowServer,
                                                                    use_server_store: None) -> None:
    """The local broker answers offset 0 for any time: the answer is checked against the records."""
    from confluent_kafka import Producer

    cfg = _pipeline(server, "ts")
    server.sync_dags()
    topic = cfg.source.topics[0]
    cdcgen.produce(bootstrap(), topic, [], partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap()})
    base = 1_800_000_000_000
    for i in range(10):
        producer.produce(topic, key=b"k", value=b"{}", partition=0, timestamp=base + i * 1000)
    producer.flush(10)
    server.request("PUT", f"/cdcflow/connectors/{cfg.name}/stop")
    for ts, want in ((base - 1, 0), (base, 0), (base + 3500, 4), (base + 9000, 9), (base + 9001, 10)):
        r = server.request("POST", f"/cdcflow/connectors/{cfg.name}/offsets/reset", {"to": "timestamp", "timestamp": ts})
        assert r.status == 200, r.text
        assert r.body["offsets"] == {f"{topic}:0": want}, ts
        assert _store(server).offsets.load(cfg.name) == {(topic, 0): want}


def test_connector_plugins_and_config_validation(server: AirflowServer) -> None:
    plugins = server.request("GET", "/cdcflow/connector-plugins").body
    assert plugins == [{"class": "cdcflow.Pipeline", "type": "sink", "version": plugins[0]["version"]}]
    everything = server.request("GET", "/cdcflow/connector-plugins?connectorsOnly=false").body
    kinds = {(p["type"], p["class"]) for p in everything}
    assert {("sink", "cdcflow.sink.mysql"), ("sink", "cdcflow.sink.elasticsearch"), ("transformation", "Cast"),
            ("transformation", "ExtractNewRecordState"), ("predicate", "TopicNameMatches"),
            ("converter", "cdcflow.converter.json_schema")} <= kinds

    ok = server.request("PUT", "/cdcflow/connector-plugins/cdcflow.Pipeline/config/validate", {
        "name": "v1", "connector.class": "cdcflow.Pipeline", "topics": "a,b", "sinks.0.type": "mysql",
        "sinks.0.name": "m", "sinks.0.table": "t", "sinks.0.primary_key": '["id"]',
        "sinks.0.columns.0.name": "id", "sinks.0.columns.0.type": "BIGINT"})
    assert ok.status == 200 and ok.body["error_count"] == 0, ok.text
    bad = server.request("PUT", "/cdcflow/connector-plugins/cdcflow.Pipeline/config/validate", {
        "name": "v2", "topics": "a", "window.max_records": "-5", "sinks.0.type": "mysql", "sinks.0.name": "m",
        "sinks.0.table": "t", "sinks.0.primary_key": '["id"]', "sinks.0.tabel": "oops",
        "sinks.0.columns.0.name": "id", "sinks.0.columns.0.type": "BIGINT"})
    assert bad.status == 200 and bad.body["error_count"] == 2, bad.text
    errors = {c["value"]["name"]: c["value"]["errors"] for c in bad.body["configs"] if c["value"]["errors"]}
    assert errors == {"window.max_records": ["expected input should be greater than or equal to 1"],
                      "sinks.0.tabel": ["expected no such field (unknown keys are rejected; check the spelling)"]}
    assert server.request("PUT", "/cdcflow/connector-plugins/Nope/config/validate", {}).status == 400


def test_a_broken_config_is_listed_with_its_errors_and_breaks_nothing(server: AirflowServer) -> None:
    good = _pipeline(server, "good")
    (server.config_dir / "broken_one.yaml").write_text("name: broken_one\nsource: {topics: [x]}\n"
                                                       "window: {max_records: zero}\nsinks: []\n")
    try:
        listed = server.request("GET", "/cdcflow/connectors?expand=status").body
        assert good.name in listed
        st = listed["broken_one"]["status"]
        assert st["connector"]["state"] == "FAILED"
        assert "line 3, window.max_records: expected input should be a valid integer" in st["connector"]["trace"]
        page = server.request("GET", "/cdcflow/", headers={"Accept": "text/html"})
        assert page.status == 200 and "config error" in page.text and "broken_one" in page.text
        action = server.request("PUT", "/cdcflow/connectors/broken_one/pause")
        assert action.status == 400 and "invalid config" in action.body["message"]
    finally:
        (server.config_dir / "broken_one.yaml").unlink()


# -- dead letters -----------------------------------------------------------------------------------

def test_redrive_after_a_fix_reaches_the_sink_once(server: AirflowServer, use_server_store: None, spark: Any) -> None:
    """A row MySQL rejects goes to the DLQ; the column is widened; the record is redriven and the next
    window writes it; a second redrive of the same range is refused."""
    cfg = _pipeline(server, "redrive")
    server.sync_dags()
    name, topic, table, dlq = cfg.name, cfg.source.topics[0], cfg.sinks[0].table, cfg.errors.dlq_topic
    stream = cdcgen.orders_stream(80, 15, seed=21)
    cdcgen.produce(bootstrap(), topic, stream.events)
    runner.run_window(cfg, "first", {}, _store(server), spark)
    assert table_rows(table) == expected(stream.state)

    page = server.request("GET", f"/cdcflow/connectors/{name}/dlq?limit=50")
    assert page.status == 200 and page.body["total"] == len(stream.broken)
    [rejected] = [d for d in page.body["records"] if d["stage"] == "sink"]
    assert rejected["error_class"] == "pymysql.err.DataError" and "Data too long" in rejected["message"]
    assert rejected["original"]["topic"] == topic and json.loads(rejected["key"])["id"] == 1018
    assert "stacktrace" not in rejected and rejected["redriven"] is None
    one = server.request("GET", f"/cdcflow/connectors/{name}/dlq/{rejected['partition']}/{rejected['offset']}")
    assert one.status == 200 and one.body["stacktrace"] and one.body["headers"] == {"trace-id": "poison"}
    small = server.request("GET", f"/cdcflow/connectors/{name}/dlq?limit=2")
    older = server.request("GET", f"/cdcflow/connectors/{name}/dlq?limit=50&before={small.body['next_before']}")
    seen = {(d["partition"], d["offset"]) for d in small.body["records"] + older.body["records"]}
    assert len(seen) == len(stream.broken)  # paging covers every record once

    with mysql_engine().begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE `{table}` MODIFY customer VARCHAR(128)")
    sel = {"partition": rejected["partition"], "start": rejected["offset"], "end": rejected["offset"]}
    done = server.request("POST", f"/cdcflow/connectors/{name}/dlq/redrive", sel)
    assert done.status == 200, done.text
    assert done.body["matched"] == 1 and done.body["already_redriven"] == []
    assert done.body["redriven"][0]["target_topic"] == topic

    back = [m for m in read_topic(topic) if dict(m.headers() or []).get("__cdcflow.redrive")]
    assert len(back) == 1
    headers = dict(back[0].headers())
    assert headers["trace-id"] == b"poison" and not any(k.startswith("__connect.errors.") for k in headers)
    assert json.loads(headers["__cdcflow.redrive"])["by"] == "admin"

    runner.run_window(cfg, "second", {}, _store(server), spark)
    with mysql_engine().connect() as conn:
        row = conn.execute(sa.text(f"SELECT customer FROM `{table}` WHERE id = 1018")).scalar_one()
    assert row == "x" * 80

    again = server.request("POST", f"/cdcflow/connectors/{name}/dlq/redrive", sel)
    assert again.status == 409 and "redriven already" in again.body["message"] and "admin" in again.body["message"]
    by_stage = server.request("POST", f"/cdcflow/connectors/{name}/dlq/redrive", {"stage": "sink"})
    assert by_stage.status == 409  # the only sink-stage record was redriven: nothing is sent twice
    shown = server.request("GET", f"/cdcflow/connectors/{name}/dlq?limit=50").body["records"]
    assert [d["redriven"]["status"] for d in shown if d["stage"] == "sink"] == ["done"]
    assert len([m for m in read_topic(topic) if dict(m.headers() or []).get("__cdcflow.redrive")]) == 1
    bad = server.request("POST", f"/cdcflow/connectors/{name}/dlq/redrive", {"start": 3})
    assert bad.status == 400 and "needs its DLQ partition" in bad.body["message"]
    assert read_topic(dlq)  # the DLQ itself is untouched


# -- the page, in a real browser ---------------------------------------------------------------------

def test_the_page_in_chromium(server: AirflowServer, use_server_store: None, spark: Any) -> None:
    from tests.browser import Browser

    cfg = _pipeline(server, "page")
    server.sync_dags()
    name, topic = cfg.name, cfg.source.topics[0]
    stream = cdcgen.orders_stream(90, 15, seed=5)
    cdcgen.produce(bootstrap(), topic, stream.events)
    runner.run_window(cfg, "manual__page_window", {}, _store(server), spark)
    ends = _store(server).offsets.load(name)

    browser = Browser()
    try:
        browser.set_cookie(server.base + "/", "_token", server.tokens["admin"])
        browser.open(f"{server.base}/cdcflow/")
        index = browser.text()
        assert name in index and "PAUSED" in index and "committed" in index
        assert f"Spark at {os.environ.get('CDCFLOW_SPARK_REMOTE', 'sc://127.0.0.1:15002')}: up" in index
        browser.screenshot(SCREENSHOTS / "cdcflow-pipelines.png")

        browser.open(f"{server.base}/cdcflow/pipelines/{name}")
        text = browser.text()
        assert f"{name} PAUSED" in text
        partitions = browser.text("#partitions")
        for (t, p), off in ends.items():
            assert f"{t}\t{p}\t{off}\t{off}\t0" in partitions  # committed = log end, lag 0
        windows = browser.text("#windows")
        assert "manual__page_window" in windows and "committed" in windows and str(len(stream.events)) in windows
        assert "orders_mysql:" in windows and "upserted" in windows
        dlq = browser.text("#dlq")
        assert "Data too long for column 'customer'" in dlq and "pymysql.err.DataError" in dlq
        assert "value is not a JSON object" in dlq and "converter" in dlq
        assert f"{topic}[" in dlq
        assert "max_records: 100000" in browser.text("#config")
        browser.screenshot(SCREENSHOTS / "cdcflow-pipeline.png")

        # an action asks for confirmation, then goes through the API: Resume, then Stop
        browser.eval("document.querySelector('button[data-url$=\"/resume\"]').click()")
        browser.wait_event("Page.loadEventFired", timeout=20)  # the page reloads after the action
        assert any("Resume" in d for d in browser.dialogs)
        assert _dag(server, name)["is_paused"] is False
        assert f"{name} RUNNING" in browser.text()
    finally:
        browser.close()

    viewer = Browser()
    try:
        viewer.set_cookie(server.base + "/", "_token", server.tokens["viewer"])
        viewer.open(f"{server.base}/cdcflow/pipelines/{name}")
        assert "read-only: you may not change this pipeline" in viewer.text()
        disabled = viewer.eval("[...document.querySelectorAll('.actions button')].every(b => b.disabled)")
        assert disabled is True
    finally:
        viewer.close()


def test_the_page_shows_a_composed_index_its_relations_and_its_backlog(server: AirflowServer, use_server_store: None,
                                                                       spark: Any) -> None:
    """A composed index (docs/composed-documents.md) whose window found more documents affected than its
    max_documents: the page lists its relations, its document version and what was carried over, and
    the window's row says how many documents it rebuilt; screenshot for docs/composed-documents.md."""
    from tests.browser import Browser
    from tests.composed import Shop, pipeline
    from tests.fixtures.debezium import shop

    prefix = unique("pagedoc")
    cfg = pipeline(server.config_dir, prefix, max_documents=2)
    server.sync_dags()
    s = Shop(prefix)
    s.put("customers", id=1, name="Ada", tier="gold")
    for oid in (1, 2, 3):
        s.put("orders", id=oid, customer_id=1, status="new", total="5.00", created=shop.moment("2026-01-01T00:00:00"))
    s.produce(set())
    runner.run_window(cfg, "manual__composed", {}, _store(server), spark)

    browser = Browser()
    try:
        browser.set_cookie(server.base + "/", "_token", server.tokens["admin"])
        browser.open(f"{server.base}/cdcflow/pipelines/{cfg.name}")
        composed = browser.text("#composed")
        assert f"{prefix}-orders" in composed and f"{prefix}_orders (root, key id)" in composed, composed
        assert (f"lines.product: {prefix}_products (N:1 lookup on {prefix}_products.id = "
                f"{prefix}_order_lines.product_id)") in composed, composed
        assert f"lines: {prefix}_order_lines (1:N nested on {prefix}_order_lines.order_id = {prefix}_orders.id)" \
            in composed, composed
        assert "\t1\t1" in composed and "at most 2 per window" in composed, composed  # version 1, one carried
        windows = browser.text("#windows")
        assert "orders: 2 documents rebuilt of 3 affected, 1 carried over (backlog 1)" in windows, windows
        browser.screenshot(SCREENSHOTS / "cdcflow-composed.png")
    finally:
        browser.close()
    metrics = server.request("GET", "/cdcflow/metrics", user=None).text
    assert f'cdcflow_document_backlog{{pipeline="{cfg.name}",sink="orders"}} 1.0' in metrics
    for outcome, n in (("affected", 3), ("rebuilt", 2), ("carried", 1)):
        assert f'cdcflow_documents_total{{outcome="{outcome}",pipeline="{cfg.name}",sink="orders"}} {n}.0' in metrics \
            or f'cdcflow_documents_total{{pipeline="{cfg.name}",sink="orders",outcome="{outcome}"}} {n}.0' in metrics, \
            [line for line in metrics.splitlines() if "cdcflow_documents" in line]


CHARTS_JS = """(() => {
  const chart = (name) => document.querySelector(`#charts svg[data-chart="${name}"]`);
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; };
  return {
    lines: [...chart("lag").querySelectorAll("g.series")].map(g => ({name: g.dataset.series,
      points: g.querySelector("polyline").getAttribute("points").trim().split(/\\s+/).length,
      dots: g.querySelectorAll("circle").length})),
    legend: [...chart("lag").querySelectorAll("g.legend text")].map(t => t.textContent),
    records: [...chart("records").querySelectorAll("rect.bar")].map(r => [r.querySelector("title").textContent,
                                                                          +r.getAttribute("height")]),
    seconds: chart("seconds").querySelectorAll("rect.bar").length,
    boxes: ["lag", "records", "seconds"].map(n => box(chart(n))),
    page: document.documentElement.clientWidth,
  };
})()"""


def test_the_page_draws_lag_and_windows_in_chromium(server: AirflowServer, use_server_store: None, spark: Any) -> None:
    """Windows that each read part of what waits, with more produced in between: the page draws a lag
    line per partition and a bar per window, inside the page; screenshot for docs/operating.md."""
    from tests.browser import Browser

    cfg = _pipeline(server, "charts", window={"max_records": 40})
    server.sync_dags()
    name, topic = cfg.name, cfg.source.topics[0]
    runs = []
    for i in range(4):
        stream = cdcgen.orders_stream(60, 20, seed=10 + i, broken=False)
        cdcgen.produce(bootstrap(), topic, stream.events, create=i == 0)
        runs.append(f"manual__charts_{i}")
        runner.run_window(cfg, runs[-1], {}, _store(server), spark)
    lagging = {tp for tp, rows in _store(server).lag.entries(name).items()
               if any(e.log_end is not None and e.committed is not None and e.log_end > e.committed for e in rows)}
    assert lagging  # 40 records a window: every window left some behind

    browser = Browser()
    try:
        browser.set_cookie(server.base + "/", "_token", server.tokens["admin"])
        browser.open(f"{server.base}/cdcflow/pipelines/{name}")
        drawn = browser.eval(CHARTS_JS)
        partitions = sorted(f"{t}[{p}]" for t, p in _store(server).offsets.load(name))
        assert [line["name"] for line in drawn["lines"]] == partitions == drawn["legend"]
        for line in drawn["lines"]:
            assert line["points"] == line["dots"] >= len(runs)  # a commit per window, a plan from the second on
        assert [title.split()[0] for title, _ in drawn["records"]] == runs  # oldest at the left
        assert all(height > 0 for _, height in drawn["records"]) and drawn["seconds"] == len(runs)
        for left, top, width, height in drawn["boxes"]:
            assert width > 300 and height > 150 and left >= 0 and left + width <= drawn["page"]
        text = browser.text("#charts")
        assert "Lag per partition" in text and f"Records per window (last {len(runs)})" in text
        assert "Duration per window" in text and "time (UTC)" in text
        shot = browser.screenshot(SCREENSHOTS / "cdcflow-pipeline-charts.png")
        assert shot.stat().st_size > 20_000
    finally:
        browser.close()


def _iframe_text(browser: Any, timeout: float = 40.0) -> str:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = browser.eval("(() => { const f = document.querySelector('iframe'); "
                            "return f && f.contentDocument && f.contentDocument.body ? f.contentDocument.body.innerText : ''; })()")
        if text and "Partitions" in text or text and "Pipelines" in text:
            return str(text)
        time.sleep(0.5)
    raise AssertionError("Airflow's UI did not show the cdcflow page in its iframe:\n" + browser.text()[:2000])


def test_the_page_is_a_tab_of_the_dag_and_an_entry_of_airflows_navigation(server: AirflowServer) -> None:
    from tests.browser import Browser

    cfg = _pipeline(server, "tab")
    server.sync_dags()
    browser = Browser()
    try:
        browser.set_cookie(server.base + "/", "_token", server.tokens["admin"])
        browser.open(f"{server.base}/dags/{cfg.name}/plugin/cdcflow-pipeline")
        inner = _iframe_text(browser)
        assert f"{cfg.name} PAUSED" in inner and "Partitions" in inner
        assert "cdcflow pipeline" in browser.text()  # the tab's name in Airflow's own UI
        browser.screenshot(SCREENSHOTS / "cdcflow-in-airflow-dag-tab.png")
        browser.open(f"{server.base}/plugin/cdcflow")
        assert cfg.name in _iframe_text(browser)
    finally:
        browser.close()


def test_the_cli_uses_the_same_service(server: AirflowServer, use_server_store: None, spark: Any) -> None:
    import subprocess

    cfg = _pipeline(server, "cli")
    server.sync_dags()
    name, topic = cfg.name, cfg.source.topics[0]
    stream = cdcgen.orders_stream(50, 10, seed=8)
    cdcgen.produce(bootstrap(), topic, stream.events)
    runner.run_window(cfg, "cli_window", {}, _store(server), spark)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["cdcflow", *args], env=server.env, cwd=ROOT, capture_output=True, text=True,
                              timeout=120)

    shown = cli("dlq", "show", name, "--limit", "50")
    assert shown.returncode == 0, shown.stderr
    assert f"{len(stream.broken)} records" in shown.stdout and "stage=sink pymysql.err.DataError" in shown.stdout
    refused = cli("offsets", "set", name, f"{topic}:0=0")
    assert refused.returncode == 2 and "Connectors must be in the STOPPED state" in refused.stderr
    assert cli("stop", name).stdout.strip() == f"{name}: STOPPED"
    assert server.request("GET", f"/cdcflow/connectors/{name}/status").body["connector"]["state"] == "STOPPED"
    done = cli("offsets", "set", name, f"{topic}:0=0")
    assert done.returncode == 0, done.stderr
    assert _store(server).offsets.load(name)[(topic, 0)] == 0
    status = cli("status", name)
    assert status.returncode == 0 and "STOPPED" in status.stdout and "cli_window committed" in status.stdout
    assert cli("resume", name).stdout.strip() == f"{name}: RUNNING"
    redrive = cli("dlq", "redrive", name, "--stage", "converter")
    assert redrive.returncode == 0, redrive.stderr
    assert "2 of 2 matching records sent" in redrive.stdout
    again = cli("dlq", "redrive", name, "--stage", "converter")
    assert again.returncode == 2 and "redriven already" in again.stderr


def test_a_schema_change_under_pause_waits_for_an_operator(server: AirflowServer, use_server_store: None,
                                                          spark: Any) -> None:
    """schema_changes: pause: a new column stops the pipeline with the change pending (status trace, the
    schema endpoint) until it is approved through the API, and the next change until it is rejected."""
    from cdcflow.errors import SchemaChangePending
    from tests.fixtures.debezium import mysql_all_types as fx
    from tests.integration.spark_jobs.test_schema_changes import columns, later

    cfg = _pipeline(server, "pause", schema_changes="pause", sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": unique("paused"), "create_table": True}])
    server.sync_dags()
    name, topic, table, store = cfg.name, cfg.source.topics[0], cfg.sinks[0].table, _store(server)
    url = f"/cdcflow/connectors/{name}"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()[:3]], partitions=1)
    runner.run_window(cfg, "w1", {}, store, spark)

    def added(fields: dict[str, Any]) -> None:
        fields["c_note"] = {"type": "string", "optional": True, "field": "c_note"}

    def note(before: dict[str, Any], after: dict[str, Any]) -> None:
        before["c_note"], after["c_note"] = None, "after the approval"

    cdcgen.produce(bootstrap(), topic, [later(added, note)], partitions=1, create=False)
    offsets = store.offsets.load(name)
    with pytest.raises(SchemaChangePending, match=rf"pipeline '{name}' is stopped until an operator approves or "
                                                  rf"rejects this change: table '{table}' column 'c_note': new field"):
        runner.run_window(cfg, "w2", {}, store, spark)
    assert store.offsets.load(name) == offsets and "c_note" not in columns(table)
    status = server.request("GET", f"{url}/status").body
    assert status["connector"]["state"] == "STOPPED" and "cdcflow schema apply" in status["connector"]["trace"]
    [pending] = server.request("GET", f"{url}/schema").body
    assert (pending["decision"], pending["change"]["column"], pending["change"]["change"]) == ("pending", "c_note", "add")
    with pytest.raises(PipelineStopped):  # nothing past the change runs until a decision
        runner.plan(cfg, "w3", {}, store)

    from tests.browser import Browser  # the page shows the pending change; its Approve button decides

    browser = Browser()
    try:
        browser.set_cookie(server.base + "/", "_token", server.tokens["admin"])
        browser.open(f"{server.base}/cdcflow/pipelines/{name}")
        shown = browser.text("#schema-changes") + browser.text("table.schema-changes")
        assert "waiting for a decision" in shown and f"pending\t{table}\tc_note\tadd" in shown, shown
        assert "schema_changes: pause" in browser.text()
        browser.screenshot(SCREENSHOTS / "cdcflow-schema-pending.png")
        browser.eval("document.querySelector('button[data-url$=\"/schema/approve\"]').click()")
        browser.wait_event("Page.loadEventFired", timeout=20)
        assert any("Apply these 1 schema change(s)" in d for d in browser.dialogs)
    finally:
        browser.close()
    [approved] = server.request("GET", f"{url}/schema").body
    assert approved["decision"] == "approved" and approved["decided_by"] == "admin"
    assert server.request("GET", f"{url}/status").body["connector"]["state"] != "STOPPED"
    stats = runner.run_window(cfg, "w3", {}, store, spark)
    assert columns(table)["c_note"][0] == "longtext" and stats["schema_changes"][0]["column"] == "c_note"
    with mysql_engine().connect() as conn:
        assert conn.execute(sa.text(f"SELECT c_note FROM `{table}` WHERE id = 1")).scalar_one() == "after the approval"

    def widened(fields: dict[str, Any]) -> None:
        added(fields)
        fields["c_mediumint"]["type"] = "int64"

    cdcgen.produce(bootstrap(), topic, [later(widened, note)], partitions=1, create=False)
    with pytest.raises(SchemaChangePending, match="column 'c_mediumint': int\\(11\\) -> BIGINT"):
        runner.run_window(cfg, "w4", {}, store, spark)
    assert server.request("POST", f"{url}/schema/reject").status == 200
    assert server.request("POST", f"{url}/schema/reject").status == 409  # nothing left to decide
    stats = runner.run_window(cfg, "w5", {}, store, spark)
    assert columns(table)["c_mediumint"][0] == "int(11)" and stats["dead_lettered"] == 0
    decisions = {(c["change"]["column"], c["decision"], c["decided_by"])
                 for c in server.request("GET", f"{url}/schema").body}
    assert decisions == {("c_note", "approved", "admin"), ("c_mediumint", "rejected", "admin")}
