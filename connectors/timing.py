"""The one stage timer: wall seconds added up per named stage, in a plain dict.

A window's stages (``WindowResult.stages``: read+decode, dlq, sinks, sink:<name>) and a sink's own
(``SinkStats.extra``: load_s, upsert_s, delete_s, commit_s) are measured the same way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


def add(into: dict[str, float], stage: str, seconds: float, digits: int | None = None) -> None:
    """``seconds`` more for ``stage``; with ``digits``, the sum rounded (what a sink reports)."""
    total = into.get(stage, 0.0) + seconds
    into[stage] = total if digits is None else round(total, digits)


@contextmanager
def timed(into: dict[str, float], stage: str, digits: int | None = None) -> Iterator[None]:
    """The wall time of the block, added to ``into[stage]`` (also when the block raises)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        add(into, stage, time.perf_counter() - started, digits)


def lap(into: dict[str, float], stage: str, since: float, digits: int | None = None) -> float:
    """The time since ``since`` added to ``stage``; returns now, the start of the next lap (for
    stages that follow each other inside one block, where a ``with`` per stage reads worse)."""
    now = time.perf_counter()
    add(into, stage, now - since, digits)
    return now
