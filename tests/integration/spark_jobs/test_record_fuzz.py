"""Record fuzz through a real window (issue 13): random bytes, truncated JSON, huge values, deep
nesting, wrong types, unknown ops and keys that disagree with the value, mixed into a stream of valid
changes. With tolerance `all` the window never fails; every bad record is in the DLQ (once, with its
stage and reason), no valid one is, and the table equals the state of the valid changes alone."""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.state import StateStore
from tests.helpers import bootstrap, expected, make_pipeline, read_topic, table_rows

pytestmark = [pytest.mark.integration, pytest.mark.services]


def _envelope(op: str, row: dict[str, Any] | None, ts: int, before: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"before": before, "after": row if op != "d" else None, "op": op, "ts_ms": ts,
            "source": {"connector": "mysql", "db": "inventory", "table": "orders", "ts_ms": ts}}


def _row(i: int, ts: int, **over: Any) -> dict[str, Any]:
    return {"id": i, "customer": f"c-{i}", "status": "new", "amount": "1.00", "updated_ms": ts, **over}


def fuzz(rng: random.Random, n: int, ts: int) -> tuple[list[cdcgen.Event], dict[int, dict[str, Any]]]:
    """``n`` records on fresh keys (>= 5000): the bad ones, and the valid ones that look odd (a key
    that disagrees with the value: the value's id wins, pk_mode record_value). Returns the events and
    the rows the valid odd ones leave."""
    events: list[cdcgen.Event] = []
    lands: dict[int, dict[str, Any]] = {}
    for j in range(n):
        i, ts = 5000 + j, ts + 1
        key = json.dumps({"id": i}).encode()
        good = json.dumps(_envelope("c", _row(i, ts), ts)).encode()
        kind = rng.choice(["bytes", "truncated", "huge", "deep", "wrong_id", "wrong_amount", "wrong_ts",
                           "unknown_op", "disagree", "not_object", "no_op"])
        if kind == "bytes":
            value = b"\xff" + rng.randbytes(rng.randint(0, 200))
        elif kind == "truncated":
            value = good[:rng.randint(1, len(good) - 2)]
        elif kind == "huge":  # 200 kB for a VARCHAR(32): MySQL rejects the row
            value = json.dumps(_envelope("c", _row(i, ts, customer="x" * 200_000), ts)).encode()
        elif kind == "deep":  # nested objects where a number belongs, up to beyond the JSON parser's limit
            depth = rng.choice([50, 1500])
            value = json.dumps(_envelope("c", _row(i, ts, amount="DEEP"), ts)).replace(
                '"DEEP"', '{"a":' * depth + "1" + "}" * depth).encode()
        elif kind == "wrong_id":
            value = json.dumps(_envelope("c", _row(i, ts, id=f"id-{i}"), ts)).encode()
        elif kind == "wrong_amount":
            value = json.dumps(_envelope("c", _row(i, ts, amount=rng.choice([[1, 2], {"v": 1}, "12,5 EUR", "1e999"])),
                                         ts)).encode()
        elif kind == "wrong_ts":
            value = json.dumps(_envelope("c", _row(i, ts, updated_ms="yesterday"), ts)).encode()
        elif kind == "unknown_op":
            value = json.dumps(_envelope(rng.choice(["x", "", "C", "upsert"]), _row(i, ts), ts)).encode()
        elif kind == "not_object":
            value = json.dumps(rng.choice([[1, 2, 3], "text", 42, None, True])).encode()
        elif kind == "no_op":
            value = json.dumps(_row(i, ts)).encode()
        else:  # disagree: the key says one id, the value another; the value's row lands
            key = json.dumps({"id": i + 100_000}).encode()
            value = good
            lands[i] = _row(i, ts)
        events.append(cdcgen.Event(key, value, kind="change" if kind == "disagree" else f"broken:{kind}"))
    return events, lands


@pytest.mark.parametrize("seed", [1, 2])
def test_fuzzed_records_land_or_reach_the_dlq_and_the_window_never_fails(config_dir: Path, store: StateStore,
                                                                          spark: Any, seed: int) -> None:
    rng = random.Random(seed)
    cfg = make_pipeline(config_dir)
    valid = cdcgen.orders_stream(300, 40, seed=seed, broken=False)
    bad, lands = fuzz(rng, 150, ts=1_767_230_000_000)
    events = list(valid.events)
    for e in bad:  # spread the fuzz through the valid stream
        events.insert(rng.randint(0, len(events)), e)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], events)

    stats = runner.run_window(cfg, f"fuzz-{seed}", store=store, spark=spark)

    broken = [e for e in events if e.kind.startswith("broken")]
    assert stats["records"] == len(events)
    assert sum(store.offsets.load(cfg.name).values()) == len(events)  # committed: the window did not fail
    dead = read_topic(cfg.errors.dlq_topic)
    got = collections.Counter(m.value() for m in dead)
    want = collections.Counter(e.value for e in broken)
    missing = [(e.kind, (e.value or b"")[:60]) for e in broken if got[e.value] < want[e.value]]
    extra = [v[:60] for v in got if got[v] > want.get(v, 0)]
    assert not missing, f"bad records not in the DLQ: {missing[:5]}"
    assert not extra, f"records in the DLQ that are valid or there twice: {extra[:5]}"
    assert stats["dead_lettered"] == len(broken)
    for m in dead:  # each with its stage and reason
        headers = dict(m.headers())
        assert headers["__connect.errors.stage"] in (b"converter", b"transform", b"sink"), headers
        assert headers["__connect.errors.exception.message"], headers
    assert table_rows(cfg.sinks[0].table) == expected({**valid.state, **lands})
