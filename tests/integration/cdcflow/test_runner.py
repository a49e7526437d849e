"""Consume windows end to end against the real broker, MariaDB and Spark (local)."""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.errors import BrokerUnavailable, DeadLettersExceeded, PipelineStopped, SinkUnavailable, ToleranceExceeded
from cdcflow.state import StateStore
from cdcflow.window import clients
from connectors.kafka.groups import group_offsets
from connectors.kafka.reader import KafkaRangeReader, ReadOutcome, ReadRange
from tests.helpers import (
    bootstrap,
    expected,
    make_pipeline,
    mysql_engine,
    read_topic,
    run_cli_window,
    table_rows,
    unique,
    write_pipeline,
)

pytestmark = [pytest.mark.integration, pytest.mark.services]


def _produce(cfg: Any, stream: cdcgen.Stream, partitions: int = 3) -> None:
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events, partitions=partitions)


def _table(cfg: Any) -> str:
    return cfg.sinks[0].table


def test_window_applies_changes_sends_poison_to_dlq_and_commits(config_dir: Path, store: StateStore, spark: Any) -> None:
    cfg = make_pipeline(config_dir)
    stream = cdcgen.orders_stream(300, 50, seed=1)
    _produce(cfg, stream)

    stats = runner.run_window(cfg, "run-1", store=store, spark=spark)

    assert table_rows(_table(cfg)) == expected(stream.state)
    assert stats["records"] == len(stream.events)
    assert stats["dead_lettered"] == len(stream.broken) == 6
    committed = store.offsets.load(cfg.name)
    assert sum(committed.values()) == len(stream.events)
    # the Kafka consumer group mirrors the stored offsets, for lag tools
    conf = {"bootstrap.servers": bootstrap(), "group.id": cfg.group_id}
    assert group_offsets(conf, list(committed)) == committed
    # the next window finds nothing new and moves nothing
    again = runner.run_window(cfg, "run-2", store=store, spark=spark)
    assert again["records"] == 0 and store.offsets.load(cfg.name) == committed


def test_a_poison_burst_trips_the_breaker_and_stops_the_pipeline(config_dir: Path, store: StateStore, spark: Any) -> None:
    """errors.max_dead_letters (issue 26): half of a window is poison, past the pipeline's 20%. The
    window fails before any sink is written, no offset moves, and the pipeline is STOPPED; once an
    operator has fixed the cause (here: a limit that allows it) and resumed, the window applies the good
    records, and each dead letter is in the DLQ once."""
    tag = unique("burst")
    topic = f"t.{tag}"

    def pipeline(limit: str) -> Any:
        return load_pipeline(write_pipeline(config_dir, tag, topic, tag, errors={"max_dead_letters": limit}))

    cfg = pipeline("20%")
    good = cdcgen.orders_stream(40, 10, seed=31, broken=False)
    poison = [cdcgen.Event(f'{{"id": {i}}}'.encode(), b'{"op": "c", "after": {"id": ' + str(i).encode())
              for i in range(40)]  # cut off mid-value: not JSON
    events = [e for pair in zip(good.events, poison, strict=True) for e in pair]
    cdcgen.produce(bootstrap(), topic, events)

    with pytest.raises(DeadLettersExceeded) as tripped:
        runner.run_window(cfg, "burst-1", store=store, spark=spark)
    message = str(tripped.value)
    assert "40 of the 80 records of window burst-1 went to the dead-letter topic" in message
    assert "(50%), past errors.max_dead_letters (20% of a window)" in message
    assert f"pipeline {cfg.name!r} is STOPPED and no offset moved" in message
    assert store.offsets.load(cfg.name) == {} and store.operator.get_state(cfg.name) == "stopped"
    # tripped before the sinks: nothing of the burst was applied (the table was not even created)
    assert not sa.inspect(mysql_engine()).has_table(tag)
    assert len(read_topic(cfg.errors.dlq_topic)) == 40
    with pytest.raises(PipelineStopped):  # no window runs until an operator resumes
        runner.run_window(cfg, "burst-2", store=store, spark=spark)

    cfg = pipeline("60%")  # the fix, then the resume
    store.operator.set_state(cfg.name, "running", "operator")
    stats = runner.run_window(cfg, "burst-3", store=store, spark=spark)
    assert stats["records"] == 80 and table_rows(tag) == expected(good.state)
    assert sum(store.offsets.load(cfg.name).values()) == 80
    assert len(read_topic(cfg.errors.dlq_topic)) == 40  # each dead letter once


