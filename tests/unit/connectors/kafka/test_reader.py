"""The reader's column-wise take of a consume() batch (connectors/kafka/reader.py::_Range.take_all)
keeps what the per-message loop keeps: the budget, ``stop``, the outcome; and leaves a batch with an
error or an EOF to the loop."""

from __future__ import annotations

from typing import Any

from connectors.kafka.reader import ReadOutcome, ReadRange, _Range


class Msg:
    def __init__(self, offset: int, err: Any = None, headers: Any = None) -> None:
        self._offset, self._err, self._headers = offset, err, headers

    def error(self) -> Any:
        return self._err

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self._offset) if self._offset % 2 else (0, -1)

    def key(self) -> bytes:
        return b"k%d" % self._offset

    def value(self) -> bytes:
        return b"v%d" % self._offset

    def headers(self) -> Any:
        return self._headers


def _range(max_records: int = 100, stop: int | None = None) -> _Range:
    return _Range(ReadRange("t", 2, 10, max_records, stop, 0.0, True), ReadOutcome(0, 0, ""))


def test_a_batch_is_taken_whole_with_every_field() -> None:
    st = _range()
    assert st.take_all([Msg(10), Msg(11, headers=[("h", b"x")]), Msg(12)])
    batch = st.batch().to_pydict()
    assert batch == {"topic": ["t"] * 3, "partition": [2] * 3, "offset": [10, 11, 12],
                     "timestamp": [None, 1011, None], "key": [b"k10", b"k11", b"k12"],
                     "value": [b"v10", b"v11", b"v12"], "headers": [[], [{"key": "h", "value": b"x"}], []]}
    assert (st.outcome.end, st.outcome.records, st.done) == (13, 3, False)


def test_the_budget_ends_inside_a_batch() -> None:
    st = _range(max_records=2)
    assert st.take_all([Msg(10), Msg(11), Msg(12)])
    assert st.batch().column("offset").to_pylist() == [10, 11]
    assert (st.outcome.end, st.outcome.records, st.outcome.reason, st.done) == (12, 2, "limit", True)


def test_reaching_stop_ends_the_range_and_crossing_it_is_left_to_the_loop() -> None:
    st = _range(stop=13)
    assert st.take_all([Msg(10), Msg(11), Msg(12)])
    assert (st.outcome.end, st.outcome.reason, st.done) == (13, "stop", True)
    crossing = _range(stop=12)
    assert not crossing.take_all([Msg(10), Msg(11), Msg(12)])
    assert crossing.outcome.records == 0 and not crossing.cols["offset"]


def test_an_error_or_eof_in_the_batch_is_left_to_the_loop() -> None:
    st = _range()
    assert not st.take_all([Msg(10), Msg(11, err=object())])
    assert st.outcome.records == 0 and not st.cols["offset"]
