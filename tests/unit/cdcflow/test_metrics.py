"""The metrics' collector (cdcflow/metrics.py) over a real SQLite state store: counters from the
totals, exact and unchanged by a ledger prune; what can change is a gauge. The same on a real
api-server and Prometheus's rules: tests/integration/cdcflow/test_metrics_counters.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from cdcflow import control, metrics
from cdcflow.config import load_pipeline
from cdcflow.state import PartitionWindow
from cdcflow.state.tables import runs_table
from tests.helpers import write_pipeline


@dataclass
class _Status:
    state: str = "RUNNING"


@dataclass
class _Lag:
    partitions: list[Any] = field(default_factory=list)
    status: str = "OK"
    total_lag: int = 0


class FakeService:
    """The two calls the collector makes besides the store (status and lag need Airflow and a broker)."""

    def status(self, name: str) -> _Status:
        return _Status()

    def lag(self, name: str) -> _Lag:
        return _Lag()


def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, _type = metrics.render(FakeService())  # type: ignore[arg-type]
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(body.decode()) for s in fam.samples}


def counters(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[Any, float]:
    return {k: v for k, v in samples.items() if k[0].endswith(("_total", "_bucket", "_count", "_sum"))}


@pytest.fixture
def pipeline(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(metrics, "spark_states", lambda _pipelines: [])
    cfg = load_pipeline(write_pipeline(config_dir, "p1", "t.p1", "p1"))
    return cfg.name


def test_counters_come_from_the_totals_and_a_prune_leaves_them(pipeline: str) -> None:
    store = control.store_for(load_pipeline(control.get(pipeline).path))
    stats = {"seconds": 3.0, "stages": {"read": 0.2}, "sinks": {"orders": {"upserted": 4, "stale": 1, "unchanged": 2}},
             "dead_letters": [{"stage": "converter", "error_class": "cdcflow.errors.RecordError", "count": 1}]}
    for i in range(3):
        run = f"r{i}"
        store.offsets.plan(pipeline, run, "stored", [PartitionWindow("t.p1", 0, i * 6, 6)])
        store.offsets.record_read(pipeline, run, {("t.p1", 0): (i * 6 + 6, 6)})
        if i == 2:
            store.ledger.mark(pipeline, run, "failed", "attempt 1: SinkUnavailable: down")
        store.ledger.mark(pipeline, run, "applied", None, stats)
        store.offsets.commit(pipeline, run)
    store.offsets.plan(pipeline, "r3", "stored", [PartitionWindow("t.p1", 0, 18, 6)])  # in flight

    first = scrape()
    p = (("pipeline", pipeline),)
    expect = {
        ("cdcflow_windows_total", (("outcome", "committed"), *p)): 3,
        ("cdcflow_window_attempts_failed_total", p): 1,
        ("cdcflow_records_read_total", (("partition", "0"), *p, ("topic", "t.p1"))): 18,
        ("cdcflow_dead_letters_total", (("error_class", "cdcflow.errors.RecordError"), *p, ("stage", "converter"))): 3,
        ("cdcflow_window_duration_seconds_count", p): 3,
        ("cdcflow_window_duration_seconds_sum", p): 9.0,
        ("cdcflow_window_stage_seconds_count", (*p, ("stage", "read"))): 3,
        ("cdcflow_window_stage_seconds_sum", (*p, ("stage", "read"))): pytest.approx(0.6),
    }
    for outcome, n in {"upserted": 12, "deleted": 0, "stale": 3, "unchanged": 6, "failed": 0}.items():
        expect[("cdcflow_sink_records_total", (("outcome", outcome), *p, ("sink", "orders")))] = n
    for le, n in {"0.5": 0, "1": 0, "2.5": 0, "5": 3, "1800": 3, "+Inf": 3}.items():
        expect[("cdcflow_window_duration_seconds_bucket", (("le", le), *p))] = n
    for key, value in expect.items():
        assert first[key] == value, key
    ledger = {s: first[("cdcflow_ledger_windows", (*p, ("status", s)))] for s in ("planned", "committed", "failed")}
    assert ledger == {"planned": 1, "committed": 3, "failed": 0}
    assert first[("cdcflow_last_window_failed", p)] == 0
    assert abs(first[("cdcflow_seconds_since_last_successful_window", p)]) < 60

    old = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=60)
    with store.engine.begin() as conn:
        conn.execute(sa.update(runs_table).where(runs_table.c.status == "committed").values(updated_at=old))
    assert store.chores.prune(pipeline, older_than_s=30 * 86400, keep=1)["windows"] == 3
    second = scrape()
    assert counters(second) == counters(first)  # every counter, every bucket: not one went down
    assert second[("cdcflow_ledger_windows", (*p, ("status", "committed")))] == 0  # a gauge may
    assert second[("cdcflow_last_successful_window_timestamp_seconds", p)] \
        == first[("cdcflow_last_successful_window_timestamp_seconds", p)]  # kept in the totals, not the ledger
