"""Windows on the long-lived Spark (the Spark Connect server that scripts/services.sh starts)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.errors import SparkUnavailable, WindowFailed, WindowTimedOut
from cdcflow.window import clients
from connectors import faults
from tests.airflow_server import free_port
from tests.helpers import bootstrap, expected, subprocess_env, table_rows, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.services]
ROOT = Path(__file__).resolve().parents[3]

FRESH_PROCESS_WINDOW = """
import json, sys, time
t0 = time.perf_counter()
from cdcflow import runner
from cdcflow.config import find_pipeline
cfg = find_pipeline(sys.argv[1])
stats = runner.run_window(cfg, sys.argv[2])
from pyspark import SparkContext
print(json.dumps({"records": stats["records"], "seconds": time.perf_counter() - t0,
                  "local_jvm": SparkContext._active_spark_context is not None or SparkContext._jvm is not None}))
"""


def test_a_window_in_a_fresh_process_runs_on_the_long_lived_spark(config_dir: Path) -> None:
    tag = unique("sc")
    cfg = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag))
    assert cfg.spark.mode == "connect"  # the default
    stream = cdcgen.orders_stream(300, 40, seed=17)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events)
    result = subprocess.run([sys.executable, "-c", FRESH_PROCESS_WINDOW, cfg.name, "fresh-1"], cwd=ROOT,
                            env=subprocess_env(config_dir), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["records"] == len(stream.events)
    assert out["local_jvm"] is False  # the Spark work ran on the server, not in this process
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)


def test_a_spark_that_is_down_fails_the_window_clearly_and_moves_no_offset(config_dir: Path) -> None:
    tag = unique("scdown")
    cfg = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag,
                                       spark={"remote": f"sc://127.0.0.1:{free_port()}"}))
    cdcgen.produce(bootstrap(), cfg.source.topics[0], cdcgen.orders_stream(30, 5, seed=1, broken=False).events)
    store = clients.offset_store(cfg)
    with pytest.raises(SparkUnavailable) as err:
        runner.run_window(cfg, "down-1", {}, store)
    message = str(err.value)
    assert f"Spark Connect at {cfg.spark.remote} is unreachable" in message
    assert "scripts/services.sh start spark" in message and "no offset was moved" in message
    assert store.offsets.load(cfg.name) == {}
    assert store.ledger.get_window(cfg.name, "down-1").status == "failed"


CLOSED_SESSION = """
import json, os, sys
from cdcflow.config import SparkConfig
from spark_jobs import session as sessions
OWN = SparkConfig(conf={"spark.sql.shuffle.partitions": "4"})  # settings of its own: a session of its own
app, remote = sys.argv[1], sessions.resolve_remote(OWN)
first = sessions.connect_spark(OWN, app)
sessions.release_sessions(remote)  # stop(): the server closes the id for good
second = sessions.connect_spark(OWN, app)
out = {"count": second.range(3).count(), "second": [t for t, s in sessions._CONNECT_SESSIONS.values() if s is second],
       "gen1": sessions.session_url(remote, app, 1)}
sessions._CONNECT_SESSIONS.clear()  # as a new process would: the chain leads to the same session
third = sessions.connect_spark(OWN, app)
out["third"] = [t for t, s in sessions._CONNECT_SESSIONS.values() if s is third]
out["cached"] = sessions.connect_spark(OWN, app) is third
print(json.dumps(out), flush=True)
os._exit(0)  # as an Airflow task exits: a stopped session's __del__ can hang closing gRPC at shutdown
"""


def test_a_pipeline_whose_server_session_was_closed_gets_the_next_one(config_dir: Path) -> None:
    """The server never reopens a closed session id (idle timeout, or stopped): the next window of
    the pipeline moves to the next generation of its id, and the one after lands on the same."""
    result = subprocess.run([sys.executable, "-c", CLOSED_SESSION, f"cdcflow-{unique('closed')}"], cwd=ROOT,
                            env=subprocess_env(config_dir), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["count"] == 3
    assert out["second"] == [out["gen1"]] == out["third"]
    assert out["cached"] is True  # one session per server and pipeline in a process


def test_a_window_past_spark_timeout_is_cancelled_alone_and_the_server_carries_on(
        config_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No window holds the shared Spark forever (issue 22): a read task that hangs (a pause fault,
    for up to 10 minutes) is cancelled on the server at spark.timeout; the window fails alone with
    what to change, moves no offset, and the next window on the same server applies everything."""
    tag = unique("sctime")
    cfg = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag, spark={"timeout": "15s"}))
    stream = cdcgen.orders_stream(200, 30, seed=23)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events)
    store = clients.offset_store(cfg)
    monkeypatch.setenv("CDCFLOW_FAULTS", faults.pause_entry("during_read", tmp_path))

    started = time.monotonic()
    with pytest.raises(WindowTimedOut) as err:
        runner.run_window(cfg, "slow-1", {}, store)
    elapsed = time.monotonic() - started

    assert (tmp_path / "reached").exists()  # the read task was hanging when the deadline came
    assert 15 <= elapsed < 60, f"the hanging task was not cancelled at the deadline ({elapsed:.0f} s)"
    message = str(err.value)
    assert f"the window slow-1 of {cfg.name}" in message and "spark.timeout (15 s)" in message
    assert "no offset moved" in message and "lower window.max_records" in message
    assert store.offsets.load(cfg.name) == {}
    monkeypatch.delenv("CDCFLOW_FAULTS")
    stats = runner.run_window(cfg, "slow-2", {}, store)
    assert stats["records"] == len(stream.events)
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)


