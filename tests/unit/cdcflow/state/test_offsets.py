"""The offset store and ledger (SQLite): idempotent plans, compare-and-set commits."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.errors import WindowFailed
from cdcflow.state import PartitionWindow, StateStore
from cdcflow.window import clients


def _plan(store: StateStore, run_id: str, start: int, origin: str = "stored") -> None:
    store.offsets.plan("p", run_id, origin, [PartitionWindow("t", 0, start, 10)])  # type: ignore[arg-type]


def test_plan_is_idempotent_per_run(store: StateStore) -> None:
    _plan(store, "r1", 0)
    store.offsets.plan("p", "r1", "stored", [PartitionWindow("t", 0, 99, 1)])
    w = store.ledger.get_window("p", "r1")
    assert w is not None and w.partitions[0].start == 0 and w.status == "planned"


def test_commit_needs_a_finished_read(store: StateStore) -> None:
    _plan(store, "r1", 0)
    with pytest.raises(WindowFailed, match="not read completely"):
        store.offsets.commit("p", "r1")
    assert store.offsets.load("p") == {}


def test_commit_moves_offsets_and_a_stale_run_leaves_them(store: StateStore) -> None:
    _plan(store, "r1", 0)
    store.offsets.record_read("p", "r1", {("t", 0): (10, 10)})
    assert store.offsets.commit("p", "r1").advanced == {("t", 0): 10}
    assert store.offsets.load("p") == {("t", 0): 10}
    # a repeated commit of the same run is harmless
    assert store.offsets.commit("p", "r1").advanced == {("t", 0): 10}
    _plan(store, "r2", 10)
    store.offsets.record_read("p", "r2", {("t", 0): (20, 10)})
    store.offsets.commit("p", "r2")
    # r1 cleared and re-run: it re-applies 0..10 but must not move the offset back
    result = store.offsets.commit("p", "r1")
    assert result.advanced == {} and "not this window's start 0" in result.left[("t", 0)]
    assert store.offsets.load("p") == {("t", 0): 20}


def test_explicit_start_offsets_rewind(store: StateStore) -> None:
    store.offsets.set("p", {("t", 0): 50}, "x")
    _plan(store, "replay", 5, origin="params")
    store.offsets.record_read("p", "replay", {("t", 0): (15, 10)})
    assert store.offsets.commit("p", "replay").advanced == {("t", 0): 15}
    assert store.offsets.load("p") == {("t", 0): 15}
    w = store.ledger.get_window("p", "replay")
    assert w is not None and w.status == "committed" and w.origin == "params"


def test_exactly_once_offsets_in_an_unreachable_mysql_fail_with_a_clear_error() -> None:
    from cdcflow.errors import SinkUnavailable
    from connectors.mysql.offsets import SinkOffsets

    held = SinkOffsets("mysql+pymysql://cdcflow:secret@127.0.0.1:1/cdcflow")
    with pytest.raises(SinkUnavailable) as exc:
        held.load("orders")
    assert "offset_store.sink" in str(exc.value) and "127.0.0.1:1" in str(exc.value)
    assert "secret" not in str(exc.value) and "no offset moved" in str(exc.value)


def test_exactly_once_plans_from_the_sinks_offsets_and_the_store_takes_them(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The sink's transaction committed, the ledger commit did not: the sink's offsets win and the
    offset store is brought up to them; a partition the sink does not know keeps the store's."""
    from cdcflow.config import PipelineConfig

    cfg = PipelineConfig.model_validate({
        "name": "p", "source": {"topics": ["t"]}, "offset_store": {"sink": "rows"},
        "sinks": [{"type": "mysql", "name": "rows", "table": "t", "primary_key": ["id"],
                   "columns": [{"name": "id", "type": "BIGINT"}]}]})
    store = StateStore(f"sqlite:///{tmp_path / 'offsets.db'}")
    store.offsets.set("p", {("t", 0): 5, ("t", 2): 7}, run_id="run-a")

    class Held:
        def load(self, pipeline: str) -> dict[tuple[str, int], tuple[int, str]]:
            assert pipeline == "p"
            return {("t", 0): (9, "run-b"), ("t", 1): (3, "run-b")}

        def close(self) -> None:
            pass

    monkeypatch.setattr(clients.Clients, "sink_offsets", lambda _self: Held())
    assert clients.stored_offsets(cfg, store) == {("t", 0): 9, ("t", 1): 3, ("t", 2): 7}
    assert store.offsets.load("p") == {("t", 0): 9, ("t", 1): 3, ("t", 2): 7}
    store.close()


