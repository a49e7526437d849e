"""The control service's state mapping and rules, with a DagControl double (Airflow is tested for
real in tests/integration/cdcflow/web/test_control_plane.py)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcflow import control
from cdcflow.airflow.dag_control import DagInfo, DagRunInfo
from cdcflow.config import load_pipeline
from cdcflow.errors import BadRequest, Conflict, NotFound
from cdcflow.state import PartitionWindow, StateStore
from tests.helpers import write_pipeline


class FakeDags:
    """In-memory DagControl: one dict of DAGs, a list of runs."""

    def __init__(self) -> None:
        self.dags: dict[str, DagInfo] = {}
        self.triggered: list[tuple[str, dict[str, Any], str]] = []
        self.active: list[DagRunInfo] = []

    def add(self, dag_id: str, paused: bool = True) -> None:
        self.dags[dag_id] = DagInfo(dag_id, paused, False, None)

    def info(self, dag_id: str) -> DagInfo | None:
        return self.dags.get(dag_id)

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self.dags[dag_id] = DagInfo(dag_id, paused, False, None)

    def trigger(self, dag_id: str, conf: dict[str, Any], user: str, note: str | None = None) -> str:
        self.triggered.append((dag_id, conf, user))
        return f"manual__{len(self.triggered)}"

    def runs(self, dag_id: str, limit: int = 10) -> list[DagRunInfo]:
        return self.active

    def active_runs(self, dag_id: str) -> list[DagRunInfo]:
        return self.active


@pytest.fixture
def svc(config_dir: Path) -> tuple[control.Control, FakeDags]:
    write_pipeline(config_dir, "p1", "t.p1", "p1")
    dags = FakeDags()
    return control.Control(dags), dags


def test_states_follow_airflow_and_the_ledger(svc: tuple[control.Control, FakeDags]) -> None:
    s, dags = svc
    assert s.status("p1").state == "UNASSIGNED"
    dags.add("p1", paused=True)
    assert s.status("p1").state == "PAUSED"
    s.resume("p1", "alice")
    assert s.status("p1").state == "RUNNING" and dags.dags["p1"].is_paused is False
    store = StateStore()
    store.offsets.plan("p1", "r1", "stored", [PartitionWindow("t.p1", 0, 0, 10)])
    store.ledger.mark("p1", "r1", "failed", "attempt 1: SinkUnavailable: MySQL down")
    st = s.status("p1")
    assert st.state == "FAILED" and st.trace == "attempt 1: SinkUnavailable: MySQL down"
    s.stop("p1", "alice")
    assert s.status("p1").state == "STOPPED" and dags.dags["p1"].is_paused is True
    # STOPPED by the dead-letter breaker: the failed window says why (the page and Connect's trace)
    store.ledger.mark("p1", "r1", "failed", "attempt 1: DeadLettersExceeded: 40 of the 80 records …")
    st = s.status("p1")
    assert st.state == "STOPPED" and st.trace == "attempt 1: DeadLettersExceeded: 40 of the 80 records …"


def test_invalid_config_is_failed_with_its_errors(config_dir: Path, svc: tuple[control.Control, FakeDags]) -> None:
    s, _ = svc
    (config_dir / "bad.yaml").write_text("name: bad\nwindow: {max_records: -1}\n")
    st = s.status("bad")
    assert st.state == "FAILED" and "window.max_records" in (st.trace or "")
    with pytest.raises(BadRequest, match="invalid config"):
        s.pause("bad", "alice")
    with pytest.raises(NotFound, match="Connector nope not found"):
        s.status("nope")


def test_run_now_validates_params_and_refuses_when_stopped(svc: tuple[control.Control, FakeDags]) -> None:
    s, dags = svc
    with pytest.raises(Conflict, match="no DAG in Airflow yet"):
        s.run_now("p1", "alice")
    dags.add("p1")
    with pytest.raises(BadRequest, match="max_records"):
        s.run_now("p1", "alice", {"max_records": -3})
    assert s.replay("p1", {"t.p1": {0: 5}}, "alice") == "manual__1"
    assert dags.triggered == [("p1", {"start_offsets": {"t.p1": {"0": 5}}}, "alice")]
    s.stop("p1", "alice")
    with pytest.raises(Conflict, match="STOPPED"):
        s.run_now("p1", "alice")


def test_offsets_change_only_when_stopped_and_idle(svc: tuple[control.Control, FakeDags]) -> None:
    s, dags = svc
    dags.add("p1")
    with pytest.raises(Conflict, match="Connectors must be in the STOPPED state"):
        s.alter_offsets("p1", {("t.p1", 0): 1}, "alice")
    s.stop("p1", "alice")
    dags.active = [DagRunInfo("manual__x", "running", "manual", {}, datetime(2026, 1, 1), None)]
    with pytest.raises(Conflict, match="still queued or running"):
        s.reset_offsets("p1", "forget", "alice")
    dags.active = []
    assert s.reset_offsets("p1", "forget", "alice")["message"].endswith("reset successfully")
    with pytest.raises(BadRequest, match="expected earliest, latest, timestamp or forget"):
        s.reset_offsets("p1", "yesterday", "alice")


@pytest.mark.parametrize(("value", "ms"), [("2026-01-01T00:00:00Z", 1767225600000),
                                           ("2026-01-01T01:00:00+01:00", 1767225600000), ("1767225600000", 1767225600000)])
def test_parse_time(value: str, ms: int) -> None:
    assert control.parse_time(value) == ms


def test_parse_time_needs_a_zone() -> None:
    with pytest.raises(BadRequest, match="no time zone"):
        control.parse_time("2026-01-01T00:00:00")


# -- creating, changing and deleting pipelines ------------------------------------------------------

def test_put_config_creates_then_rewrites_the_same_file(config_dir: Path, svc: tuple[control.Control, FakeDags]) -> None:
    s, _ = svc
    data = load_pipeline(config_dir / "p1.yaml").model_dump(mode="json", exclude_none=True)
    data["name"] = "p2"
    cfg, created = s.put_config("p2", data, "alice")
    assert created is True
    path = config_dir / "p2.yaml"
    text = path.read_text()
    assert text.startswith("# Pipeline p2: written by PUT /connectors/p2/config (alice, ")
    assert "\nsinks:\n- type: mysql\n" in text and "." not in yaml.safe_load(text)["source"]  # nested, not flat
    assert load_pipeline(path) == cfg and control.get("p2").config == cfg
    # a pipeline whose file has another name is changed in that file
    (config_dir / "p1.yaml").rename(config_dir / "orders.yml")
    changed = {**load_pipeline(config_dir / "orders.yml").model_dump(mode="json"), "description": "changed"}
    cfg, created = s.put_config("p1", changed, "bob")
    assert created is False and load_pipeline(config_dir / "orders.yml").description == "changed"
    assert sorted(p.name for p in config_dir.iterdir()) == ["orders.yml", "p2.yaml"]  # no temporary file left


def test_put_config_validates_with_the_file_models(config_dir: Path, svc: tuple[control.Control, FakeDags]) -> None:
    s, _ = svc
    data = load_pipeline(config_dir / "p1.yaml").model_dump(mode="json", exclude_none=True)
    with pytest.raises(BadRequest) as err:
        s.put_config("p3", {**data, "name": "p3", "window": {"max_records": 0}}, "alice")
    assert "window.max_records: expected input should be greater than or equal to 1" in str(err.value)
    with pytest.raises(BadRequest, match="name: expected 'p3'"):
        s.put_config("p3", data, "alice")
    for bad in ("../p3", ".p3", "a/b", ""):
        with pytest.raises(BadRequest, match="not a valid pipeline name"):
            s.put_config(bad, {**data, "name": bad}, "alice")
        with pytest.raises(BadRequest, match="not a valid pipeline name"):
            s.delete(bad, "alice")
    # a file of that name that defines another pipeline is not overwritten
    (config_dir / "p4.yaml").write_text((config_dir / "p1.yaml").read_text().replace("name: p1", "name: other"))
    with pytest.raises(Conflict, match="does not define pipeline 'p4'"):
        s.put_config("p4", {**data, "name": "p4"}, "alice")
    assert not (config_dir / "p3.yaml").exists() and "name: other" in (config_dir / "p4.yaml").read_text()


def test_delete_needs_stopped_and_keeps_the_offsets(config_dir: Path, svc: tuple[control.Control, FakeDags]) -> None:
    s, dags = svc
    dags.add("p1")
    store = StateStore()
    store.offsets.set("p1", {("t.p1", 0): 10}, "r1")
    with pytest.raises(Conflict, match=r"must be in the STOPPED state before it can be deleted.*"
                                       r"'/connectors/p1/stop'.*offsets.*kept"):
        s.delete("p1", "alice")
    s.stop("p1", "alice")
    dags.active = [DagRunInfo("manual__x", "running", "manual", {}, datetime(2026, 1, 1), None)]
    with pytest.raises(Conflict, match="still queued or running"):
        s.delete("p1", "alice")
    dags.active = []
    assert s.delete("p1", "alice") == config_dir / "p1.yaml"
    assert not (config_dir / "p1.yaml").exists()
    with pytest.raises(NotFound, match="Connector p1 not found"):
        s.delete("p1", "alice")
    assert store.offsets.load("p1") == {("t.p1", 0): 10}  # kept: the same name created again continues
    write_pipeline(config_dir, "p1", "t.p1", "p1")
    assert s.status("p1").state == "STOPPED"


def test_an_invalid_file_is_not_deleted_through_the_api(config_dir: Path, svc: tuple[control.Control, FakeDags]) -> None:
    s, _ = svc
    (config_dir / "bad.yaml").write_text("name: bad\nwindow: {max_records: -1}\n")
    with pytest.raises(Conflict, match="does not validate"):
        s.delete("bad", "alice")
    assert (config_dir / "bad.yaml").exists()
