"""Time ranges on the real services: time -> offset on the broker (whose ListOffsets-by-time is wrong,
so the search over the records is what answers), an aligned hourly pipeline under `airflow dags test`,
an aligned scheduled window's stop, and `cdcflow offsets set --to-time`."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from cdcflow.window import clients
from cdcflow.window.plan import AirflowRun
from connectors.kafka.client import consumer_config
from connectors.kafka.reader import discover
from connectors.kafka.time_search import offsets_for_time, scan_for_time
from tests.helpers import bootstrap, expected, state_of, subprocess_env, table_rows, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.system, pytest.mark.services]
ROOT = Path(__file__).resolve().parents[4]
H = 3_600_000
BASE = int(datetime(2026, 11, 20, tzinfo=UTC).timestamp() * 1000)  # five hours of changes from here


def five_hours(seed: int) -> cdcgen.Stream:
    """600 changes (and tombstones) over 60 keys, 30 s apart from BASE: 120 per hour."""
    return cdcgen.orders_stream(600, 60, seed=seed, broken=False, start_ts=BASE, step_ms=30_000,
                                record_timestamps=True)


def in_range(events: list[cdcgen.Event], start: int, end: int) -> list[cdcgen.Event]:
    return [e for e in events if e.timestamp is not None and start <= e.timestamp < end]


def test_time_to_offset_matches_a_linear_scan_on_the_broker() -> None:
    topic = f"t.{unique('tsearch')}"
    stream = five_hours(3)
    cdcgen.produce(bootstrap(), topic, stream.events)
    conf = consumer_config({"bootstrap.servers": bootstrap()}, unique("g"), {})
    parts = [(s.topic, s.partition, s.low, s.end) for s in discover(conf, [topic])]
    assert sum(end - low for _t, _p, low, end in parts) == len(stream.events)
    times = sorted({e.timestamp for e in stream.events if e.timestamp})
    probes = [BASE - H, times[0], times[0] + 1, BASE + 2 * H, times[len(times) // 2], times[len(times) // 2] + 7,
              times[-1], times[-1] + 1, BASE + 10 * H]
    for source in ("kafka", "source_ts_ms"):
        for ts in probes:
            found = offsets_for_time(conf, parts, ts, source=source)
            for t, p, low, end in parts:
                assert found[(t, p)] == scan_for_time(conf, t, p, low, end, ts, source), (source, ts, p)
    # before the first record: the log start; after the last: the log end
    assert offsets_for_time(conf, parts, BASE - H) == {(t, p): low for t, p, low, _e in parts}
    assert offsets_for_time(conf, parts, BASE + 10 * H) == {(t, p): end for t, p, _l, end in parts}


def _hourly(config_dir: Path, tag: str, **window: Any) -> Any:
    return load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag, schedule="@hourly",
                                        window={"max_records": 100_000, **window}))


def test_airflow_dags_test_of_an_aligned_hourly_pipeline_writes_exactly_that_hour(config_dir: Path) -> None:
    tag = unique("hourly")
    cfg = _hourly(config_dir, tag, align="data_interval")
    stream = five_hours(5)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events)

    # a manual run at 03:00 has Airflow's data interval [02:00, 03:00) (the last complete hour)
    logical = datetime.fromtimestamp((BASE + 3 * H) / 1000, UTC)
    result = subprocess.run(["airflow", "dags", "test", cfg.name, logical.isoformat()], cwd=ROOT,
                            env=subprocess_env(config_dir), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    hour = in_range(stream.events, BASE + 2 * H, BASE + 3 * H)
    assert 100 < len(hour) < 160
    assert table_rows(cfg.sinks[0].table) == expected(state_of(hour))
    store = clients.offset_store(cfg)
    [window] = store.ledger.history(cfg.name)
    assert window.origin == "time_range"
    assert window.interval == (datetime(2026, 11, 20, 2), datetime(2026, 11, 20, 3))
    assert window.total_records == len(hour)
    assert store.offsets.load(cfg.name) == {}  # a replay of a time range does not move the stored offsets


def test_an_aligned_scheduled_window_stops_at_its_interval_end(config_dir: Path, tmp_path: Path) -> None:
    tag = unique("align")
    cfg = _hourly(config_dir, tag, align="data_interval", max_records=50)
    stream = five_hours(6)
    topic = cfg.source.topics[0]
    cdcgen.produce(bootstrap(), topic, stream.events)
    store = StateStore(f"sqlite:///{tmp_path / 'aligned.db'}")
    start, end = (datetime.fromtimestamp((BASE + h * H) / 1000, UTC) for h in (1, 2))
    conf = clients.consumer_conf(cfg)
    parts = [(s.topic, s.partition, s.low, s.end) for s in discover(conf, [topic])]
    cut = offsets_for_time(conf, parts, BASE + 2 * H)

    # a big budget: every partition reads from its start (stored: earliest) up to the interval's end
    big = runner.plan(cfg, "scheduled__1", {"max_records": 10_000}, store, AirflowRun("scheduled", start, end))
    assert big.origin == "stored" and big.interval == (start.replace(tzinfo=None), end.replace(tzinfo=None))
    assert {w.tp: (w.start, w.stop, w.max_records) for w in big.partitions} == {
        (t, p): (low, cut[(t, p)], cut[(t, p)] - low) for t, p, low, _e in parts}
    # a small one: the budget still bounds it (the next scheduled window continues from there)
    small = runner.plan(cfg, "scheduled__2", None, store, AirflowRun("scheduled", start, end))
    assert sum(w.max_records for w in small.partitions) == 50
    assert all(w.stop == cut[w.tp] for w in small.partitions)


def test_offsets_set_to_a_time(config_dir: Path) -> None:
    tag = unique("totime")
    cfg = _hourly(config_dir, tag)
    stream = five_hours(7)
    topic = cfg.source.topics[0]
    cdcgen.produce(bootstrap(), topic, stream.events)
    env = subprocess_env(config_dir)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["cdcflow", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    refused = cli("offsets", "set", cfg.name, "--to-time", "2026-11-20T02:00:00Z")
    assert refused.returncode != 0 and "STOPPED" in refused.stderr + refused.stdout
    clients.offset_store(cfg).operator.set_state(cfg.name, "stopped", "test")
    done = cli("offsets", "set", cfg.name, "--to-time", "2026-11-20T02:00:00Z")
    assert done.returncode == 0, done.stderr
    conf = clients.consumer_conf(cfg)
    parts = [(s.topic, s.partition, s.low, s.end) for s in discover(conf, [topic])]
    want = {(t, p): scan_for_time(conf, t, p, low, end, BASE + 2 * H) for t, p, low, end in parts}
    assert clients.offset_store(cfg).offsets.load(cfg.name) == want
    # the records before each offset are exactly those before 02:00
    before = sum(o - low for (t, p, low, _e) in parts for o in [want[(t, p)]])
    assert before == len(in_range(stream.events, 0, BASE + 2 * H))
    bad = cli("offsets", "set", cfg.name, "--to-time", "2026-11-20T02:00:00")
    assert bad.returncode != 0 and "has no time zone" in bad.stderr + bad.stdout
