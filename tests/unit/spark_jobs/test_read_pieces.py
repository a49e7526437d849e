"""spark_jobs/job.py::read_pieces: which ranges, or pieces of ranges, each read task reads."""

from __future__ import annotations

import math

import pytest

from connectors.kafka.reader import ReadRange
from spark_jobs.job import MIN_PIECE, read_pieces

DEADLINE = 1e12


def ranges(*sizes: int, waits: bool = False) -> tuple[ReadRange, ...]:
    return tuple(ReadRange("t", p, 1_000 * p, size, None, DEADLINE, not waits) for p, size in enumerate(sizes))


def covered(pieces: tuple[tuple[ReadRange, ...], ...]) -> dict[int, list[tuple[int, int]]]:
    """Per partition, the offsets its pieces cover, in order: [(start, end)]."""
    out: dict[int, list[tuple[int, int]]] = {}
    for task in pieces:
        for r in task:
            out.setdefault(r.partition, []).append((r.start, r.start + r.max_records))
    return {p: sorted(spans) for p, spans in out.items()}


@pytest.mark.parametrize("sizes", [(16_667,) * 3, (50_000,), (40_000, 5_000, 30_000), (9_000, 9_000, 9_000, 9_000, 9_000)])
def test_uneven_waves_are_cut_into_even_shares_that_cover_every_offset_once(sizes: tuple[int, ...]) -> None:
    planned = ranges(*sizes)
    pieces = read_pieces(planned, slots=2)
    tasks = 2 * max(1, len(sizes) // 2)
    assert len(pieces) == tasks
    share = -(-sum(sizes) // tasks)
    assert all(sum(r.max_records for r in task) <= share + MIN_PIECE for task in pieces)
    # every partition's offsets, once, in consecutive pieces
    assert covered(pieces) == {p: _contiguous(r.start, r.max_records, covered(pieces)[p]) for p, r in enumerate(planned)}
    for task in pieces:
        assert len({r.partition for r in task}) == len(task)  # never two pieces of one partition in a task
        for r in task:
            last = r.start + r.max_records == planned[r.partition].start + planned[r.partition].max_records
            if last:  # a range's last piece: as planned, its deadline and stop kept
                assert not r.piece and r.deadline == DEADLINE and r.stop is None
            else:  # the others end at their stop (or EOF), never at the deadline
                assert r.piece and r.deadline == math.inf and r.stop == r.start + r.max_records


def _contiguous(start: int, size: int, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    assert spans[0][0] == start and spans[-1][1] == start + size
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    return spans


def test_windows_that_need_no_cut_keep_a_task_per_range() -> None:
    even = ranges(20_000, 20_000)
    assert read_pieces(even, slots=2) == ((even[0],), (even[1],))  # two ranges, two cores
    three = ranges(16_667, 16_667, 16_667)
    assert read_pieces(three, slots=0) == tuple((r,) for r in three)  # slots unknown
    assert read_pieces(three, slots=1) == tuple((r,) for r in three)
    waiting = ranges(16_667, 16_667, 16_667, waits=True)  # ranges that wait for records until the deadline
    assert read_pieces(waiting, slots=2) == tuple((r,) for r in waiting)
    many = ranges(*[5_000] * 9)  # many ranges: their waves even out
    assert read_pieces(many, slots=2) == tuple((r,) for r in many)
    small = ranges(1_000, 1_000, 1_000)  # a small window: one task reads them one after another
    assert read_pieces(small, slots=2) == (small,)


def test_a_replay_range_with_a_known_stop_is_cut_inside_it() -> None:
    replay = (ReadRange("t", 0, 500, 30_000, 30_500, DEADLINE, False),)
    first, second = read_pieces(replay, slots=2)
    assert [(r.start, r.max_records, r.stop, r.piece) for r in first + second] == [
        (500, 15_000, 15_500, True), (15_500, 15_000, 30_500, False)]
