"""The benchmark workload is reproducible, has the promised shape, and its checksum is order-free."""

from __future__ import annotations

import json
from collections import Counter

from bench.workload import Workload, checksum


def test_workload_shape_and_reproducibility() -> None:
    w = Workload(events=20_000, keys=1_000, seed=3)
    events = list(w.stream())
    ops = Counter(op for _k, _v, op, _i, _r in events)
    assert abs(ops["c"] / 20_000 - 0.70) < 0.02 and abs(ops["u"] / 20_000 - 0.25) < 0.02
    assert abs(ops["d"] / 20_000 - 0.05) < 0.01
    assert len({i for *_x, i, _r in events}) <= 1_000
    sizes = [len(v) for _k, v, op, _i, _r in events if op != "d"]
    assert 350 <= sum(sizes) / len(sizes) <= 450  # ~400-byte JSON without schema
    assert json.loads(events[0][1])["after"]["id"] == json.loads(events[0][0])["id"]
    assert list(Workload(events=500, keys=50, seed=3).stream()) == list(Workload(events=500, keys=50, seed=3).stream())


def test_final_state_applies_deletes_and_checksum_ignores_order() -> None:
    w = Workload(events=5_000, keys=200, seed=9)
    state = w.final_state()
    last = {}
    for _k, _v, op, i, row in w.stream():
        last[i] = row if op != "d" else None
    assert state == {i: r for i, r in last.items() if r is not None}
    rows = list(state.values())
    assert checksum(rows) == checksum(list(reversed(rows))) == checksum(state)
    assert checksum(rows[:-1]) != checksum(rows)