def test_poison_records_reach_the_dlq_with_original_bytes_and_context(config_dir: Path, store: StateStore, spark: Any) -> None:
    cfg = make_pipeline(config_dir)
    stream = cdcgen.orders_stream(40, 10, seed=2)
    _produce(cfg, stream)
    runner.run_window(cfg, "run-dlq", store=store, spark=spark)

    dead = read_topic(cfg.errors.dlq_topic)
    assert len(dead) == len(stream.broken)
    by_value = {m.value(): m for m in dead}
    for event in stream.broken:
        msg = by_value[event.value]
        headers = dict(msg.headers())
        assert msg.key() == event.key
        assert headers["trace-id"] == b"poison"  # the original headers are kept
        assert headers["__connect.errors.topic"] == cfg.source.topics[0].encode()
        assert headers["__connect.errors.stage"] == event.expected_stage.encode(), event.kind
        assert int(headers["__connect.errors.offset"]) >= 0
        assert int(headers["__connect.errors.partition"]) in (0, 1, 2)
        assert headers["__connect.errors.connector.name"] == cfg.name.encode()
        assert headers["__connect.errors.task.id"] == b"run-dlq"
        assert headers["__connect.errors.exception.message"]
        assert headers["__connect.errors.exception.class.name"]
        assert headers["__connect.errors.exception.stacktrace"]
    too_long = dict(by_value[next(e.value for e in stream.broken if e.kind == "broken:too-long")].headers())
    assert b"Data too long for column 'customer'" in too_long["__connect.errors.exception.message"]
    bad_decimal = dict(by_value[next(e.value for e in stream.broken if e.kind == "broken:bad-decimal")].headers())
    assert bad_decimal["__connect.errors.exception.message"] == b"field 'amount' = '12,5 EUR' is not a valid DECIMAL(10,2)"


def test_tolerance_none_fails_the_window_and_commits_nothing(config_dir: Path, store: StateStore, spark: Any) -> None:
    cfg = make_pipeline(config_dir, errors={"tolerance": "none"})
    _produce(cfg, cdcgen.orders_stream(40, 10, seed=3))
    with pytest.raises(ToleranceExceeded, match=r"errors.tolerance is 'none' and 5 record\(s\) cannot be processed"):
        runner.run_window(cfg, "run-none", store=store, spark=spark)
    assert store.offsets.load(cfg.name) == {}
    window = store.ledger.get_window(cfg.name, "run-none")
    assert window is not None and window.status == "failed" and "ToleranceExceeded" in (window.message or "")
    assert read_topic(cfg.errors.dlq_topic) == []


def test_tolerance_none_fails_on_a_row_mysql_rejects(config_dir: Path, store: StateStore, spark: Any) -> None:
    cfg = make_pipeline(config_dir, errors={"tolerance": "none"})
    stream = cdcgen.orders_stream(20, 5, seed=4, broken=False)
    too_long = next(e for e in cdcgen.poison_records(__import__("random").Random(0), 5, 1, "orders")
                    if e.kind == "broken:too-long")
    stream.events.append(too_long)
    _produce(cfg, stream)
    with pytest.raises(ToleranceExceeded, match="Data too long for column 'customer'"):
        runner.run_window(cfg, "run-none-sink", store=store, spark=spark)
    assert store.offsets.load(cfg.name) == {}


