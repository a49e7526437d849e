"""Fixtures. Integration tests run against the real services that scripts/services.sh starts;
if one is down the tests fail with the command to run, they never skip."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcflow.state import StateStore

ROOT = Path(__file__).resolve().parent.parent


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


# The services a test can need (scripts/services.sh names them), with the port that answers when it
# runs. Tests say which with ``pytest.mark.services("mysql", ...)``; the marker without names means
# all of them. Airflow and Prometheus are started by the tests that need them (their own servers).
SERVICE_PORTS = {"kafka": ("CDCFLOW_KAFKA_PORT", "19092"), "mysql": ("CDCFLOW_MYSQL_PORT", "13306"),
                 "elasticsearch": ("CDCFLOW_ES_PORT", "19200"), "spark": ("CDCFLOW_SPARK_CONNECT_PORT", "15002")}


def needed_services(item: pytest.Item) -> list[str]:
    marker = item.get_closest_marker("services")
    if marker is None:
        return []
    unknown = [a for a in marker.args if a not in SERVICE_PORTS]
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: pytest.mark.services({', '.join(map(repr, unknown))}): "
                                f"expected some of {sorted(SERVICE_PORTS)}")
    return list(marker.args) or list(SERVICE_PORTS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that needs a service is an integration test (``-m integration`` selects it)."""
    for item in items:
        if item.get_closest_marker("services") is not None and item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.integration)


def pytest_collection_finish(session: pytest.Session) -> None:
    """With CDCFLOW_START_SERVICES=1 (scripts/test.sh sets it), start the services the selected tests
    need, and only those: `scripts/test.sh tests/integration/connectors/mysql/test_sink.py` starts MariaDB alone."""
    if os.environ.get("CDCFLOW_START_SERVICES") != "1" or session.config.option.collectonly:
        return
    wanted = {name for item in session.items for name in needed_services(item)}
    if not wanted:
        return
    import subprocess  # noqa: PLC0415

    names = [name for name in SERVICE_PORTS if name in wanted]  # kafka first: the others do not wait on it
    result = subprocess.run([str(ROOT / "scripts" / "services.sh"), "start", *names], check=False)
    if result.returncode != 0:
        raise pytest.UsageError(f"scripts/services.sh start {' '.join(names)} failed (exit {result.returncode}); "
                                "its output is above")


@pytest.fixture(autouse=True)
def _services_running(request: pytest.FixtureRequest) -> None:
    """A test that needs a service fails, naming the command, when the service does not answer."""
    needed = needed_services(request.node)
    if not needed:
        return
    missing = [name for name in needed if not _port_open(int(os.environ.get(*SERVICE_PORTS[name])))]
    if missing:
        pytest.fail(f"services not running: {missing}; start them with scripts/services.sh start {' '.join(missing)} "
                    "(scripts/test.sh does this for you)", pytrace=False)
    if "AIRFLOW_CONN_CDCFLOW_MYSQL" not in os.environ:
        pytest.fail("environment not loaded: run the tests through scripts/test.sh "
                    "(or `source scripts/env.sh` first)", pytrace=False)


def _es_indices() -> set[str] | None:
    """The Elasticsearch indices now, or None when no Elasticsearch answers (a unit-test run)."""
    import json  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    url = f"http://127.0.0.1:{os.environ.get('CDCFLOW_ES_PORT', '19200')}/_cat/indices?format=json&h=index"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return {row["index"] for row in json.load(resp)}
    except OSError:
        return None


@pytest.fixture(scope="session", autouse=True)
def _es_indices_removed_after_the_session(request: pytest.FixtureRequest) -> Iterator[None]:
    """The indices the tests created are deleted when the session ends, so that repeated runs on one
    machine never reach Elasticsearch's shard limit (1,000 per node: a run creates a few hundred).
    A session none of whose tests uses Elasticsearch leaves it alone (a unit-test run beside a
    campaign would otherwise delete the campaign's index)."""
    import urllib.request  # noqa: PLC0415

    if not any("elasticsearch" in needed_services(item) for item in request.session.items):
        yield
        return
    before = _es_indices()
    yield
    after = _es_indices()
    if before is None or after is None:
        return
    created = sorted(after - before)
    base = f"http://127.0.0.1:{os.environ.get('CDCFLOW_ES_PORT', '19200')}"
    for i in range(0, len(created), 50):  # no wildcards: Elasticsearch 8 refuses them in deletes
        names = ",".join(created[i:i + 50])
        try:
            urllib.request.urlopen(urllib.request.Request(f"{base}/{names}", method="DELETE"), timeout=30).close()
        except OSError:
            return


@pytest.fixture(autouse=True)
def _classic_spark_after() -> Iterator[None]:
    """A window on the long-lived Spark attaches to Spark Connect in this process, which switches
    PySpark's functions to Connect columns (SPARK_CONNECT_MODE_ENABLED, which subprocesses inherit);
    the tests after it use classic sessions."""
    was = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    yield
    if was is None:
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from cdcflow.config import SparkConfig
    from spark_jobs.session import close_clients, get_spark

    session = get_spark(SparkConfig(mode="inprocess", master="local[2]"), app_name="cdcflow-tests")
    yield session
    close_clients()  # the session and its py4j gateway, while pytest's streams are open (issue 40)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    s = StateStore(f"sqlite:///{tmp_path / 'offsets.db'}")
    yield s
    s.close()


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "pipelines"
    d.mkdir()
    monkeypatch.setenv("CDCFLOW_CONFIG_DIR", str(d))
    monkeypatch.setenv("CDCFLOW_OFFSET_STORE_URL", f"sqlite:///{tmp_path / 'offsets.db'}")
    return d
