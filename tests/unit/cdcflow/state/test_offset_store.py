"""The OffsetStore protocol (cdcflow/state/protocol.py): the same assertions against the SQL store
(SQLite in a temporary directory) and its in-memory twin, so that the twin stays faithful."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cdcflow.errors import WindowFailed
from cdcflow.state import MemoryOffsetStore, OffsetStore, PartitionWindow, StateStore


@pytest.fixture(params=["sql", "memory"])
def offsets(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OffsetStore]:
    if request.param == "memory":
        yield MemoryOffsetStore()
        return
    state = StateStore(f"sqlite:///{tmp_path / 'offsets.db'}")
    yield state.offsets
    state.close()


def _window(offsets: OffsetStore, run_id: str, start: int, end: int, origin: str = "stored") -> None:
    offsets.plan("p", run_id, origin, [PartitionWindow("t", 0, start, 100)])  # type: ignore[arg-type]
    offsets.record_read("p", run_id, {("t", 0): (end, end - start)})


def test_a_plan_is_kept_per_run_and_read_back_as_planned(offsets: OffsetStore) -> None:
    interval = (datetime(2026, 11, 1, 10, tzinfo=UTC), datetime(2026, 11, 1, 11, tzinfo=UTC))
    first = offsets.plan("p", "r1", "time_range", [PartitionWindow("t", 1, 7, 50, stop=40),
                                                   PartitionWindow("t", 0, 3, 50, end=9, records=6)], interval)
    assert first.status == "planned" and first.origin == "time_range" and first.attempt == 0
    assert first.partitions == (PartitionWindow("t", 0, 3, 50), PartitionWindow("t", 1, 7, 50, stop=40))
    assert first.interval == (datetime(2026, 11, 1, 10), datetime(2026, 11, 1, 11))
    assert not first.read_done and not first.moves_offsets
    again = offsets.plan("p", "r1", "stored", [PartitionWindow("t", 0, 99, 1)])
    assert again == first
    assert offsets.plan("q", "r1", "stored", []).partitions == ()  # per pipeline


def test_a_commit_needs_a_planned_window_read_completely(offsets: OffsetStore) -> None:
    with pytest.raises(WindowFailed, match="no planned window"):
        offsets.commit("p", "nothing")
    offsets.plan("p", "r1", "stored", [PartitionWindow("t", 0, 0, 10), PartitionWindow("t", 1, 0, 10)])
    offsets.record_read("p", "r1", {("t", 0): (10, 10)})
    with pytest.raises(WindowFailed, match="not read completely"):
        offsets.commit("p", "r1")
    assert offsets.load("p") == {}
    offsets.record_read("p", "r1", {("t", 1): (4, 4)})
    assert offsets.plan("p", "r1", "stored", []).read_done
    assert offsets.commit("p", "r1").advanced == {("t", 0): 10, ("t", 1): 4}
    assert offsets.load("p") == {("t", 0): 10, ("t", 1): 4}
    assert offsets.plan("p", "r1", "stored", []).status == "committed"


def test_compare_and_set_advances_from_the_start_only(offsets: OffsetStore) -> None:
    _window(offsets, "r1", 0, 10)
    assert offsets.commit("p", "r1").advanced == {("t", 0): 10}
    repeated = offsets.commit("p", "r1")  # the same run again: harmless, reported as advanced
    assert repeated.advanced == {("t", 0): 10} and repeated.left == {}
    _window(offsets, "r2", 10, 20)
    assert offsets.commit("p", "r2").advanced == {("t", 0): 20}
    stale = offsets.commit("p", "r1")  # an old run cleared and re-run: the offset does not go back
    assert stale.advanced == {}
    assert stale.left == {("t", 0): "stored offset is 20 (set by run r2), not this window's start 0: left unchanged"}
    assert offsets.load("p") == {("t", 0): 20}
    assert offsets.load("other") == {}


def test_given_start_offsets_set_and_a_time_range_keeps(offsets: OffsetStore) -> None:
    _window(offsets, "r1", 40, 50)
    offsets.commit("p", "r1")
    _window(offsets, "replay", 5, 15, origin="params")
    assert offsets.commit("p", "replay").advanced == {("t", 0): 15}
    assert offsets.load("p") == {("t", 0): 15}
    for origin in ("backfill", "time_range"):
        _window(offsets, origin, 0, 30, origin=origin)
        kept = offsets.commit("p", origin)
        name = origin.replace("_", "-")
        assert kept.advanced == {}
        assert kept.left == {("t", 0): f"a {name} window (a replay of a time range): stored offsets stay"}
        assert offsets.plan("p", origin, origin, []).status == "committed"  # type: ignore[arg-type]
    assert offsets.load("p") == {("t", 0): 15}
