"""Airflow as it runs in production: a real scheduler (LocalExecutor: every task in its own process),
dag-processor and api-server with the project's DAGs; windows triggered through the REST API run on
the long-lived Spark (the Spark Connect server of scripts/services.sh)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from cdcflow import cdcgen
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from tests.airflow_server import AirflowServer, make_server
from tests.helpers import bootstrap, expected, table_rows, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.system, pytest.mark.services]
TASKS = ("plan_window", "process_window", "commit_offsets")


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowServer]:
    srv = make_server(tmp_path_factory.mktemp("scheduler"))
    srv.own_dags_folder()  # the project's DAG files, and the downstream DAGs the tests write beside them
    srv.env["AIRFLOW__CORE__EXECUTOR"] = "cdcflow.airflow.executor.PreloadingLocalExecutor"  # as services.sh
    srv.env["AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC"] = "2"
    srv.env["AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL"] = "5"
    try:
        srv.start()
        srv.start_scheduler(triggerer=True)
        yield srv
    finally:
        srv.stop()


def _t(iso: str) -> float:
    from datetime import datetime  # noqa: PLC0415

    return datetime.fromisoformat(iso).timestamp()


def test_three_windows_triggered_through_the_rest_api_run_in_fresh_task_processes_on_the_long_lived_spark(
        airflow: AirflowServer) -> None:
    tag = unique("sched")
    cfg = load_pipeline(write_pipeline(airflow.config_dir, tag, f"t.{tag}", tag, schedule=None))
    topic = cfg.source.topics[0]
    stream = cdcgen.orders_stream(900, 120, seed=31, broken=False)
    cdcgen.produce(bootstrap(), topic, stream.events)
    airflow.wait_for_dag(cfg.name)
    assert airflow.request("PATCH", f"/api/v2/dags/{cfg.name}", {"is_paused": False}).status == 200

    # the first window starts at given offsets (a replay from 0 on partitions 0-2), the next two
    # continue from the stored offsets; max_records keeps the first two to 300 records each
    confs = [{"start_offsets": {topic: {"0": 0, "1": 0, "2": 0}}, "max_records": 300}, {"max_records": 300}, {}]
    run_ids = []
    for i, conf in enumerate(confs):
        r = airflow.request("POST", f"/api/v2/dags/{cfg.name}/dagRuns",
                            {"dag_run_id": f"rest-{i}", "logical_date": None, "conf": conf})
        assert r.status == 200, r.text
        run_ids.append(r.body["dag_run_id"])

    runs = airflow.wait_for_runs(cfg.name, run_ids)
    assert [r["state"] for r in runs] == ["success"] * 3, airflow.log_tail()

    print("run durations (s):", [round((_t(r["end_date"]) - _t(r["start_date"])), 1) for r in runs])
    # consecutive (max_active_runs=1): each run started after the previous one ended
    for before, after in zip(runs, runs[1:], strict=False):
        assert after["start_date"] >= before["end_date"]
    # each task in its own process, none of them the scheduler's
    pids = []
    for run_id in run_ids:
        for task in TASKS:
            ti = airflow.request("GET", f"/api/v2/dags/{cfg.name}/dagRuns/{run_id}/taskInstances/{task}").body
            assert ti["state"] == "success", ti
            pids.append(ti["pid"])
    assert len(set(pids)) == len(pids) and all(p for p in pids), pids
    assert not {p for p in pids} & {c.pid for c in airflow.components}
    # on the long-lived Spark (the process_window task's own statistics say where it ran)
    for run_id, records in zip(run_ids, [300, 300, len(stream.events) - 600], strict=True):
        xcom = airflow.request("GET", f"/api/v2/dags/{cfg.name}/dagRuns/{run_id}/taskInstances/process_window/"
                                      "xcomEntries/return_value").body
        stats = xcom["value"]
        assert stats["spark"].startswith("connect sc://127.0.0.1:"), stats
        assert stats["records"] == records
        assert stats["preloaded"] is True  # forked from a worker of the PreloadingLocalExecutor

    # no overlap and no gap: per partition the windows' ranges follow each other from offset 0
    store = StateStore(airflow.store_url)
    windows = [store.ledger.get_window(cfg.name, r) for r in run_ids]
    assert [w.origin for w in windows] == ["params", "stored", "stored"]
    for part in range(3):
        ranges = [next((p.start, p.end) for p in w.partitions if p.partition == part) for w in windows]
        assert ranges[0][0] == 0
        for (_s1, e1), (s2, _e2) in zip(ranges, ranges[1:], strict=False):
            assert s2 == e1, ranges
        assert store.offsets.load(cfg.name)[(topic, part)] == ranges[-1][1]
    assert sum(p.end - p.start for w in windows for p in w.partitions) == len(stream.events)
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)


def test_airflow_backfill_replays_three_intervals_without_moving_the_live_pipeline(airflow: AirflowServer) -> None:
    from datetime import UTC, datetime  # noqa: PLC0415

    from tests.integration.cdcflow.window.test_time_ranges import BASE, H, five_hours, in_range  # noqa: PLC0415

    tag = unique("backfill")
    cfg = load_pipeline(write_pipeline(airflow.config_dir, tag, f"t.{tag}", tag, schedule="@hourly"))
    topic = cfg.source.topics[0]
    stream = five_hours(9)
    cdcgen.produce(bootstrap(), topic, stream.events)
    airflow.wait_for_dag(cfg.name)
    assert airflow.request("PATCH", f"/api/v2/dags/{cfg.name}", {"is_paused": False}).status == 200

    # the live pipeline moves on: a window reads everything (unpausing may add a scheduled run too)
    r = airflow.request("POST", f"/api/v2/dags/{cfg.name}/dagRuns", {"dag_run_id": "live-0", "logical_date": None})
    assert r.status == 200, r.text
    assert airflow.wait_for_runs(cfg.name, ["live-0"])[0]["state"] == "success", airflow.log_tail()
    _wait_until_idle(airflow, cfg.name)
    store = StateStore(airflow.store_url)
    live_offsets = store.offsets.load(cfg.name)
    assert sum(live_offsets.values()) == len(stream.events)
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)

    # `airflow backfill create` over 01:00..03:00: three hourly runs, [01:00, 02:00) .. [03:00, 04:00)
    start = datetime.fromtimestamp((BASE + H) / 1000, UTC)
    end = datetime.fromtimestamp((BASE + 3 * H) / 1000, UTC)
    airflow.airflow("backfill", "create", "--dag-id", cfg.name, "--from-date", start.isoformat(),
                    "--to-date", end.isoformat())
    runs = _wait_for_backfill(airflow, cfg.name, 3)
    assert [r["state"] for r in runs] == ["success"] * 3, airflow.log_tail()

    # newer changes are never overwritten by the replayed older ones; the live offsets stay
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)
    assert store.offsets.load(cfg.name) == live_offsets
    windows = sorted((store.ledger.get_window(cfg.name, r["dag_run_id"]) for r in runs), key=lambda w: w.interval)
    assert [w.origin for w in windows] == ["backfill"] * 3
    assert [w.interval for w in windows] == [(datetime(2026, 11, 20, h), datetime(2026, 11, 20, h + 1))
                                             for h in (1, 2, 3)]
    for w, h in zip(windows, (1, 2, 3), strict=True):
        assert w.status == "committed"
        assert w.total_records == len(in_range(stream.events, BASE + h * H, BASE + (h + 1) * H))
        sinks = w.stats["sinks"][cfg.sinks[0].name]
        assert sinks["stale"] > 0  # the replayed changes met newer rows and were skipped
    for part in range(3):  # the three slices follow each other, no gap, no overlap
        ranges = [next((p.start, p.end) for p in w.partitions if p.partition == part) for w in windows]
        assert all(e1 == s2 for (_s1, e1), (s2, _e2) in zip(ranges, ranges[1:], strict=False)), ranges
    # backfill runs may run side by side in Airflow; their writes to the sinks never overlap
    held = sorted((w.stats["writer"]["from"], w.stats["writer"]["to"]) for w in windows)
    assert all(t1 <= f2 for (_f1, t1), (f2, _t2) in zip(held, held[1:], strict=False)), held


def _wait_until_idle(server: AirflowServer, dag_id: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        server.revive()
        runs = server.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?state=queued&state=running").body
        if runs["total_entries"] == 0:
            return
        assert time.monotonic() < deadline, f"runs still active: {runs}\n{server.log_tail()}"
        time.sleep(2)


def _wait_for_backfill(server: AirflowServer, dag_id: str, count: int, timeout: float = 600) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        server.revive()  # the scheduler can exit on a race inside Airflow's backfill (AirflowServer.revive)
        runs = [r for r in server.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?run_type=backfill").body["dag_runs"]]
        if len(runs) >= count and all(r["state"] in ("success", "failed") for r in runs):
            return sorted(runs, key=lambda r: r["logical_date"])
        assert time.monotonic() < deadline, f"backfill runs: {[r['state'] for r in runs]}\n{server.log_tail()}"
        time.sleep(2)


def _asset_events(server: AirflowServer, dag_id: str, timeout: float = 60) -> list[dict[str, Any]]:
    """The asset events a DAG emitted. Airflow's ``/assets/events`` answers 500 while a run that an
    event created is queued without a start date (apache/airflow#71360, fixed after the pinned
    release); the read is tried again until that run has started."""
    deadline = time.monotonic() + timeout
    while (r := server.request("GET", f"/api/v2/assets/events?source_dag_id={dag_id}")).status != 200:
        assert r.status == 500, f"{r.status}: {r.text}"
        assert time.monotonic() < deadline, f"{r.status}: {r.text}\n{server.log_tail()}"
        time.sleep(1)
    return r.body["asset_events"]


DOWNSTREAM = """
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Asset
from datetime import datetime

