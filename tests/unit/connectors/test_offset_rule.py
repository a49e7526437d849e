"""The one compare-and-set rule (connectors/offset_rule.py) both offset stores commit by (that it
imports nothing of cdcflow is tests/unit/test_layers.py's to check)."""

from __future__ import annotations

import pytest

from connectors.offset_rule import commit_outcome


@pytest.mark.parametrize(("mode", "stored", "start", "end", "run_id", "want"), [
    # a window planned from the stored offsets: moves only from its own start
    ("advance", None, 0, 10, "r1", "move"),  # the partition's first commit
    ("advance", (0, "r0"), 0, 10, "r1", "move"),
    ("advance", (10, "r0"), 10, 10, "r1", "move"),  # an empty window: moves to where it is
    ("advance", (20, "r2"), 0, 10, "r1", "conflict"),  # a later run moved it: a cleared old run
    ("advance", (5, "op"), 10, 20, "r1", "conflict"),  # an operator moved it back meanwhile
    ("advance", (10, "r1"), 0, 10, "r1", "repeated"),  # this run's own commit, again
    ("advance", (10, "r1"), 0, 10, None, "conflict"),  # a store that knows repeats otherwise
    ("advance", (10, "r2"), 0, 10, "r1", "conflict"),  # the same end, another run's
    ("advance", (12, "r1"), 0, 10, "r1", "conflict"),  # this run's id, another end
    # start offsets given explicitly (replay, rewind): set, whatever is stored
    ("set", None, 5, 15, "r1", "move"),
    ("set", (50, "r0"), 5, 15, "r1", "move"),
    ("set", (15, "r1"), 5, 15, "r1", "move"),
    # a time-range replay: the live position stays
    ("keep", None, 0, 10, "r1", "keep"),
    ("keep", (0, "r0"), 0, 10, "r1", "keep"),
    ("keep", (10, "r1"), 0, 10, "r1", "keep"),
])
def test_commit_outcome(mode: str, stored: tuple[int, str] | None, start: int, end: int, run_id: str | None,
                        want: str) -> None:
    assert commit_outcome(mode, stored, start, end, run_id) == want  # type: ignore[arg-type]

