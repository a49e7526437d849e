"""The registry client (connectors/registry/client.py): credentials from the Airflow connection,
one request per schema per process, and what goes wrong told apart by what the runner must do."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from cdcflow.connections import get_connection
from connectors.errors import InfrastructureError, RegistryUnavailable
from connectors.registry.client import RegistryClient, RegistrySettings, UnknownSchema, forget
from tests.registry_standin import RegistryStandIn

AVRO = json.dumps({"type": "record", "name": "R", "fields": [{"name": "id", "type": "int"}]})


@pytest.fixture
def registry() -> Iterator[RegistryStandIn]:
    standin = RegistryStandIn(token="t0ken").start()
    standin.register("s-value", {"schema": AVRO})
    yield standin
    standin.stop()


def test_a_schema_is_fetched_once_per_process(registry: RegistryStandIn) -> None:
    forget()
    client = RegistryClient(RegistrySettings(registry.url, token="t0ken"))
    for _ in range(3):
        found = RegistryClient(RegistrySettings(registry.url, token="t0ken")).by_id(1)
        assert (found.schema_id, found.schema, found.schema_type) == (1, AVRO, "AVRO")
    assert client.by_subject("s-value", 1).schema == AVRO
    assert dict(registry.gets_of_ids()) == {"1": 1}


def test_wrong_credentials_fail_the_window_saying_what_to_set(registry: RegistryStandIn) -> None:
    forget()
    with pytest.raises(RegistryUnavailable, match=r"refused the credentials fetching schema id 1 \(HTTP 401\): set "
                                                  "the connection's login/password, or a bearer token"):
        RegistryClient(RegistrySettings(registry.url, "reg", login="u", password="p")).by_id(1)


def test_an_unknown_id_is_the_records_fault(registry: RegistryStandIn) -> None:
    with pytest.raises(UnknownSchema, match="does not know schema id 9 \\(HTTP 404, error_code 40403"):
        RegistryClient(RegistrySettings(registry.url, token="t0ken")).by_id(9)


@pytest.mark.parametrize("status", [500, 503])
def test_a_server_error_is_an_infrastructure_error_naming_the_registry(registry: RegistryStandIn, status: int) -> None:
    forget()
    registry.fail_with(status)
    with pytest.raises(RegistryUnavailable) as exc:
        RegistryClient(RegistrySettings(registry.url, "reg", token="t0ken")).by_id(1)
    assert isinstance(exc.value, InfrastructureError)
    assert str(exc.value).startswith(f"the Schema Registry at {registry.url} (connection 'reg') failed fetching schema "
                                     f"id 1: HTTP {status} stand-in told to fail. The window failed and no offset "
                                     "moved")


def test_a_registry_that_does_not_answer_in_time_is_down() -> None:
    forget()
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(RegistryUnavailable, match=f"the Schema Registry at {url} cannot be reached while fetching "
                                                      "schema id 1: .*timed out"):
            RegistryClient(RegistrySettings(url, timeout=0.3)).by_id(1)


def test_the_connection_gives_the_url_and_the_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_REG_A", json.dumps({"conn_type": "http", "host": "sr", "schema": "https",
                                                         "login": "key", "password": "secret"}))
    monkeypatch.setenv("AIRFLOW_CONN_REG_B", json.dumps({"conn_type": "http", "host": "apicurio", "port": 8080,
                                                         "extra": {"path": "/apis/ccompat/v7", "bearer_token": "tk"}}))
    monkeypatch.setenv("AIRFLOW_CONN_REG_C", json.dumps({"conn_type": "http", "extra": {"url": "http://k:8081/"}}))
    a, b, c = get_connection("reg_a"), get_connection("reg_b"), get_connection("reg_c")
    assert (a.registry_url(), a.bearer_token()) == ("https://sr:8081", None)
    assert (b.registry_url(), b.bearer_token()) == ("http://apicurio:8080/apis/ccompat/v7", "tk")
    assert c.registry_url() == "http://k:8081"
    assert RegistrySettings("u", login="key", password="secret").headers()["Authorization"] == "Basic a2V5OnNlY3JldA=="
    assert RegistrySettings("u", login="key", token="tk").headers()["Authorization"] == "Bearer tk"
    assert "secret" not in repr(RegistrySettings("u", login="key", password="secret"))


def test_a_404_without_the_registrys_error_code_is_a_wrong_url_not_a_dead_letter(registry: RegistryStandIn) -> None:
    """Apicurio without its /apis/ccompat/v7 path, a proxy's page: every record would go to the DLQ
    if such a 404 counted as an unknown id."""
    forget()
    with pytest.raises(RegistryUnavailable, match=r"answered HTTP 404 without a registry error code fetching schema "
                                                  r"id 1: is the URL the registry's API \(Apicurio"):
        RegistryClient(RegistrySettings(registry.url + "/not/the/api", token="t0ken")).by_id(1)
