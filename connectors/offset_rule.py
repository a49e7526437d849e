"""The one compare-and-set rule by which a committed window moves a partition's stored offset.

Two stores keep offsets and both commit windows by it: the offset store (cdcflow/state/offsets.py)
and, for exactly-once, the MySQL sink's own tables (connectors/mysql/offsets.py), the latter inside
a Spark task. So the rule lives here, pure and importing nothing of ``cdcflow``: connectors never
import the platform.

A window commits each partition in one of three modes, from where its start offsets came from:

* ``advance``: planned from the stored offsets. The offset moves to the window's end only while it
  is still the window's start. A cleared old run therefore re-applies its range (sinks are idempotent
  and version-guarded) without moving the offset back or forth;
* ``set``: start offsets given explicitly (a replay or rewind): the offset is set to the window's end;
* ``keep``: a time-range replay (a backfill): the live position stays where it is.
"""

from __future__ import annotations

from typing import Literal

Mode = Literal["advance", "set", "keep"]
# move: write the window's end; keep: a replay, leave it; conflict: the stored offset is not the
# window's start, leave it; repeated: this run moved it to its end already, nothing to write
Outcome = Literal["move", "keep", "conflict", "repeated"]


def commit_outcome(mode: Mode, stored: tuple[int, str] | None, start: int, end: int,
                   run_id: str | None = None) -> Outcome:
    """What committing the partition range [start, end) does to ``stored`` (next offset, the run that
    wrote it; None when the partition has none yet). With ``run_id``, a stored offset that this run
    already moved to ``end`` is a ``repeated`` commit rather than a conflict; a store that recognises
    a repeated run by other means (the MySQL sink's commit records) leaves it None."""
    if mode == "keep":
        return "keep"
    if mode == "advance" and stored is not None and stored[0] != start:
        if run_id is not None and stored == (end, run_id):
            return "repeated"
        return "conflict"
    return "move"