def test_sink_down_fails_the_window_without_moving_offsets_then_recovers(
        config_dir: Path, store: StateStore, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_pipeline(config_dir)
    stream = cdcgen.orders_stream(60, 15, seed=5, broken=False)
    _produce(cfg, stream)
    good = __import__("os").environ["AIRFLOW_CONN_CDCFLOW_MYSQL"]
    monkeypatch.setenv("AIRFLOW_CONN_CDCFLOW_MYSQL", good.replace(f'"port": {__import__("os").environ["CDCFLOW_MYSQL_PORT"]}', '"port": 1'))
    with pytest.raises(SinkUnavailable, match=r"sink 'orders_mysql': MySQL at .*:1/.* failed while opening"):
        runner.run_window(cfg, "run-down", store=store, spark=spark)
    assert store.offsets.load(cfg.name) == {}
    assert read_topic(cfg.errors.dlq_topic) == []  # infrastructure errors never go to the DLQ
    monkeypatch.setenv("AIRFLOW_CONN_CDCFLOW_MYSQL", good)
    runner.run_window(cfg, "run-down", store=store, spark=spark)  # the Airflow retry: same run id
    assert table_rows(_table(cfg)) == expected(stream.state)
    assert sum(store.offsets.load(cfg.name).values()) == len(stream.events)


def test_broker_unreachable_is_a_clear_infrastructure_error(config_dir: Path, store: StateStore,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_pipeline(config_dir)
    monkeypatch.setenv("AIRFLOW_CONN_CDCFLOW_KAFKA", '{"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:1"}}')
    with pytest.raises(BrokerUnavailable, match="Kafka at 127.0.0.1:1"):
        runner.plan(cfg, "run-x", store=store)
    assert store.ledger.get_window(cfg.name, "run-x") is None


def test_replay_from_start_offsets_does_not_move_the_table_back(config_dir: Path, store: StateStore, spark: Any) -> None:
    cfg = make_pipeline(config_dir)
    stream = cdcgen.orders_stream(200, 30, seed=6, broken=False)
    _produce(cfg, stream)
    runner.run_window(cfg, "run-all", store=store, spark=spark)
    final = table_rows(_table(cfg))
    assert final == expected(stream.state)
    end = store.offsets.load(cfg.name)

    topic = cfg.source.topics[0]
    replay = {"start_offsets": {topic: {"0": 0, "1": 0, "2": 0}}, "max_records": 60}
    stats = runner.run_window(cfg, "replay-old", replay, store=store, spark=spark)
    assert stats["records"] == 60
    assert table_rows(_table(cfg)) == final  # older versions never overwrite newer ones
    # the first 60 records' changes: each key's last of them, older than the row the table holds
    # (stale) or the same change (unchanged); the table did not change
    replayed = stats["sinks"]["orders_mysql"]
    assert (replayed["upserted"], replayed["deleted"], replayed["failed"]) == (0, 0, 0)
    assert replayed["stale"] > 0
    rewound = store.offsets.load(cfg.name)
    assert sum(rewound.values()) == 60  # a replay rewinds: the next run continues from its end
    runner.run_window(cfg, "after-replay", store=store, spark=spark)
    assert store.offsets.load(cfg.name) == end
    assert table_rows(_table(cfg)) == final


def test_record_limit_mid_partition_resumes_with_no_gap_and_no_overlap(config_dir: Path, store: StateStore, spark: Any) -> None:
    cfg = make_pipeline(config_dir, window={"max_records": 70})
    stream = cdcgen.orders_stream(300, 40, seed=8, broken=False)
    _produce(cfg, stream)
    runs = 0
    while True:
        runs += 1
        stats = runner.run_window(cfg, f"limit-{runs}", store=store, spark=spark)
        if stats["records"] == 0:
            break
        assert stats["records"] <= 70
    assert runs - 1 == -(-len(stream.events) // 70)
    covered: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for w in reversed(store.ledger.history(cfg.name, 100)):
        for p in w.partitions:
            covered.setdefault(p.tp, []).append((p.start, p.end))
    for ranges in covered.values():
        for (_s1, e1), (s2, _e2) in zip(ranges, ranges[1:], strict=False):
            assert e1 == s2, f"gap or overlap between windows: {ranges}"
    assert sum(r[-1][1] for r in covered.values()) == len(stream.events)
    assert table_rows(_table(cfg)) == expected(stream.state)


def test_timeout_mid_partition_resumes_with_no_gap_and_no_overlap(config_dir: Path) -> None:
    cfg = make_pipeline(config_dir)
    topic = cfg.source.topics[0]
    events = [cdcgen.Event(str(i).encode(), b"x" * 100) for i in range(20_000)]
    cdcgen.produce(bootstrap(), topic, events, partitions=1)
    conf = clients.consumer_conf(cfg)
    reader = KafkaRangeReader(conf)

    first = ReadOutcome(0, 0, "")
    seen: list[int] = []
    for batch in reader.read_batches(ReadRange(topic, 0, 0, 1_000_000, None, time.time() + 0.3, True), first):
        seen += batch.column("offset").to_pylist()
        time.sleep(0.4)  # slow processing: the deadline passes mid-partition
    assert first.reason == "deadline" and 0 < first.records < 20_000 and first.end == seen[-1] + 1

    second = ReadOutcome(0, 0, "")
    for batch in reader.read_batches(ReadRange(topic, 0, first.end, 1_000_000, None, time.time() + 30, True), second):
        seen += batch.column("offset").to_pylist()
    assert second.reason == "eof"
    assert seen == list(range(20_000))  # no gap, no overlap


def test_a_piece_of_a_range_reads_to_its_stop_or_eof_whatever_the_deadline(config_dir: Path) -> None:
    """A piece of a partition's range that another read task goes on from (job.read_pieces) is read
    to its stop, or to EOF though it has a stop, never cut at a deadline: read beside a range whose
    deadline passes at once, and beside one that waits for records until its deadline."""
    cfg = make_pipeline(config_dir)
    topic = cfg.source.topics[0]
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(str(i).encode(), b"x" * 100) for i in range(3_000)],
                   partitions=2)
    reader = KafkaRangeReader(clients.consumer_conf(cfg))

    def read(*ranges: ReadRange) -> tuple[list[ReadOutcome], dict[int, list[int]]]:
        outcomes = [ReadOutcome(0, 0, "") for _ in ranges]
        seen: dict[int, list[int]] = {0: [], 1: []}
        for batch in reader.read_ranges(list(ranges), outcomes):
            for p, o in zip(batch.column("partition").to_pylist(), batch.column("offset").to_pylist(), strict=True):
                seen[p].append(o)
        return outcomes, seen

    piece = ReadRange(topic, 0, 0, 1_000, 1_000, math.inf, True, piece=True)
    expired = ReadRange(topic, 1, 0, 1_000_000, None, time.time() - 1, True)
    (mine, other), seen = read(piece, expired)
    assert (mine.reason, mine.end, other.reason, other.records) == ("limit", 1_000, "deadline", 0)
    assert seen[0] == list(range(1_000)) and seen[1] == []

    past_the_end = ReadRange(topic, 0, 0, 10_000, 10_000, math.inf, True, piece=True)  # EOF before its stop
    waiting = ReadRange(topic, 1, 0, 1_000_000, None, time.time() + 1.5, False)  # waits for new records
    started = time.monotonic()
    (mine, other), seen = read(past_the_end, waiting)
    assert (mine.reason, other.reason, mine.records + other.records) == ("eof", "deadline", 3_000)
    assert seen[0] == list(range(mine.records)) and seen[1] == list(range(other.records))
    assert time.monotonic() - started < 10  # the waiting range ended at its deadline, the piece at EOF


def _killed_after_sinks(config_dir: Path, run_id: str, stream: cdcgen.Stream) -> tuple[Any, cdcgen.Stream]:
    """A fresh pipeline with ``stream`` produced, and its window ``run_id`` SIGKILLed after the
    sinks and the DLQ flush, before the commit."""
    tag = unique("killed")
    cfg = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag))
    _produce(cfg, stream)
    died = run_cli_window(config_dir, cfg.name, run_id, "after_sinks")
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    return cfg, stream