def test_the_uncommitted_runs_over_a_windows_records(tmp_path: Path) -> None:
    """The runs whose dead letters a window reads back: attempted, not committed, overlapping."""
    store = StateStore(f"sqlite:///{tmp_path / 'offsets.db'}")
    for run, start, n in (("left", 100, 50), ("elsewhere", 300, 50), ("done", 100, 50), ("never-tried", 100, 50)):
        store.offsets.plan("p", run, "stored", [PartitionWindow("t", 0, start, n)])
    for run in ("left", "elsewhere", "done"):
        store.ledger.begin_attempt("p", run)
    store.offsets.record_read("p", "left", {("t", 0): (130, 30)})  # read 100..130 of its 50
    store.offsets.record_read("p", "done", {("t", 0): (150, 50)})
    store.offsets.commit("p", "done")
    window = store.offsets.plan("p", "next", "stored", [PartitionWindow("t", 0, 120, 100)])
    assert store.ledger.runs_that_may_have_sent_dead_letters("p", window) == ["left"]
    later = store.offsets.plan("p", "later", "stored", [PartitionWindow("t", 0, 130, 100)])
    assert store.ledger.runs_that_may_have_sent_dead_letters("p", later) == []  # 'left' read to 130 only
    store.close()


def test_a_run_committed_after_a_retry_counts_up_to_what_it_planned(tmp_path: Path) -> None:
    """An attempt whose read tasks sent dead letters, then failed before the ledger held its read's
    ends, may have read further than the retry that committed: the next window reads back the
    dead letters of the run's whole planned range."""
    store = StateStore(f"sqlite:///{tmp_path / 'offsets.db'}")
    for run, attempts in (("retried", 2), ("once", 1)):
        store.offsets.plan("p", run, "stored", [PartitionWindow("t", 0 if run == "retried" else 1, 100, 50)])
        for _ in range(attempts):
            store.ledger.begin_attempt("p", run)
        store.offsets.record_read("p", run, {("t", 0 if run == "retried" else 1): (120, 20)})  # read 100..120 of 150
        store.offsets.commit("p", run)
    window = store.offsets.plan("p", "next", "stored", [PartitionWindow("t", 0, 120, 100),
                                                        PartitionWindow("t", 1, 120, 100)])
    assert store.ledger.runs_that_may_have_sent_dead_letters("p", window) == ["retried"]
    store.close()


class _SinkConn:
    """Just enough of a connection for connectors.mysql.offsets.write: the stored rows, and the
    statements that would change them."""

    def __init__(self, rows: list[tuple[str, int, int, str]]) -> None:
        self.rows = rows
        self.upserts: list[tuple[str, str, int, int, str]] = []
        self.commits: list[tuple[str, str, str]] = []

    def exec_driver_sql(self, sql: str, params: tuple[object, ...]) -> list[tuple[str, int, int, str]]:
        if sql.startswith("SELECT"):
            return self.rows
        if "cdcflow_sink_offsets" in sql:
            self.upserts.append(params)  # type: ignore[arg-type]
        else:
            self.commits.append(params)  # type: ignore[arg-type]
        return []


def test_exactly_once_offsets_move_by_the_same_rule() -> None:
    """The MySQL sink's offsets (connectors/mysql/offsets.write) follow connectors/offset_rule.py:
    advance from the start only, set on a rewind, keep on a time range."""
    from connectors.mysql.offsets import OffsetCommit, write

    conn = _SinkConn([("t", 0, 10, "r0"), ("t", 1, 30, "r9")])
    ranges = (("t", 0, 10, 20), ("t", 1, 20, 25), ("t", 2, 0, 5))
    result = write(conn, OffsetCommit("p", "r1", "advance", ranges))  # type: ignore[arg-type]
    assert result == {"advanced": {"t:0": 20, "t:2": 5}, "left": {
        "t:1": "the sink's offset is 30 (set by run r9), not this window's start 20: left unchanged"}}
    assert conn.upserts == [("p", "t", 0, 20, "r1"), ("p", "t", 2, 5, "r1")]
    assert conn.commits == [("p", "r1", '{"t:0": 20, "t:2": 5}')]

    conn = _SinkConn([("t", 0, 20, "r1")])  # this run's end, but no record of its commit: not a repeat here
    result = write(conn, OffsetCommit("p", "r1", "advance", (("t", 0, 10, 20),)))  # type: ignore[arg-type]
    assert result["advanced"] == {} and "the sink's offset is 20 (set by run r1)" in result["left"]["t:0"]
    assert conn.upserts == []

    conn = _SinkConn([("t", 0, 50, "r0")])
    assert write(conn, OffsetCommit("p", "rw", "set", (("t", 0, 5, 15),)))["advanced"] == {"t:0": 15}  # type: ignore[arg-type]
    assert conn.upserts == [("p", "t", 0, 15, "rw")]

    conn = _SinkConn([("t", 0, 50, "r0")])
    kept = write(conn, OffsetCommit("p", "rb", "keep", (("t", 0, 0, 30),)))  # type: ignore[arg-type]
    assert kept == {"advanced": {}, "left": {"t:0": "a replay of a time range: stored offsets stay"}}
    assert conn.upserts == [] and conn.commits == [("p", "rb", "{}")]
