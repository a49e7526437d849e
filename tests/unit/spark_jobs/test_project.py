"""The per-partition window path (spark_jobs/window.py: read tasks in spark_jobs/project/targets.py) without Spark: what one read task
leaves for the driver and the write tasks, from decoded Debezium envelopes."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pyarrow as pa
import pytest
from pydantic import TypeAdapter

from cdcflow.config import ElasticsearchSinkConfig, MySqlSinkConfig
from connectors.errors import ConfigError
from connectors.debezium.envelope import Decoder
from spark_jobs import blobs, sink_targets
from spark_jobs.project import targets as project
from spark_jobs.write import early, prepare
from spark_jobs.job import WindowJob
from spark_jobs.sink_targets import SinkTarget
from spark_jobs.project.documents import project_documents
from spark_jobs.project.tables import latest_rows
from spark_jobs.transform.transform_config import TransformConfig
from tests.unit.connectors.debezium.test_envelope import raw_batch

MYSQL = MySqlSinkConfig(type="mysql", name="rows", table="orders", primary_key=["id"],
                        columns=[{"name": "id", "type": "BIGINT"}, {"name": "amount", "type": "DECIMAL(6,2)"}])
ES = ElasticsearchSinkConfig(type="elasticsearch", name="docs", index="idx-{topic}", id_fields=["id"])
ROUTED = MySqlSinkConfig(type="mysql", name="routed", table="{source.table}", primary_key=["id"],
                         columns=[{"name": "id", "type": "BIGINT"}])


def job(*sinks: Any, **extra: Any) -> WindowJob:
    return WindowJob(**{"pipeline": "p", "run_id": "r", "consumer_conf": {}, "producer_conf": {}, "ranges": (),
                        "sinks": tuple(SinkTarget(s, "url") for s in sinks), "versioning": "source_ts_ms",
                        "tolerance": "all", "dlq_topic": "dlq", "context_headers": True, **extra})


def split(j: WindowJob, records: list[tuple[bytes | None, bytes | None]]) -> dict[str, Any]:
    decoded = pa.Table.from_batches([Decoder("source_ts_ms").decode_batch(raw_batch(records))])
    out: dict[str, Any] = {"rows": {}, "changes": {}, "bad": [], "tally": None}
    for batch in project.split(j, 0, project.truncate_policy(j, decoded)):
        kind, target, blob, info = (batch.column(c)[0].as_py() for c in ("kind", "target", "blob", "info"))
        if kind == blobs.TALLY:
            out["tally"] = json.loads(info)
        elif kind == blobs.BAD:
            out["bad"] += blobs.unpack([blob]).to_pylist()
        else:
            out[kind].setdefault(target, []).extend(blobs.unpack([blob]).to_pylist())
    return out


K1, K2 = b'{"id": 1}', b'{"id": 2}'
SOURCE = {"ts_ms": 0, "db": "shop", "table": "orders"}


def envelope(op: str, before: Any, after: Any, ts: int) -> bytes:
    return json.dumps({"op": op, "before": before, "after": after, "source": {**SOURCE, "ts_ms": ts}}).encode()


def test_a_read_task_keeps_the_last_change_per_key_and_dead_letters_what_cannot_be_read() -> None:
    records = [
        (K1, envelope("c", None, {"id": 1, "amount": "1.50"}, 10)),
        (K2, envelope("c", None, {"id": 2, "amount": "2.00"}, 11)),
        (K1, envelope("u", {"id": 1}, {"id": 1, "amount": "1.75"}, 12)),
        (K1, b"not json"),
        (K2, envelope("u", {"id": 2}, {"id": 2, "amount": "12345.00"}, 13)),  # does not fit DECIMAL(6,2)
        (K2, envelope("d", {"id": 2, "amount": "2.00"}, None, 14)),
    ]
    out = split(job(MYSQL, ES), records)
    rows = out["rows"]["rows"]
    assert [(r["offset"], r["change_op"], r["c_0"], r["c_1"]) for r in rows] == [
        (2, "upsert", "1", "1.75"), (5, "delete", "2", "2.00")]
    docs = out["rows"]["docs"]
    assert [(r["offset"], r["c_0"], r["c_1"], r["change_op"]) for r in docs] == [
        (2, "idx-t", "1", "upsert"), (5, "idx-t", "2", "delete")]
    assert json.loads(docs[0]["c_2"]) == {"id": 1, "amount": "1.75"}
    bad = sorted((r["offset"], r["error_stage"], r["component"], r["error_message"][:40]) for r in out["bad"])
    assert [b[:3] for b in bad] == [(3, "converter", "converter:json"), (4, "transform", "mysql:rows")]
    assert bad[1][3] == "field 'amount' = '12345.00' is not a val"
    counted = {(c[0], c[1], c[2]): c[3:] for c in out["tally"]["counted"]}
    assert counted[(None, "t", 0)] == [6, 6, 1000, 1005, 0]  # end, records, first/last Kafka time, truncates
    assert counted[("converter", "t", 0)][:2] == [4, 1]
    assert counted[("transform", "t", 0)][:2] == [5, 1]
    assert len(out["tally"]["examples"]) == 2


def test_routed_changes_are_tagged_with_their_table_and_unroutable_ones_dead_lettered() -> None:
    no_table = json.dumps({"op": "c", "after": {"id": 3}, "source": {"ts_ms": 1}}).encode()
    reserved = json.dumps({"op": "c", "after": {"id": 4}, "source": {"ts_ms": 1, "table": "cdcflow_x"}}).encode()
    out = split(job(ROUTED), [(K1, envelope("c", None, {"id": 1}, 10)), (b'{"id": 3}', no_table),
                              (b'{"id": 4}', reserved)])
    assert [(r["offset"], r["_table"]) for r in out["changes"]["routed"]] == [(0, "orders")]
    messages = {r["offset"]: r["error_message"] for r in out["bad"]}
    assert messages[1] == "the change has no source field for table '{source.table}' (source.table / source.db)"
    assert messages[2].startswith("the routed topic 'cdcflow_x' is reserved")
    assert out["tally"]["schemas"]["routed"] == [["orders", None, 10 << 20]]


def test_truncate_dlq_names_the_table_and_ignore_counts_it() -> None:
    truncate = json.dumps({"op": "t", "source": {**SOURCE, "ts_ms": 5}}).encode()
    out = split(job(MYSQL, truncate="dlq"), [(None, truncate)])
    assert out["bad"][0]["error_message"].startswith("a TRUNCATE of the source table shop.orders (truncate: dlq)")
    out = split(job(MYSQL), [(None, truncate)])
    assert out["bad"] == [] and out["rows"] == {}
    assert out["tally"]["counted"][0][-1] == 1  # one TRUNCATE left unapplied


def test_documents_follow_behavior_on_null_values_and_name_a_missing_id() -> None:
    records = [(K1, envelope("c", None, {"name": "x"}, 10)), (K1, None)]
    decoded = pa.Table.from_batches([Decoder("source_ts_ms").decode_batch(raw_batch(records))])
    failing = ES.model_copy(update={"behavior_on_null_values": "fail"})
    docs = project_documents(decoded, failing).to_pylist()
    assert docs[0]["error_message"] == "document id field 'id' is missing or null"
    assert docs[1]["c_1"] == "1"  # a tombstone's id comes from its key
    assert docs[1]["error_message"] == "null value (tombstone) with behavior_on_null_values: fail"
    ignoring = ES.model_copy(update={"behavior_on_null_values": "ignore"})
    assert len(project_documents(decoded, ignoring)) == 1


@pytest.mark.parametrize("column_wise", [True, False])
def test_tables_whose_records_share_one_schema_each_get_its_description(column_wise: bool) -> None:
    """Issue 42, part 4: the decoder describes a schema on its first change in the task only; two
    tables whose records carry the very same schema (name included) each get the description, found
    by the changes' schema_id. Debezium's own events (tests/fixtures/debezium/mysql_all_types.py)."""
    from tests.fixtures.debezium import mysql_all_types as fx

    def of(table: str) -> list[tuple[bytes | None, bytes | None]]:
        return [(k, v if v is None else v.replace(b'"table":"all_types"', f'"table":"{table}"'.encode()))
                for k, v in fx.events()]

    derived = MySqlSinkConfig(type="mysql", name="derived", table="{source.table}_x", create_table=True)
    records = of("t1") + of("t2") + of("t3")
    decoder = Decoder("source_ts_ms")
    decoder.column_wise_min = 1 if column_wise else 10_000
    decoded = pa.Table.from_batches([decoder.decode_batch(raw_batch(records))])
    assert decoded.column("row_schema").null_count == len(records) - 1  # described once
    out = project.sort_out(job(derived), decoded)
    schemas = {g: s for g, s, _v in out.info["schemas"]["derived"]}
    assert sorted(schemas) == ["t1_x", "t2_x", "t3_x"]
    assert len(set(schemas.values())) == 1 and None not in schemas.values()
    assert {c["name"] for c in json.loads(schemas["t3_x"])["columns"]} >= {"id", "c_varchar", "c_point"}


def test_by_content_finds_a_description_by_its_schema_id() -> None:
    from spark_jobs.project.targets import by_content

    seen = [("a", "s1", "D1", 10), ("b", "s1", None, 5), ("b", None, None, 1), ("c", None, None, 2),
            ("a", "s2", None, 30)]
    assert by_content(seen, {"s2": "D2"}) == [("c", None, 2), ("b", "D1", 5), ("a", "D1", 10), ("a", "D2", 30)]


def test_the_driver_merges_the_tasks_row_schemas_first_by_version() -> None:
    tallies = [{"schemas": {"s": [["a", "v2", 20], ["a", None, 5]]}}, {"schemas": {"s": [["a", "v1", 10],
                                                                                       ["b", None, 1]]}}]
    assert prepare.schemas_seen(tallies, "s") == {"a": ["v1", "v2"], "b": []}


def test_a_chain_the_window_cannot_apply_fails_it_naming_why() -> None:
    from connectors.kafka.reader import ReadRange

    served, sparked = (TypeAdapter(list[TransformConfig]).validate_python(
        [{"type": "ExtractNewRecordState"}, *steps]) for steps in (
            [{"type": "Cast", "spec": {"id": "int64"}}],
            [{"type": "Filter", "predicate": {"type": "Sql", "condition": "true"}}]))
    for ok in (job(MYSQL, ES, ROUTED), job(MYSQL, transforms=tuple(served)), job(MYSQL, transforms=tuple(sparked)),
               job(MYSQL, ES, transforms=tuple(served)),
               # pk_mode kafka into a table from the record schema: keyed by the coordinates (row_schemas.py)
               job(MYSQL.model_copy(update={"pk_mode": "kafka", "columns": [], "primary_key": []}))):
        early.refuse_unserved(ok)
    # cdcflow/config.py refuses this when the config is loaded; a job built otherwise fails its window
    with pytest.raises(ConfigError, match=r"^transforms: source.format maxwell: the format's messages are already "
                                        "decoded into rows, and ExtractNewRecordState unwraps Debezium's envelopes"):
        early.refuse_unserved(job(MYSQL, transforms=tuple(served), source_format="maxwell"))
    # exactly-once into a table from the record schema: a dynamic sink, written last with the offsets
    made = MySqlSinkConfig(type="mysql", name="eo", table="orders", primary_key=["id"], create_table=True)
    peeked: list[str] = []
    assert early.schema_tables(job(made, offsets_sink="eo", ranges=(ReadRange("t", 0, 0, 9, None, 0.0, True),)),
                                 {}, peek=lambda j: peeked.append("peeked") or []) == []
    assert peeked == []  # not made before the read: its rows and the offsets are one transaction, after it


def test_the_decoder_reads_only_the_fields_that_declared_mysql_columns_use() -> None:
    from spark_jobs.read.decode import change_decoder

    record = (K1, envelope("c", None, {"id": 1, "amount": "1.50", "note": "x" * 100}, 10))
    only_mysql = change_decoder(job(MYSQL)).decode_batch(raw_batch([record])).to_pylist()[0]
    assert dict(only_mysql["image"]) == {"id": "1", "amount": "1.50"}
    with_documents = change_decoder(job(MYSQL, ES)).decode_batch(raw_batch([record])).to_pylist()[0]
    assert dict(with_documents["image"])["note"] == "x" * 100  # a document has every field
    assert json.loads(with_documents["image_json"])["note"] == "x" * 100


def test_the_rows_of_one_key_from_two_read_tasks_meet_in_one_write_task_in_log_order() -> None:
    """A key in two partitions (two read tasks): both tasks send its rows to the same write task, and
    a tombstone that had nothing before it in its own task deletes at the version before it there."""
    def task_rows(partition: int, records: list[tuple[bytes | None, bytes | None]]) -> pa.Table:
        decoded = pa.Table.from_batches([Decoder("source_ts_ms").decode_batch(raw_batch(records))])
        decoded = decoded.set_column(1, "partition", pa.array([partition] * decoded.num_rows, pa.int32()))
        out = list(project.split(job(MYSQL), partition, decoded, writers=4))
        return [(b.column("bucket")[0].as_py(), blobs.unpack([b.column("blob")[0].as_py()]))
                for b in out if b.column("kind")[0].as_py() == blobs.ROWS]

    first = task_rows(0, [(K1, envelope("c", None, {"id": 1, "amount": "1.00"}, 10)),
                          (K2, envelope("c", None, {"id": 2, "amount": "2.00"}, 11))])
    second = task_rows(1, [(K1, None)])  # the tombstone of key 1, alone in its task
    buckets_of = {row["c_0"]: b for b, table in first + second for row in table.to_pylist()}
    assert len({b for b, t in second}) == 1 and {b for b, t in second} == {buckets_of["1"]}
    kept = second[0][1].to_pylist()
    assert [(r["c_0"], r["change_op"], r["version"]) for r in kept] == [("1", "delete", None)]
    merged = latest_rows(pa.concat_tables([t for b, t in first + second if b == buckets_of["1"]]),
                            ["c_0"]).to_pylist()
    assert [(r["c_0"], r["change_op"], r["version"]) for r in merged if r["c_0"] == "1"] == [
        ("1", "delete", 10 << 20)]


@pytest.mark.parametrize("value", [
    envelope("c", None, {"id": 1, "amount": 19.90, "nested": {"a": 1.5}, "none": None}, 10),
    envelope("u", {"id": 1}, {"id": 1, "amount": "12345678901234567890.12"}, 11),
    envelope("d", {"id": 2, "amount": "2.00"}, None, 12),
    envelope("r", None, {"id": 3}, 13),
    json.dumps({"op": "c", "after": {"id": 4}, "ts_ms": 99}).encode(),  # no source block: the envelope's ts_ms
    json.dumps({"op": "c", "after": {"id": 5}, "source": None, "ts_ms": 7}).encode(),
    json.dumps({"op": "c", "after": {"id": 6}}).encode(),  # no time at all: a dead letter
    json.dumps({"op": "d", "before": None, "source": {"ts_ms": 1}}).encode(),  # by key
    json.dumps({"op": "c", "after": "not an object", "source": {"ts_ms": 1}}).encode(),
    json.dumps({"op": 7, "after": {"id": 1}, "source": {"ts_ms": 1}}).encode(),
    json.dumps({"schema": {}, "payload": {"op": "c", "after": {"id": 8}, "source": {"ts_ms": 1}}}).encode(),
    json.dumps({"op": "t", "source": {"ts_ms": 1, "db": "d", "table": "t"}}).encode(),
    b'{"op": "c", "after": {"id": 1}',  # broken JSON
])
@pytest.mark.parametrize("sinks", [(MYSQL,), (MYSQL, ES)])
def test_the_one_pass_envelope_decode_agrees_with_the_general_one(value: bytes, sinks: tuple[Any, ...]) -> None:
    """The common envelope is decoded in one msgspec pass (envelope._plain); every other shape takes
    the general path. Both must give the same change, or the same reason."""
    from spark_jobs.read.decode import change_decoder

    fast = change_decoder(job(*sinks))
    general = change_decoder(job(*sinks))
    general._plain = lambda *_a: None  # type: ignore[method-assign]
    batch = raw_batch([(K1, value)])
    assert fast.decode_batch(batch).to_pylist() == general.decode_batch(batch).to_pylist()


def test_which_targets_the_read_tasks_write_themselves(monkeypatch: pytest.MonkeyPatch) -> None:
    """early.early_targets: static targets that need nothing the read finds, in windows of one topic
    without the breaker or truncate: apply; each prepared before the read."""
    from connectors.kafka.reader import ReadRange
    from spark_jobs.write.sinks import SINK_TYPES

    prepared: list[str] = []
    monkeypatch.setitem(SINK_TYPES, "mysql", dataclasses.replace(
        SINK_TYPES["mysql"], prepare=lambda t: prepared.append(t.config.name)))
    one = tuple(ReadRange("t", p, 0, 10, None, 0.0, True) for p in range(3))
    two = (*one, ReadRange("u", 0, 0, 10, None, 0.0, True))
    mapped = ES.model_copy(update={"name": "mapped", "mapping": {"properties": {"id": {"type": "long"}}}})
    dynamic = MySqlSinkConfig(type="mysql", name="dyn", table="t", create_table=True)

    def served(*sinks: Any, **extra: Any) -> list[str]:
        return sorted(early.early_targets(job(*sinks, **{"ranges": one, **extra})))

    assert served(MYSQL, ES, mapped, ROUTED, dynamic) == ["docs", "mapped", "rows"]  # not routed, not from the records
    assert prepared == ["rows"]
    assert [sink_targets.mapped_by_records(SinkTarget(s, "url")) for s in (MYSQL, ES, mapped)] == [False, True, False]
    assert served(MYSQL, offsets_sink="rows") == []  # exactly-once: its transaction commits the offsets, last
    assert served(MYSQL, ranges=two) == []  # two topics: a key's changes may sit in two tasks
    assert served(MYSQL, truncate="apply") == []
    assert served(MYSQL, max_dead_letters=object()) == []  # the breaker decides for the window before any write
    assert served(MYSQL, source_format="maxwell") == []  # Maxwell may partition records at random
    monkeypatch.setenv("CDCFLOW_WINDOW_PATH", "staged")
    assert served(MYSQL) == []


def test_a_read_task_hands_a_tables_deletes_on_and_writes_its_upserts() -> None:
    """project.mysql_deletes: a key's changes may sit in two partitions after all (its bytes changed:
    the key converter's schemas turned on, partitions added), so a read task writes a table's upserts
    itself and hands its deletes on, to be written once every read task's upserts are in (a delete
    written beside another task's older upsert of the key would let that upsert bring the row back).
    An index needs none of this: Elasticsearch refuses an index older than the delete it keeps."""
    records = [(K1, envelope("c", None, {"id": 1, "amount": "1.00"}, 10)),
               (K2, envelope("c", None, {"id": 2, "amount": "2.00"}, 11)),
               (K2, envelope("d", {"id": 2, "amount": "2.00"}, None, 12)), (K2, None)]  # a delete, its tombstone
    j = job(MYSQL, ES)
    decoded = pa.Table.from_batches([Decoder("source_ts_ms").decode_batch(raw_batch(records))])
    rows = {name: table for name, _kind, table, _cols in project.sort_out(j, decoded).rows}
    table, index = (SinkTarget(c, "url") for c in (MYSQL, ES))
    deletes = project.mysql_deletes(table, rows["rows"])
    assert deletes is not None
    assert rows["rows"].filter(deletes).select(["change_op", "c_0"]).to_pylist() == [{"change_op": "delete", "c_0": "2"}]
    assert project.mysql_deletes(index, rows["docs"]) is None  # written in the task, deletes included
    assert project.mysql_deletes(table, rows["rows"].filter(deletes.is_null())) is None  # upserts only: nothing to hand on
