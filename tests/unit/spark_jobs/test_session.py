"""Which server-side session a window attaches to (spark_jobs/session.session_name): one shared by
the pipelines that set no spark.conf, renewed every hour; a session of its own for one that does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdcflow.config import SparkConfig
from spark_jobs.session import session_name, session_url

HOUR = 3600.0


def test_pipelines_without_settings_of_their_own_share_one_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDCFLOW_SPARK_SESSION_SECONDS", raising=False)
    plain = SparkConfig()
    at = 1_795_000_000.0
    assert session_name(plain, "cdcflow-orders", at) == session_name(plain, "cdcflow-payments", at + 60)
    url = "sc://127.0.0.1:15002"
    assert session_url(url, session_name(plain, "cdcflow-orders", at)) == \
        session_url(url, session_name(plain, "cdcflow-payments", at))
    # the next hour: the next shared session (the server closes the idle one, and what it held)
    assert session_name(plain, "cdcflow-orders", at + HOUR) != session_name(plain, "cdcflow-orders", at)


def test_a_pipeline_with_its_own_spark_settings_keeps_its_own_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDCFLOW_SPARK_SESSION_SECONDS", raising=False)
    own = SparkConfig(conf={"spark.sql.shuffle.partitions": "8"})
    assert session_name(own, "cdcflow-orders", 0.0) == "cdcflow-orders" == session_name(own, "cdcflow-orders", HOUR * 5)
    assert session_name(own, "cdcflow-orders") != session_name(SparkConfig(), "cdcflow-orders")


def test_the_shared_sessions_period_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCFLOW_SPARK_SESSION_SECONDS", "60")
    plain = SparkConfig()
    assert session_name(plain, "a", 0.0) == session_name(plain, "b", 59.0) != session_name(plain, "a", 60.0)


def test_a_server_without_its_spark_context_is_named_with_the_command_that_restarts_it() -> None:
    from cdcflow.errors import SparkUnavailable
    from spark_jobs.spark_failures import spark_unavailable

    # what the server answers every request once its SparkContext stopped (issue 22's logs)
    answer = RuntimeError("(org.apache.spark.SparkException) [INTERNAL_ERROR] Application error processing RPC: "
                          "java.lang.NullPointerException: SparkEnv.get() is null")
    err = spark_unavailable(answer)
    assert isinstance(err, SparkUnavailable)
    assert "Spark context has stopped" in str(err) and "scripts/services.sh start spark" in str(err)
    assert "no offset was moved" in str(err)
    assert spark_unavailable(RuntimeError("division by zero")) is None


def test_a_window_whose_server_restarted_under_it_says_so() -> None:
    from cdcflow.errors import SparkUnavailable
    from spark_jobs.spark_failures import spark_unavailable

    # as the fault campaign's spark_down saw them: the supervisor restarted the server mid-window
    for answer in (("[NO_ACTIVE_SESSION] No active Spark session found. Please create a new Spark session before "
                    "running the code."),
                   ("[RESPONSE_ALREADY_RECEIVED] INVALID_HANDLE.SESSION_NOT_FOUND on the server but responses were "
                    "already received from it.")):
        err = spark_unavailable(RuntimeError(answer))
        assert isinstance(err, SparkUnavailable) and "restarted while the window ran" in str(err)
        assert "no offset moved" in str(err)


def test_the_supervisor_names_why_the_server_died_from_its_last_words(tmp_path: Path) -> None:
    from spark_jobs.health import last_words

    log = tmp_path / "connect.log"
    log.write_text("26/11/24 INFO SparkContext: Running Spark version 4.2.0\n"
                   "java.lang.OutOfMemoryError: Java heap space\n\tat java.base/java.util.Arrays.copyOf\n"
                   "Terminating due to java.lang.OutOfMemoryError: Java heap space\n")
    assert last_words(log) == "Terminating due to java.lang.OutOfMemoryError: Java heap space"
    log.write_text("26/11/24 INFO SparkConnectServer: Spark Connect server started\n")
    assert last_words(log) == ""
    assert last_words(tmp_path / "missing.log") == "" and last_words(None) == ""


def test_the_worker_daemon_preloads_every_module_it_names() -> None:
    """spark_jobs/daemon.py (spark.python.daemon.module of the long-lived server): a module that no
    longer imports would only be logged there, and every worker would pay its import again."""
    from spark_jobs import daemon

    assert daemon.preload() == []
    assert "spark_jobs.project.targets" in daemon.PRELOADED and "pyspark.worker" in daemon.PRELOADED


def test_a_warm_up_that_cannot_reach_the_server_says_so_and_does_not_fail_the_start(capsys: Any) -> None:
    """``scripts/services.sh start spark`` warms the shared session once the server is healthy; a
    warm-up that fails leaves the start as it is (the first window starts the workers itself)."""
    from spark_jobs.warm import main

    assert main(["sc://127.0.0.1:1"]) == 0
    out = capsys.readouterr().out
    assert "was not warmed" in out and "127.0.0.1:1 is unreachable" in out, out