def report(**context):
    return sorted({{e.extra["run_id"] for evs in context["triggering_asset_events"].values() for e in evs}})

with DAG(dag_id={dag_id!r}, schedule=[Asset({uri!r})], start_date=datetime(2026, 1, 1), catchup=False,
         is_paused_upon_creation=False) as dag:
    PythonOperator(task_id="report", python_callable=report)
"""


def test_a_window_that_changed_a_table_emits_its_asset_event_after_the_commit_and_runs_the_downstream_dag(
        airflow: AirflowServer) -> None:
    """Issue 26: each sink table is an Asset; the commit task emits one event per changed target,
    with what the window did; a DAG scheduled on the table runs after it; an empty window emits none."""
    from cdcflow import assets  # noqa: PLC0415

    tag = unique("asset")
    cfg = load_pipeline(write_pipeline(airflow.config_dir, tag, f"t.{tag}", tag, schedule=None))
    topic, table = cfg.source.topics[0], cfg.sinks[0].table
    uri = assets.target_uri(cfg, cfg.sinks[0].name, table)
    downstream = f"{tag}_report"
    (airflow.home / "dags" / f"{downstream}.py").write_text(DOWNSTREAM.format(dag_id=downstream, uri=uri))
    stream = cdcgen.orders_stream(300, 40, seed=7, broken=False)
    cdcgen.produce(bootstrap(), topic, stream.events)
    airflow.wait_for_dag(cfg.name)
    airflow.wait_for_dag(downstream)
    assert airflow.request("PATCH", f"/api/v2/dags/{cfg.name}", {"is_paused": False}).status == 200

    r = airflow.request("POST", f"/api/v2/dags/{cfg.name}/dagRuns", {"dag_run_id": "full", "logical_date": None})
    assert r.status == 200, r.text
    assert [x["state"] for x in airflow.wait_for_runs(cfg.name, ["full"])] == ["success"], airflow.log_tail()

    events = _asset_events(airflow, cfg.name)
    assert [(e["uri"], e["source_task_id"], e["source_run_id"]) for e in events] == [(uri, "commit_offsets", "full")]
    extra = events[0]["extra"]
    rows = table_rows(table)
    assert rows == expected(stream.state)
    store = StateStore(airflow.store_url)
    window = store.ledger.get_window(cfg.name, "full")
    assert {k: extra[k] for k in ("pipeline", "run_id", "sink", "target")} == {
        "pipeline": cfg.name, "run_id": "full", "sink": cfg.sinks[0].name, "target": table}
    assert extra["offsets"] == {f"{p.topic}[{p.partition}]": [p.start, p.end] for p in window.partitions if p.records}
    assert extra["upserted"] + extra["deleted"] == window.stats["sinks"][cfg.sinks[0].name]["upserted"] + \
        window.stats["sinks"][cfg.sinks[0].name]["deleted"] > 0
    assert extra["upserted"] >= len(rows)
    assert extra["record_time"]["from"] <= extra["record_time"]["to"]
    # emitted after the commit: the event is later than the commit task's start, which committed
    ti = airflow.request("GET", f"/api/v2/dags/{cfg.name}/dagRuns/full/taskInstances/commit_offsets").body
    assert events[0]["timestamp"] >= ti["start_date"]
    assert store.offsets.load(cfg.name) == {(p.topic, p.partition): p.end for p in window.partitions}

    # the downstream DAG ran on the event, and saw this run's event
    deadline = time.monotonic() + 120
    while not (runs := airflow.request("GET", f"/api/v2/dags/{downstream}/dagRuns").body["dag_runs"]) or \
            runs[0]["state"] != "success":
        assert time.monotonic() < deadline, f"downstream runs: {runs}\n{airflow.log_tail()}"
        airflow.revive()
        time.sleep(2)
    assert [x["run_type"] for x in runs] == ["asset_triggered"]
    seen = airflow.request("GET", f"/api/v2/dags/{downstream}/dagRuns/{runs[0]['dag_run_id']}/taskInstances/report/"
                                  "xcomEntries/return_value").body["value"]
    assert seen == ["full"]
    # lineage: the topic is the commit task's inlet, the table an asset
    listed = {a["uri"] for a in airflow.request("GET", "/api/v2/assets?limit=100").body["assets"]}
    assert {uri, assets.topic_uri(cfg, topic)} <= listed

    # an empty window (nothing new to read) commits, but emits no event and starts nothing
    r = airflow.request("POST", f"/api/v2/dags/{cfg.name}/dagRuns", {"dag_run_id": "empty", "logical_date": None})
    assert r.status == 200, r.text
    assert [x["state"] for x in airflow.wait_for_runs(cfg.name, ["empty"])] == ["success"]
    after = _asset_events(airflow, cfg.name)
    assert [e["source_run_id"] for e in after] == ["full"]
    time.sleep(6)  # three scheduler heartbeats: a run queued by an event would exist by now
    assert len(airflow.request("GET", f"/api/v2/dags/{downstream}/dagRuns").body["dag_runs"]) == 1

    # a replay of everything the table holds (issue 40), as an operator triggers it through the REST
    # API: it reads every record again, changes nothing, emits no event and starts nothing
    replay = {"dag_run_id": "replay", "logical_date": None,
              "conf": {"start_offsets": {topic: {"0": 0, "1": 0, "2": 0}}}}
    r = airflow.request("POST", f"/api/v2/dags/{cfg.name}/dagRuns", replay)
    assert r.status == 200, r.text
    assert [x["state"] for x in airflow.wait_for_runs(cfg.name, ["replay"])] == ["success"], airflow.log_tail()
    replayed = store.ledger.get_window(cfg.name, "replay")
    assert replayed.total_records == len(stream.events)
    sink = replayed.stats["sinks"][cfg.sinks[0].name]
    first = window.stats["sinks"][cfg.sinks[0].name]
    assert (sink["upserted"], sink["deleted"]) == (0, 0)
    assert sink["stale"] + sink["unchanged"] == sum(first[k] for k in ("upserted", "deleted", "stale", "unchanged"))
    assert table_rows(table) == rows
    after = _asset_events(airflow, cfg.name)
    assert [e["source_run_id"] for e in after] == ["full"]
    time.sleep(6)
    assert len(airflow.request("GET", f"/api/v2/dags/{downstream}/dagRuns").body["dag_runs"]) == 1


def test_on_data_starts_a_window_when_records_wait_and_batches_a_trickle_until_max_wait(
        airflow: AirflowServer) -> None:
    """schedule: on_data: the triggerer's NewRecordsTrigger starts a window when min_records wait, or
    when fewer have waited max_wait; it commits nothing (the consumer group stays where the last
    window left it while records wait) and starts one run per burst, not one per poll."""
    from connectors.kafka.groups import group_offsets  # noqa: PLC0415

    tag = unique("ondata")
    cfg = load_pipeline(write_pipeline(airflow.config_dir, tag, f"t.{tag}", tag, schedule="on_data",
                                       on_data={"min_records": 50, "max_wait": "10s", "poll_interval": "1s"}))
    topic = cfg.source.topics[0]
    stream = cdcgen.orders_stream(400, 50, seed=11, broken=False)
    burst, trickle = stream.events[:-5], stream.events[-5:]
    cdcgen.produce(bootstrap(), topic, burst)
    airflow.wait_for_dag(cfg.name)
    assert airflow.request("PATCH", f"/api/v2/dags/{cfg.name}", {"is_paused": False}).status == 200

    def runs() -> list[dict[str, Any]]:
        return airflow.request("GET", f"/api/v2/dags/{cfg.name}/dagRuns?order_by=run_after").body["dag_runs"]

    def wait_runs(n: int, timeout: float = 180) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(done := [r for r in runs() if r["state"] in ("success", "failed")]) < n:
            assert time.monotonic() < deadline, f"runs: {runs()}\n{airflow.log_tail()}"
            airflow.revive()
            time.sleep(1)
        return done

    first = wait_runs(1)
    assert [(r["run_type"], r["state"]) for r in first] == [("asset_triggered", "success")], airflow.log_tail()
    store = StateStore(airflow.store_url)
    ends = store.offsets.load(cfg.name)
    assert sum(ends.values()) == len(burst)
    conf = {"bootstrap.servers": bootstrap(), "group.id": cfg.group_id}
    assert group_offsets(conf, sorted(ends)) == ends  # mirrored by the commit, not by the trigger

    # a trickle below min_records waits for max_wait; meanwhile the trigger polls the ends every
    # second and moves nothing
    produced = time.time()
    cdcgen.produce(bootstrap(), topic, trickle, create=False)
    time.sleep(5)
    assert len(runs()) == 1
    assert store.offsets.load(cfg.name) == ends and group_offsets(conf, sorted(ends)) == ends
    second = wait_runs(2)[-1]
    assert second["state"] == "success", airflow.log_tail()
    assert _t(second["start_date"]) - produced >= 9  # max_wait 10 s, polled every second
    assert sum(store.offsets.load(cfg.name).values()) == len(stream.events)
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)
    time.sleep(5)  # nothing waits any more: no run is started after the trickle's
    assert len(runs()) == 2