def test_killed_after_the_sink_write_and_before_the_commit(config_dir: Path, tmp_path: Path) -> None:
    """SIGKILL between the MySQL write and the offset commit, then rerun: nothing lost, nothing doubled."""
    cfg, stream = _killed_after_sinks(config_dir, "run-killed", cdcgen.orders_stream(250, 40, seed=9))

    store = clients.offset_store(cfg)
    assert store.offsets.load(cfg.name) == {}  # killed before the commit: no offset moved
    window = store.ledger.get_window(cfg.name, "run-killed")
    assert window is not None and window.status == "applied"
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)  # the sink write had happened

    # the retry (same run id) replays exactly the recorded range and commits it
    retry = run_cli_window(config_dir, cfg.name, "run-killed")
    assert retry.returncode == 0, retry.stderr[-2000:]
    # the killed attempt still held the writer lease: its retry takes it at once, not in 60 s
    retried = store.ledger.get_window(cfg.name, "run-killed")
    assert retried is not None and retried.stats["writer"]["waited_s"] < 5, retried.stats.get("writer")
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)
    assert sum(store.offsets.load(cfg.name).values()) == len(stream.events)
    dead = read_topic(cfg.errors.dlq_topic)
    # the killed attempt had already written its DLQ records; the retry reads them back and does not
    # send them again: every poison record is there exactly once
    assert sorted(m.value() for m in dead) == sorted(e.value for e in stream.broken)


def test_a_window_left_after_its_dlq_flush_does_not_make_the_next_one_send_twice(config_dir: Path) -> None:
    """Killed after its sinks and DLQ flush, and never retried (Airflow's retries ran out): the next
    run reads the same records and finds their dead letters in the DLQ already."""
    cfg, stream = _killed_after_sinks(config_dir, "run-left", cdcgen.orders_stream(120, 30, seed=10))
    clients.offset_store(cfg).ledger.mark(cfg.name, "run-left", "failed", "retries ran out")
    assert len(read_topic(cfg.errors.dlq_topic)) == len(stream.broken)

    nxt = run_cli_window(config_dir, cfg.name, "run-next")
    assert nxt.returncode == 0, nxt.stderr[-2000:]
    assert "were sent by run-left" in nxt.stderr
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)
    assert sorted(m.value() for m in read_topic(cfg.errors.dlq_topic)) == sorted(e.value for e in stream.broken)
