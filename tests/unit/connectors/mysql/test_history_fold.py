"""The history's one rule (connectors/mysql/history.fold): a key's versions are the fold of its changes
in version order, whatever order they arrive in and however often."""

from __future__ import annotations

import itertools

import pytest

from connectors.mysql.history import Event, Version, fold, intervals

TRACKED = [0]  # values: (status, note); status is tracked


def up(version: int, status: str, note: str, kept: frozenset[int] = frozenset()) -> Event:
    return Event(version, False, (status, note), kept)


def down(version: int) -> Event:
    return Event(version, True, (None, None))


def shape(rows: list[Version]) -> list[tuple[int, int, str, list[str | None]]]:
    return [(r.version, r.last, r.op, r.values) for r in rows]


def applied(events: list[Event], windows: list[list[int]], tracked: list[int] | None = TRACKED) -> list[Version]:
    """The history after the events are applied window by window (each a list of indices), every
    window folded with the whole stored history (what apply_history reads is a suffix of it: the
    fold of a suffix is the fold's suffix)."""
    stored: list[Version] = []
    for window in windows:
        folded = fold([Version(r.version, r.last, r.op, list(r.values), stored=True) for r in stored],
                      [events[i] for i in window], tracked)
        stored = folded.rows
    return stored


EVENTS = [up(10, "new", "a"), up(20, "new", "b"), up(30, "paid", "b"), down(40), up(50, "new", "c"),
          up(35, "shipped", "b")]


def test_changes_in_order_open_merge_and_close_versions() -> None:
    rows = applied(EVENTS[:5], [[0, 1, 2, 3, 4]])
    assert shape(rows) == [(10, 20, "c", ["new", "b"]), (30, 30, "u", ["paid", "b"]), (40, 40, "d", [None, None]),
                           (50, 50, "c", ["new", "c"])]
    assert intervals(rows) == [(30, False), (40, False), (50, False), (None, True)]


@pytest.mark.parametrize("order", list(itertools.permutations(range(6)))[::7])
def test_any_arrival_order_in_windows_of_any_size_gives_the_same_history(order: tuple[int, ...]) -> None:
    """Without track_history every change is a version of its own: the history is exact in any order."""
    expected = shape(applied(EVENTS, [sorted(range(6), key=lambda i: EVENTS[i].version)], tracked=None))
    one_by_one = applied(EVENTS, [[i] for i in order], tracked=None)
    in_twos = applied(EVENTS, [list(order[i:i + 2]) for i in range(0, 6, 2)], tracked=None)
    assert shape(one_by_one) == expected and shape(in_twos) == expected


@pytest.mark.parametrize("order", [(0, 1, 2, 3, 4, 5), (0, 2, 1, 3, 5, 4), (0, 1, 2, 5, 3, 4), (1, 0, 2, 3, 4, 5)])
def test_with_tracked_columns_a_late_change_outside_a_merged_span_gives_the_same_history(
        order: tuple[int, ...]) -> None:
    """With track_history the order matters only for a change older than one merged in place (next test)."""
    expected = shape(applied(EVENTS, [sorted(range(6), key=lambda i: EVENTS[i].version)]))
    assert shape(applied(EVENTS, [[i] for i in order])) == expected


def test_a_replay_of_every_change_is_counted_unchanged_and_changes_nothing() -> None:
    rows = applied(EVENTS, [list(range(6))])
    again = fold([Version(r.version, r.last, r.op, list(r.values), stored=True) for r in rows], EVENTS, TRACKED)
    assert shape(again.rows) == shape(rows) and again.gone == []
    assert (again.upserted, again.deleted, again.unchanged, again.stale) == (0, 0, 6, 0)


def test_a_late_change_older_than_one_merged_in_place_is_stale() -> None:
    rows = applied([up(10, "new", "a"), up(30, "new", "c"), up(20, "new", "b")], [[0, 1], [2]])
    assert shape(rows) == [(10, 30, "c", ["new", "c"])]


def test_a_late_change_can_merge_a_stored_version_into_itself() -> None:
    stored = [Version(10, 10, "c", ["new", "a"], stored=True), Version(30, 30, "u", ["paid", "b"], stored=True)]
    folded = fold(stored, [up(20, "paid", "x")], TRACKED)
    assert shape(folded.rows) == [(10, 10, "c", ["new", "a"]), (20, 30, "u", ["paid", "b"])] and folded.gone == [30]


def test_a_snapshot_read_opens_an_r_version_that_nothing_merges_into_and_a_later_read_is_its_own() -> None:
    read = [Event(10, False, ("new", "a"), read=True), up(20, "new", "b"), Event(30, False, ("new", "b"), read=True)]
    assert shape(fold([], read, TRACKED).rows) == [(10, 20, "r", ["new", "b"]), (30, 30, "r", ["new", "b"])]
    late = fold([Version(20, 20, "u", ["new", "b"], stored=True)], [Event(10, False, ("new", "a"), read=True)],
                TRACKED)  # the read arrives late: it is the first version, and 20 merges into it
    assert shape(late.rows) == [(10, 20, "r", ["new", "b"])] and late.gone == [20]


def test_without_tracked_columns_every_change_opens_a_version() -> None:
    assert [r.version for r in applied(EVENTS[:3], [[0, 1, 2]], tracked=None)] == [10, 20, 30]


def test_kept_values_come_from_the_previous_version_and_a_second_delete_closes_nothing() -> None:
    folded = fold([], [up(10, "new", "a"), up(20, "paid", None, frozenset({1})), down(30), down(31)], TRACKED)
    assert shape(folded.rows) == [(10, 10, "c", ["new", "a"]), (20, 20, "u", ["paid", "a"]),
                                  (30, 30, "d", [None, None])]
    assert (folded.upserted, folded.deleted, folded.unchanged) == (2, 1, 1)
