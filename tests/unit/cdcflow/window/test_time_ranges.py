"""Time ranges without services: the binary search against a linear scan, the time params'
validation, which runs are replays of a time range, the writer lease."""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cdcflow.errors import ConfigError, WindowFailed
from cdcflow.run_params import RunParams
from cdcflow.state import StateStore
from cdcflow.window import lease
from cdcflow.window.plan import AirflowRun, time_range
from connectors.kafka.time_search import search_time
from tests.helpers import make_pipeline

H = 3_600_000


class Log:
    """A partition's record times (None: a record without one, such as a tombstone) from ``low``."""

    def __init__(self, times: list[int | None], low: int = 0) -> None:
        self.times, self.low = times, low
        self.end = low + len(times)
        self.reads = 0

    def probe(self, offset: int) -> tuple[int, int] | None:
        self.reads += 1
        for o in range(max(offset, self.low), self.end):
            ts = self.times[o - self.low]
            if ts is not None:
                return o, ts
        return None

    def linear(self, t: int) -> int:
        for o, ts in enumerate(self.times, self.low):
            if ts is not None and ts >= t:
                return o
        return self.end


@pytest.mark.parametrize("seed", range(40))
def test_the_binary_search_finds_what_a_linear_scan_finds(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([0, 1, 2, 3, 10, 200, 5000])
    times: list[int | None] = []
    t = 1_000_000
    for _ in range(n):
        t += rng.choice([0, 0, 1, 7, 1000])  # equal times happen
        times.append(None if rng.random() < 0.15 else t)
    log = Log(times, low=rng.choice([0, 42]))
    known = [x for x in times if x is not None]
    probes = [0, 999_999, t + 1, t + 10_000]  # before the first record, after the last
    probes += [rng.choice(known) for _ in range(10)] if known else []  # equal to a record's time
    probes += [rng.choice(known) + 1 for _ in range(10)] if known else []  # between records
    for ts in probes:
        assert search_time(log.probe, log.low, log.end, ts) == log.linear(ts), (ts, times)


def test_the_search_reads_a_logarithmic_number_of_records() -> None:
    log = Log(list(range(1_000_000)))
    log.reads = 0
    assert search_time(log.probe, 0, log.end, 654_321) == 654_321
    assert log.reads <= 22


def test_records_without_a_time_stay_with_the_records_before_them() -> None:
    # a delete at 10:00 and its tombstone, then a change at 11:00: the 11:00 cut falls after the tombstone
    log = Log([10 * H, None, 11 * H])
    assert search_time(log.probe, 0, log.end, 11 * H) == 2
    assert search_time(log.probe, 0, log.end, 10 * H + 1) == 2
    assert search_time(log.probe, 0, log.end, 10 * H) == 0


def _cfg(tmp_path: Path, **overrides: object):  # noqa: ANN202
    return make_pipeline(tmp_path, **overrides)


@pytest.mark.parametrize(("params", "reason"), [
    ({"start_time": "2026-11-20T10:00:00"}, "start_time: '2026-11-20T10:00:00' has no time zone; add one"),
    ({"start_time": "yesterday"}, "start_time: 'yesterday': expected ISO 8601 with a time zone"),
    ({"start_time": 1700000000000}, "start_time: expected an ISO 8601 time with a zone"),
    ({"start_time": "2026-11-20T10:00:00Z", "end_time": "2026-11-20T09:00:00Z"},
     "end_time (2026-11-20T09:00:00Z) must be after start_time (2026-11-20T10:00:00Z)"),
    ({"start_time": "2026-11-20T10:00:00Z", "end_time": "2026-11-20T10:00:00Z"}, "must be after start_time"),
    ({"end_time": "2026-11-20T10:00:00Z"}, "end_time needs start_time"),
    ({"start_offsets": {"TOPIC": {"0": 5}}, "start_time": "2026-11-20T10:00:00Z"},
     "give start_offsets or start_time/end_time, not both"),
])
def test_invalid_time_params_are_rejected_with_the_reason(tmp_path: Path, params: dict, reason: str) -> None:
    cfg = _cfg(tmp_path)
    if "start_offsets" in params:
        params = {**params, "start_offsets": {cfg.source.topics[0]: {"0": 5}}}
    with pytest.raises(ConfigError, match="invalid run parameters") as exc:
        RunParams.parse(params, cfg)
    assert reason in str(exc.value)


def test_valid_time_params_become_epoch_ms(tmp_path: Path) -> None:
    p = RunParams.parse({"start_time": "2026-11-20T10:00:00+01:00", "end_time": "2026-11-20T10:30:00Z"},
                               _cfg(tmp_path))
    assert p.start_time == int(datetime(2026, 11, 20, 9, tzinfo=UTC).timestamp() * 1000)
    assert p.end_time == p.start_time + 90 * 60_000


def test_which_runs_replay_a_time_range(tmp_path: Path) -> None:
    plain = _cfg(tmp_path, schedule="@hourly")
    aligned = _cfg(tmp_path, schedule="@hourly", window={"align": "data_interval"})
    a, b = datetime(2026, 11, 20, 10, tzinfo=UTC), datetime(2026, 11, 20, 11, tzinfo=UTC)
    none = RunParams()
    backfill = AirflowRun("backfill", a, b)
    manual = AirflowRun("manual", a, b)
    scheduled = AirflowRun("scheduled", a, b)
    assert time_range(plain, none, backfill) == ("backfill", (a, b))
    assert time_range(aligned, none, backfill) == ("backfill", (a, b))
    assert time_range(plain, none, manual) is None  # a live window from the stored offsets
    assert time_range(aligned, none, manual) == ("time_range", (a, b))
    assert time_range(aligned, none, scheduled) is None  # live, stopped at the interval's end by plan()
    ms = RunParams(start_time=1000, end_time=2000)
    assert time_range(plain, ms, None) == (
        "time_range", (datetime.fromtimestamp(1, UTC), datetime.fromtimestamp(2, UTC)))
    with pytest.raises(ConfigError, match="has no data interval.*cdcflow run <pipeline> --from"):
        time_range(plain, none, AirflowRun("backfill", a, a))


def test_align_needs_a_schedule_with_intervals(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="window.align data_interval needs a schedule with intervals"):
        _cfg(tmp_path, schedule=None, window={"align": "data_interval"})


def test_cron_schedules_get_data_intervals(tmp_path: Path) -> None:
    from airflow.sdk import CronDataIntervalTimetable

    from cdcflow.airflow.dag_factory import timetable

    assert isinstance(timetable(_cfg(tmp_path, schedule="@hourly")), CronDataIntervalTimetable)
    assert isinstance(timetable(_cfg(tmp_path, schedule="*/5 * * * *")), CronDataIntervalTimetable)
    assert timetable(_cfg(tmp_path, schedule=None)) is None
    assert timetable(_cfg(tmp_path, schedule="@once")) == "@once"


def test_on_data_is_an_asset_watched_by_the_new_records_trigger(tmp_path: Path) -> None:
    from cdcflow.airflow.dag_factory import timetable
    from cdcflow.airflow.triggers import NewRecordsTrigger

    cfg = _cfg(tmp_path, schedule="on_data", on_data={"min_records": 50, "max_wait": "2m"})
    [asset] = timetable(cfg)
    assert asset.uri == f"cdcflow://{cfg.name}/new-records"
    [watcher] = asset.watchers
    assert isinstance(watcher.trigger, NewRecordsTrigger)
    path, kwargs = watcher.trigger.serialize()
    assert path == "cdcflow.airflow.triggers.NewRecordsTrigger"
    assert (kwargs["pipeline"], kwargs["min_records"], kwargs["max_wait"]) == (cfg.name, 50, 120.0)
    with pytest.raises(ConfigError, match="window.align data_interval needs a schedule with intervals"):
        _cfg(tmp_path, schedule="on_data", window={"align": "data_interval"})


def test_one_writer_per_pipeline(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 'o.db'}")
    assert store.leases.try_take("p", "live", 60) is None
    assert store.leases.try_take("p", "live", 60) is None  # renewal
    assert store.leases.try_take("p", "backfill", 60) == "live"
    assert store.leases.try_take("q", "backfill", 60) is None  # another pipeline is independent
    store.leases.release("p", "live")
    assert store.leases.try_take("p", "backfill", 0.3) is None
    time.sleep(0.5)  # expired (its holder was killed): the next writer takes it
    assert store.leases.try_take("p", "live", 60) is None
    # a holder the caller says is dead is taken at once; a live one is not
    assert store.leases.try_take("r", "one", 60) is None
    assert store.leases.try_take("r", "two", 60, dead=lambda holder: False) == "one"
    assert store.leases.try_take("r", "two", 60, dead=lambda holder: holder == "one") is None
    assert store.leases.try_take("r", "one", 60) == "two"


def test_a_killed_attempts_lease_is_dead_to_its_retry_and_to_anyone_on_its_host() -> None:
    """The retry of a killed window does not wait for the killed attempt's lease to expire."""
    import os
    import socket
    import subprocess

    here = socket.gethostname()
    gone = subprocess.Popen(["true"])  # a process that has exited (and been reaped)
    gone.wait()
    assert lease._dead_holder("scheduled__1", "scheduled__1@other-host:1:abcd")  # its own earlier attempt
    assert lease._dead_holder("scheduled__2", f"scheduled__1@{here}:{gone.pid}:abcd")  # gone on this host
    assert not lease._dead_holder("scheduled__2", f"scheduled__1@{here}:{os.getpid()}:abcd")  # alive here
    assert not lease._dead_holder("scheduled__2", f"scheduled__1@other-host:{gone.pid}:abcd")  # elsewhere
    assert not lease._dead_holder("scheduled__2", "scheduled__1@abcd")  # an old-style holder: wait for expiry


def test_a_holder_on_another_celery_worker_is_on_another_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Celery workers on one machine (scripts/services.sh) are two nodes, as on two machines: a
    holder's pid is checked on its own worker only; its own window's retry takes it anywhere."""
    import socket
    import subprocess

    here = socket.gethostname()
    gone = subprocess.Popen(["true"])
    gone.wait()
    monkeypatch.setenv("CDCFLOW_AIRFLOW_WORKER", "worker2")
    assert lease.node() == f"{here}/worker2"
    on_worker1 = f"scheduled__1@{here}/worker1:{gone.pid}:abcd"
    assert lease._dead_holder("scheduled__1", on_worker1)  # its retry, on worker2
    assert not lease._dead_holder("scheduled__2", on_worker1)  # another window: the pid is worker1's to check
    assert not lease._dead_holder("scheduled__2", f"scheduled__1@{here}:{gone.pid}:abcd")  # not a worker's
    assert lease._dead_holder("scheduled__2", f"scheduled__1@{here}/worker2:{gone.pid}:abcd")  # gone on worker2


def test_a_killed_holders_lease_is_taken_at_once_by_its_retry_and_on_expiry_by_another_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a worker killed mid-window leaves (its lease, renewed for ``seconds``), as the other
    worker meets it: the window's retry writes at once, another window once the lease has expired."""
    import socket
    import subprocess

    store = StateStore(f"sqlite:///{tmp_path / 'o.db'}")
    gone = subprocess.Popen(["true"])
    gone.wait()
    killed = f"scheduled__1@{socket.gethostname()}/worker1:{gone.pid}:abcd"
    monkeypatch.setenv("CDCFLOW_AIRFLOW_WORKER", "worker2")
    waited = {}
    for run_id in ("scheduled__1", "scheduled__2"):
        assert store.leases.try_take("p", killed, 2.0) is None
        asked = time.monotonic()
        with lease.writer_lease(store, "p", run_id, wait=30):
            waited[run_id] = time.monotonic() - asked
    assert waited["scheduled__1"] < 0.5, waited  # the retry: at once
    assert 1.5 < waited["scheduled__2"] < 4.5, waited  # another window: the lease's 2 s (polled every second)


def test_a_window_waits_for_the_writer_and_fails_clearly_when_it_does_not_end(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 'o.db'}")
    order: list[str] = []
    with lease.writer_lease(store, "p", "backfill__1"):
        def live() -> None:
            with lease.writer_lease(store, "p", "scheduled__2", wait=30):
                order.append("live writes")
        t = threading.Thread(target=live)
        t.start()
        time.sleep(1.5)
        order.append("backfill ends")
    t.join(10)
    assert order == ["backfill ends", "live writes"]
    with lease.writer_lease(store, "p", "backfill__3"), pytest.raises(WindowFailed) as exc, \
            lease.writer_lease(store, "p", "scheduled__4", wait=0.5):
        pass
    assert "window 'backfill__3' has been writing to the sinks" in str(exc.value)
    assert "no offset moved" in str(exc.value)
