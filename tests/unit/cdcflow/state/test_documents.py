"""A composed index's versions and backlog in the state store (SQLite here; PostgreSQL in test_celery's
stack, MariaDB where the store is MySQL): versions only grow, and a key leaves the backlog once."""

from __future__ import annotations

from pathlib import Path

from cdcflow.state import StateStore


def test_versions_grow_per_index_and_the_backlog_keeps_its_order(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    docs = store.documents
    assert [docs.next_version("p", "a"), docs.next_version("p", "a"), docs.next_version("p", "b")] == [1, 2, 1]
    assert docs.version("p", "a") == 2 and docs.version("q", "a") == 0
    docs.carry("p", "a", "r1", add=[("1",), ("2",), ("x+y",)], done=[])
    docs.carry("p", "a", "r2", add=[("2",), ("4",)], done=[("1",)])  # 2 keeps its place; 1 was rebuilt
    assert docs.backlog("p", "a")[:2] == [("2",), ("x+y",)] or set(docs.backlog("p", "a")[:2]) == {("2",), ("x+y",)}
    assert docs.backlog("p", "a")[-1] == ("4",)
    assert docs.backlog_size("p", "a") == 3 and docs.backlog_size("p", "b") == 0
    assert len(docs.backlog("p", "a", limit=2)) == 2
    docs.carry("p", "a", "r3", add=[], done=docs.backlog("p", "a"))
    assert docs.backlog("p", "a") == []
