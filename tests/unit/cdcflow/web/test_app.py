"""The cdcflow app's routers, served by FastAPI's test client with a control-service double and an
auth manager that lets everyone through (Airflow's own is tested in tests/integration/cdcflow/web/test_control_plane.py)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from cdcflow.errors import BadRequest
from cdcflow.web import deps
from cdcflow.web.app import create_app


class User:
    def get_name(self) -> str:
        return "alice"


class Allow:
    def is_authorized_dag(self, **_kwargs: Any) -> bool:
        return True


class FakeControl:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def run_now(self, name: str, user: str, conf: Any = None, note: str | None = None) -> str:
        if conf and conf.get("max_records") == -1:
            raise BadRequest("invalid run parameters for pipeline 'p1':\n  - max_records: expected an integer >= 1")
        self.calls.append(("run_now", name, user, conf, note))
        return "manual__1"

    def replay(self, name: str, starts: Any, user: str) -> str:
        self.calls.append(("replay", name, starts, user))
        return "manual__2"

    def health(self) -> str | None:
        return "the offset store does not answer: OperationalError: gone"


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> tuple[TestClient, FakeControl]:
    import airflow.api_fastapi.app as airflow_app

    monkeypatch.setattr(airflow_app, "get_auth_manager", lambda: Allow())
    svc = FakeControl()
    app = create_app(svc)  # type: ignore[arg-type]
    app.dependency_overrides[deps.current_user] = User
    return TestClient(app), svc


def test_run_and_replay_reach_the_service(client: tuple[TestClient, FakeControl]) -> None:
    http, svc = client
    assert http.post("/connectors/p1/run", json={"conf": {"max_records": 5}}).json() == {"run_id": "manual__1"}
    times = {"start_time": "2026-11-20T10:00:00Z", "end_time": "2026-11-20T11:00:00Z"}
    r = http.post("/connectors/p1/replay", json={**times, "ignored": 1})
    assert (r.status_code, r.json()) == (202, {"run_id": "manual__1"})
    r = http.post("/connectors/p1/replay", json={"start_offsets": {"t.p1": {"0": 7}}})
    assert r.json() == {"run_id": "manual__2"}
    assert svc.calls == [("run_now", "p1", "alice", {"max_records": 5}, None),
                         ("run_now", "p1", "alice", times, "time-range replay requested by alice"),
                         ("replay", "p1", {"t.p1": {"0": 7}}, "alice")]


def test_errors_keep_connects_shape(client: tuple[TestClient, FakeControl]) -> None:
    http, _svc = client
    r = http.post("/connectors/p1/replay", json=["not", "an", "object"])
    assert r.status_code == 400 and r.json()["message"].startswith('expected {"start_offsets"')
    r = http.post("/connectors/p1/run", json={"conf": {"max_records": -1}})
    assert r.status_code == 400 and r.json() == {
        "error_code": 400, "message": "invalid run parameters for pipeline 'p1':\n  - max_records: expected an integer >= 1"}
    r = http.post("/connectors/p1/dlq/redrive", json={"bogus": 1})
    assert r.status_code == 400 and "unknown fields ['bogus']: expected partition, start, end" in r.json()["message"]
    r = http.get("/health")
    assert r.status_code == 503 and r.json()["status"] == "unhealthy"
