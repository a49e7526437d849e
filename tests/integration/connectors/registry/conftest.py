"""The registry stand-in (tests/registry_standin.py) for the registry converters' integration tests."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.integration.connectors.registry.common import CONN_ID, LOGIN, PASSWORD
from tests.registry_standin import RegistryStandIn


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[RegistryStandIn]:
    """The stand-in, with Basic auth, named by the Airflow connection cdcflow_registry; the few events
    of a test are decoded column-wise, as a large window's are."""
    standin = RegistryStandIn(credentials=(LOGIN, PASSWORD)).start()
    port = int(standin.url.rsplit(":", 1)[1])
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(
        {"conn_type": "http", "host": "127.0.0.1", "port": port, "login": LOGIN, "password": PASSWORD}))
    monkeypatch.setenv("CDCFLOW_COLUMN_WISE_MIN", "1")
    yield standin
    standin.stop()
