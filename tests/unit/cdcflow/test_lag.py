"""Burrow's lag rules, driven by tables of (committed offset, lag) sequences → expected status."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from cdcflow.lag import Commit, PartitionLag, evaluate_partition, group_status, summarize

NOW = datetime(2026, 11, 23, 12, 0, 0)
WINDOW = 5
STOP_AFTER = 600.0


def commits(pairs: list[tuple[int, int]], last_at: datetime = NOW - timedelta(seconds=30), every: float = 60.0,
            run_ids: list[str] | None = None) -> list[Commit]:
    """(offset, lag) oldest first; the newest at ``last_at``, one every ``every`` seconds."""
    n = len(pairs)
    return [Commit(o, lag, last_at - timedelta(seconds=every * (n - 1 - i)), (run_ids or [""] * n)[i])
            for i, (o, lag) in enumerate(pairs)]


CASES = [
    # seed 003: lag = log size − committed offset; a lag that keeps growing means the consumer falls behind
    ("seed 003: log 100, committed 100 → no lag", [(90, 10), (100, 0)], 0, "OK"),
    ("seed 003: lag growing while consuming → WARN", [(10, 5), (20, 9), (30, 14), (40, 20), (50, 27)], 27, "WARN"),
    ("lag flat while consuming → WARN (not decreasing)", [(10, 5), (20, 5), (30, 5), (40, 5), (50, 5)], 5, "WARN"),
    ("lag shrinking → OK", [(10, 50), (20, 40), (30, 30), (40, 20), (50, 10)], 10, "OK"),
    ("one dip in lag → OK", [(10, 5), (20, 9), (30, 4), (40, 20), (50, 27)], 27, "OK"),
    ("lag zero at a commit in the window → OK", [(10, 5), (20, 0), (30, 14), (40, 20), (50, 27)], 27, "OK"),
    ("current lag zero beats everything", [(10, 5), (10, 9), (10, 14), (10, 20), (10, 27)], 0, "OK"),
    ("offset stuck, lag > 0 → STALL", [(40, 5), (40, 9), (40, 14), (40, 20), (40, 27)], 27, "STALL"),
    ("offset stuck, window not full yet → OK (no verdict)", [(40, 5), (40, 9)], 9, "OK"),
    ("growth in a window not full → OK (no verdict)", [(10, 5), (20, 9), (30, 14)], 14, "OK"),
    ("offset went back → REWIND", [(10, 5), (20, 9), (5, 30), (15, 25), (25, 20)], 20, "REWIND"),
    ("no commit at all, lag > 0 → OK (nothing to judge)", [], 12, "OK"),
]


@pytest.mark.parametrize(("name", "pairs", "current", "want"), CASES, ids=[c[0] for c in CASES])
def test_partition_rules(name: str, pairs: list[tuple[int, int]], current: int, want: str) -> None:
    status, reason = evaluate_partition(commits(pairs), current, NOW, WINDOW, STOP_AFTER)
    assert status == want, reason


def test_stop_when_no_commit_for_longer_than_the_threshold_while_lag_waits() -> None:
    old = commits([(10, 0), (20, 0)], last_at=NOW - timedelta(seconds=601))
    status, reason = evaluate_partition(old, 5, NOW, WINDOW, STOP_AFTER)
    assert status == "STOP" and "no commit for 601s (threshold 600s) while 5 records wait" in reason
    assert evaluate_partition(old, 0, NOW, WINDOW, STOP_AFTER)[0] == "OK"  # idle but caught up: fine
    fresh = commits([(10, 0), (20, 0)], last_at=NOW - timedelta(seconds=599))
    assert evaluate_partition(fresh, 5, NOW, WINDOW, STOP_AFTER)[0] == "OK"


def test_only_the_last_window_of_commits_counts() -> None:
    pairs = [(40, 5), (40, 9)] + [(50 + i * 10, 40 - i * 5) for i in range(WINDOW)]
    assert evaluate_partition(commits(pairs), 20, NOW, WINDOW, STOP_AFTER)[0] == "OK"
    stalled_long_ago = [(10, 9)] * 3 + [(20 + i * 10, 3) for i in range(WINDOW)]
    assert evaluate_partition(commits(stalled_long_ago), 3, NOW, WINDOW, STOP_AFTER)[0] == "WARN"


def test_rewind_says_who_moved_the_offset() -> None:
    pairs = [(10, 5), (20, 9), (5, 30)]
    by_replay = commits(pairs, run_ids=["a", "b", "manual__replay"])
    status, reason = evaluate_partition(by_replay, 30, NOW, WINDOW, STOP_AFTER, frozenset({"manual__replay"}))
    assert status == "REWIND" and "by a replay (manual__replay)" in reason
    by_reset = commits(pairs, run_ids=["a", "b", "offsets-altered-by:admin@2026-11-23T10:00:00"])
    assert "an operator's offset change" in evaluate_partition(by_reset, 30, NOW, WINDOW, STOP_AFTER)[1]


def _p(status: str, lag: int, n: int = WINDOW) -> PartitionLag:
    return PartitionLag("t", lag, status, lag, None, None, commits([(i, lag) for i in range(n)]))  # type: ignore[arg-type]


@pytest.mark.parametrize(("statuses", "want"), [
    (["OK", "OK"], "OK"), (["OK", "WARN"], "WARN"), (["WARN", "STOP"], "ERR"), (["OK", "STALL"], "ERR"),
    (["OK", "REWIND"], "OK"),  # an operator's replay is said, not alarmed
    ([], "NOTFOUND"),
])
def test_group_status_is_the_worst_partition(statuses: list[str], want: str) -> None:
    assert group_status([_p(s, i) for i, s in enumerate(statuses)]) == want


def test_summary_has_total_max_and_completeness() -> None:
    parts = [_p("OK", 3), _p("WARN", 10), _p("OK", 0, n=2)]
    s = summarize("p", "cdcflow-p", parts, WINDOW)
    assert s.total_lag == 13 and s.max_lag is parts[1] and s.status == "WARN"
    assert s.complete == round((5 + 5 + 2) / 15, 3)