def test_a_window_that_runs_spark_out_of_heap_fails_alone_and_the_server_is_back_within_a_minute(
        config_dir: Path) -> None:
    """One window cannot take the shared Spark down for good (issue 22): a window whose work needs
    ~10 GB of the server's heap fails with what happened and what to change, and moves no offset; the
    server exits on the OutOfMemoryError (instead of lingering without its context), its supervisor
    starts it again, and another pipeline's window then runs on it."""
    from spark_jobs.health import probe_in_child
    from spark_jobs.session import resolve_remote

    tag = unique("scoom")
    greedy = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag, versioning="kafka_offset", transforms=[
        {"type": "Python", "function": "tests.unit.custom_transforms.exhaust_heap"}]))
    cdcgen.produce(bootstrap(), greedy.source.topics[0], cdcgen.orders_stream(20, 5, seed=3).events)
    store = clients.offset_store(greedy)
    supervisor_log = Path(os.environ["CDCFLOW_HOME"]) / "services/spark/supervisor.log"
    logged = supervisor_log.stat().st_size
    with pytest.raises(WindowFailed) as err:
        runner.run_window(greedy, "oom-1", {}, store)
    failed = time.monotonic()
    message = str(err.value)
    # the window sees the error itself, or (when the server is gone before it is told) the server's restart
    if "ran Spark out of memory" in message:
        assert f"the window oom-1 of {greedy.name} ran Spark out of memory (java.lang.OutOfMemoryError)" in message
    else:
        assert "restarted while the window ran" in message or "became unreachable during the window" in message
        assert "supervisor.log" in message
    assert re.search(r"no offset (was )?moved", message)
    assert "window.max_records" in message and "CDCFLOW_SPARK_MEMORY" in message
    assert store.offsets.load(greedy.name) == {}

    while (why := probe_in_child(resolve_remote(greedy.spark), timeout=30)) is not None and time.monotonic() - failed < 90:
        time.sleep(1)
    back = time.monotonic() - failed
    assert why is None and back < 60, f"the supervisor did not bring Spark back within a minute: {why} ({back:.0f} s)"
    with supervisor_log.open() as log:  # the restart names the cause, from the dead server's last words
        log.seek(logged)
        restarts = [line for line in log if "spark is down" in line]
    assert restarts and "java.lang.OutOfMemoryError" in restarts[-1], restarts
    other = unique("scafter")
    cfg = load_pipeline(write_pipeline(config_dir, other, f"t.{other}", other))
    stream = cdcgen.orders_stream(100, 20, seed=4)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events)
    assert runner.run_window(cfg, "after-oom", {}, clients.offset_store(cfg))["records"] == len(stream.events)
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)


def test_a_window_releases_its_checkpoints_on_the_server(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a window checkpointed on the long-lived Spark is released when it ends (issue 22): the
    server no longer knows the relations, so their blocks are freed, whatever the window's process
    does after (an exiting task never ran the client's __del__, and sessions are shared for an hour)."""
    from pyspark.sql.connect.dataframe import DataFrame
    from pyspark.sql.connect.plan import CachedRemoteRelation

    from spark_jobs import session

    held: list[tuple[str, Any]] = []
    checkpoint = session.Checkpoints.__call__

    def recording(self: session.Checkpoints, frame: Any) -> Any:
        out = checkpoint(self, frame)
        held.append((out._plan._relation_id, out.sparkSession))
        return out

    monkeypatch.setattr(session.Checkpoints, "__call__", recording)
    monkeypatch.setenv("CDCFLOW_WINDOW_PATH", "staged")  # rows handed on to write tasks: a checkpoint held
    tag = unique("screl")
    cfg = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag))
    stream = cdcgen.orders_stream(200, 30, seed=8)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events)
    assert runner.run_window(cfg, "rel-1", {}, clients.offset_store(cfg))["records"] == len(stream.events)
    assert held
    for relation_id, spark in held:
        with pytest.raises(Exception, match="DATAFRAME_NOT_FOUND"):
            DataFrame(CachedRemoteRelation(relation_id, spark), spark).count()
