"""SMT chains on the per-partition path (spark_jobs/transform/row_transforms.py), without Spark: Debezium's own
records (tests/fixtures/debezium/orders.py) decoded as the read task decodes them, then the chain."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pydantic import TypeAdapter, ValidationError

from cdcflow.config import ElasticsearchSinkConfig, MySqlSinkConfig
from connectors import images
from connectors.debezium.envelope import Decoder
from connectors.errors import ConfigError
from connectors.memory import MemorySource, Record
from spark_jobs.project import targets as project
from spark_jobs.project.routes import routes_checked
from spark_jobs.transform import row_transforms as rt
from spark_jobs.transform import transform_config as cfgs
from spark_jobs.job import WindowJob
from spark_jobs.sink_targets import SinkTarget
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx

CHAIN = TypeAdapter(list[cfgs.TransformConfig])
MYSQL = MySqlSinkConfig(type="mysql", name="m", table="orders", primary_key=["id"],
                        columns=[{"name": "id", "type": "BIGINT"}])


def chain(*steps: dict[str, Any]) -> list[Any]:
    return CHAIN.validate_python([{"type": "ExtractNewRecordState", "delete_handling": "none",
                                   "drop_tombstones": False}, *steps])


def decoded(records: list[tuple[bytes | None, bytes | None]], column_wise: bool = True,
            headers: list[list[tuple[str, bytes]]] | None = None, topic: str = fx.TOPIC,
            versioning: str = "source_ts_ms") -> pa.Table:
    decoder = Decoder(versioning)
    decoder.column_wise_min = 1 if column_wise else 10**9
    batch = MemorySource([Record(topic, 0, i, k, v, 1_700_000_000_000 + i, (headers or [[]] * len(records))[i])
                          for i, (k, v) in enumerate(records)]).batch()
    return pa.Table.from_batches([decoder.decode_batch(batch)])


def rows(table: pa.Table) -> list[dict[str, Any]]:
    images_ = images.as_map(table.column("image")).to_pylist()
    out = []
    for row, image in zip(table.select(["offset", "change_op", "route", "error_message"]).to_pylist(), images_,
                          strict=True):
        out.append({**row, "image": dict(image) if image is not None else None})
    return out


def job(*sinks: Any, transforms: list[Any], **extra: Any) -> WindowJob:
    return WindowJob(pipeline="p", run_id="r", consumer_conf={}, producer_conf={}, ranges=(),
                     sinks=tuple(SinkTarget(s, "url") for s in sinks), versioning="source_ts_ms", tolerance="all",
                     dlq_topic="dlq", context_headers=True, transforms=tuple(transforms), **extra)


def _micros(at: dt.datetime) -> int:
    return (at.replace(tzinfo=dt.UTC) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def test_debeziums_records_through_a_chain_give_the_sources_values_either_decode() -> None:
    steps = chain(
        {"type": "Cast", "spec": {"paid": "boolean", "amount": "float64", "id": "string"}},
        {"type": "ReplaceField", "exclude": ["note", "qty"], "renames": {"customer": "buyer"}},
        {"type": "TimestampConverter", "field": "created", "target_type": "unix", "unix_precision": "milliseconds"},
        {"type": "TimestampConverter", "field": "ship_date", "target_type": "string", "format": "dd/MM/yyyy"},
        {"type": "InsertField", "static_field": "src", "static_value": "shop", "offset_field": "off"})
    per_mode = [rows(rt.apply(decoded(fx.events(), cw), steps, "source_ts_ms")) for cw in (True, False)]
    assert per_mode[0] == per_mode[1]  # the column-wise decode's typed images and the per-record decode's texts
    first = per_mode[0][0]
    row = o.ROW_1
    assert first["image"] == {
        "id": "1", "buyer": row["customer"], "amount": "1234567.89", "paid": "true",
        "created": str(_micros(row["created"]) // 1000), "ship_date": "29/02/2024", "src": "shop", "off": "0"}
    assert [r["error_message"] for r in per_mode[0]] == [None] * len(fx.events())
    # 1969-12-31 23:59:59.999999 is -1 µs: toward zero, as Spark's cast of the division
    assert per_mode[0][1]["image"]["created"] == "0"


def test_a_value_a_step_cannot_convert_fails_that_record_with_the_step_and_the_value() -> None:
    def env(i: int, **after: Any) -> tuple[bytes, bytes]:
        return (json.dumps({"id": i}).encode(),
                json.dumps({"op": "c", "after": {"id": i, **after}, "source": {"ts_ms": 5}}).encode())

    table = decoded([env(1, qty="5", at="2024-01-02T03:04:05"), env(2, qty="many", at="2024-01-02"),
                     env(3, qty=2**40, at="later"), env(4, qty=" 7 ", at="2023-11-14 22:13:20")])
    out = rows(rt.apply(table, chain({"type": "Cast", "spec": {"qty": "int32"}},
                                     {"type": "TimestampConverter", "field": "at", "target_type": "Timestamp",
                                      "unix_precision": "seconds"}), "source_ts_ms"))
    assert [r["error_message"] for r in out] == [
        None, "Cast: value.qty = 'many' is not a valid int32", "Cast: value.qty = '1099511627776' is not a valid int32",
        None]
    assert [(r["image"]["qty"], r["image"]["at"]) for r in (out[0], out[3])] == [
        ("5", "2024-01-02 03:04:05.000000"), ("7", "2023-11-14 22:13:20.000000")]
    later = rows(rt.apply(table.slice(2, 1), chain({"type": "TimestampConverter", "field": "at",
                                                    "target_type": "unix"}), "source_ts_ms"))
    assert later[0]["error_message"] == "TimestampConverter: value.at = 'later' is not a timestamp"
    # numbers are times since the epoch in unix_precision, also as the texts the per-record decode gives
    # them (a record its group's column-wise read could not take: decoded alone, fields as texts)
    for column_wise in (True, False):
        numbers = rows(rt.apply(decoded([env(5, at=1_700_000_000)], column_wise), chain(
            {"type": "TimestampConverter", "field": "at", "target_type": "Timestamp", "unix_precision": "seconds"}),
            "source_ts_ms"))
        assert numbers[0]["image"]["at"] == "2023-11-14 22:13:20.000000"


def test_a_delete_whose_before_image_holds_the_key_alone_leaves_its_batch_typed() -> None:
    """Debezium's delete with a key-only before image (REPLICA IDENTITY DEFAULT on PostgreSQL, the
    bench's deletes) first in a batch: the batch is still read column-wise, typed."""
    records = [_env(1, "d"), *[_env(i, at=1_700_000_000 + i, name=f"n{i}") for i in range(2, 100)]]
    image = decoded(records).column("image").combine_chunks()
    assert [image.field(c).type for c in range(image.type.num_fields)] == [
        pa.struct([("id", pa.int64()), ("at", pa.int64()), ("name", pa.string())])]


@pytest.mark.parametrize(("values", "kind", "want", "bad"), [
    (pa.array([1, 300, -129, None], pa.int64()), "int8", [1, None, None, None], [False, True, True, False]),
    (pa.array([1.9, -1.9, float("nan"), 1e30]), "int32", [1, -1, None, None], [False, False, True, True]),
    (pa.array([Decimal("19.90"), Decimal("-3.55")], pa.decimal128(10, 2)), "int64", [19, -3], [False, False]),
    (pa.array([Decimal("1234567.89")], pa.decimal128(10, 2)), "float64", [1234567.89], None),
    (pa.array(["12", "+3", "1.5", "x", "99999999999999999999"]), "int64", [12, 3, None, None, None],
     [False, False, True, True, True]),
    (pa.array(["1.5", "1e3", "-.5", "abc"]), "float64", [1.5, 1000.0, -0.5, None], [False, False, False, True]),
    (pa.array(["Yes", "f", "1", "maybe"]), "boolean", [True, False, True, None], [False, False, False, True]),
    (pa.array([0, 2], pa.int8()), "boolean", [False, True], None),
    (pa.array([True, False]), "int16", [1, 0], None),
    (pa.array([Decimal("19.90")], pa.decimal128(10, 2)), "string", ["19.90"], None),
    (pa.array([dt.date(2024, 1, 1)], pa.date32()), "int32", [None], [True]),
])
def test_cast_follows_sparks_try_cast(values: pa.Array, kind: str, want: list[Any], bad: list[bool] | None) -> None:
    out, failed = rt.cast_values(values, kind)
    assert out.type == rt.CAST_TYPES[kind]
    assert out.to_pylist() == want
    assert (failed.to_pylist() if failed is not None else None) == bad


@pytest.mark.parametrize(("target", "precision", "fmt", "want"), [
    ("unix", "seconds", None, "1709212455"),
    ("unix", "microseconds", None, "1709212455123456"),
    ("Timestamp", "milliseconds", None, "2024-02-29 13:14:15.123456"),
    ("Date", "milliseconds", None, "2024-02-29"),
    ("Time", "milliseconds", None, "13:14:15.123"),
    ("string", "milliseconds", "yyyy/MM/dd'T'HH:mm", "2024/02/29T13:14"),
    ("string", "milliseconds", "yyyy-MM-dd HH:mm:ss.SSS", "2024-02-29 13:14:15.123"),
    ("string", "milliseconds", "EEE, d MMM yy hh:mm:ss.SSSSSS a XXX", "Thu, 29 Feb 24 01:14:15.123456 PM Z"),
])
def test_timestamp_converter_targets(target: str, precision: str, fmt: str | None, want: str) -> None:
    step = {"type": "TimestampConverter", "field": "created", "target_type": target, "unix_precision": precision,
            **({"format": fmt} if fmt else {})}
    steps = chain(step)
    assert rt.unserved(job(MYSQL, transforms=steps)) is None
    out = rows(rt.apply(decoded(fx.events()[:1]), steps, "source_ts_ms"))
    assert out[0]["image"]["created"] == want


def test_a_text_read_by_a_format_with_milliseconds_and_unix_seconds_before_1970() -> None:
    def env(i: int, at: Any) -> tuple[bytes, bytes]:
        return (json.dumps({"id": i}).encode(),
                json.dumps({"op": "c", "after": {"id": i, "at": at}, "source": {"ts_ms": 5}}).encode())

    steps = chain({"type": "TimestampConverter", "field": "at", "target_type": "unix", "unix_precision": "seconds",
                   "format": "dd.MM.yyyy HH:mm:ss.SSS"})
    out = rows(rt.apply(decoded([env(1, "29.02.2024 13:14:15.250"), env(2, "1969-12-31 23:59:58.5"),
                                 env(3, "31.12.1969 23:59:59.999")]), steps, "source_ts_ms"))
    assert [r["image"]["at"] for r in out] == ["1709212455", "-1", "0"]


def test_extract_new_record_state_options_and_what_drops_keeps_the_ends() -> None:
    events = fx.events()  # three inserts, two updates, key moves (a delete, its tombstone, an insert), a delete
    tombstones = [i for i, (_k, v) in enumerate(events) if v is None]
    deletes = [i for i, r in enumerate(rows(decoded(events))) if r["change_op"] == "delete" and i not in tombstones]
    for handling, drop_tombstones in (("drop", True), ("none", False)):
        steps = CHAIN.validate_python([{"type": "ExtractNewRecordState", "delete_handling": handling,
                                        "drop_tombstones": drop_tombstones, "add_fields": ["table", "source.ts_ms"]}])
        out = rows(rt.apply(decoded(events), steps, "source_ts_ms"))
        ops = [r["change_op"] for r in out]
        assert tombstones and deletes
        assert [ops[i] for i in tombstones] == ["" if drop_tombstones else "delete"] * len(tombstones)
        assert {ops[i] for i in deletes} == {"drop": {""}, "none": {"delete"}}[handling]
        assert out[0]["image"]["__table"] == o.TABLE
        assert out[0]["image"]["__source_ts_ms"] == str(o.T0 * 1000)
        # what a step drops is read: the tally ends past it
        tally = [b for b in project.split(job(MYSQL, transforms=steps), 0, rt.apply(decoded(events), steps,
                                                                                  "source_ts_ms"))][-1]
        counted = json.loads(tally.column("info")[0].as_py())["counted"]
        assert [(c[3], c[4]) for c in counted if c[0] is None] == [(len(events), len(events))]


def test_predicates_route_filter_and_mask() -> None:
    events = fx.events()[:3]
    steps = chain(
        {"type": "MaskField", "fields": ["customer", "paid", "amount"],
         "predicate": {"type": "HasHeaderKey", "name": "pii"}},
        {"type": "RegexRouter", "regex": r"mysql-server-1\.(\w+)\.(\w+)", "replacement": "$1_$2_x"},
        {"type": "Filter", "predicate": {"type": "TopicNameMatches", "pattern": r"inventory_orders_x"},
         "negate": True})
    table = decoded(events, headers=[[("pii", b"1")], [], [("other", b"")]])
    out = rows(rt.apply(table, steps, "source_ts_ms"))
    assert [r["route"] for r in out] == ["inventory_orders_x"] * 3
    assert [r["change_op"] for r in out] == ["upsert"] * 3  # the negated filter keeps what matches
    assert (out[0]["image"]["customer"], out[0]["image"]["paid"], out[0]["image"]["amount"]) == ("", "0", "0.00")
    assert out[1]["image"]["customer"] == o.ROW_2["customer"]
    dropped = rows(rt.apply(table, chain({"type": "Filter", "predicate": {"type": "HasHeaderKey", "name": "pii"}}),
                            "source_ts_ms"))
    assert [r["change_op"] for r in dropped] == ["", "upsert", "upsert"]


def test_a_field_the_records_lack_is_left_alone_and_a_bad_replacement_names_the_step() -> None:
    table = decoded(fx.events()[:2])
    assert rows(rt.apply(table, chain({"type": "Cast", "spec": {"nope": "int64"}}), "source_ts_ms")) == rows(table)
    with pytest.raises(ConfigError, match=r"transforms.1 \(MaskField\): MaskField: the replacement 'x' is not a"):
        rt.apply(table, chain({"type": "MaskField", "fields": ["paid"], "replacement": "x"}), "source_ts_ms")


def _env(i: int, op: str = "c", **row: Any) -> tuple[bytes, bytes]:
    image = {"id": i, **row}
    return (json.dumps({"id": i}).encode(), json.dumps({
        "op": op, "before": image if op == "d" else None, "after": None if op == "d" else image,
        "source": {"ts_ms": 5, "db": "shop", "table": "orders"}}).encode())


def test_after_the_unwrap_a_delete_has_no_value_and_a_value_error_never_fails_a_delete() -> None:
    """As on the older path, where ExtractNewRecordState (delete_handling none) leaves a delete a null
    value: a TombstoneHandler drops it, a Cast of its row does not fail it."""
    table = decoded([_env(1, n="1"), _env(2, "d", n="x"), (b'{"id": 3}', None)])
    out = rows(rt.apply(table, chain({"type": "TombstoneHandler", "behavior": "ignore"}), "source_ts_ms"))
    assert [r["change_op"] for r in out] == ["upsert", "", ""]
    cast = rows(rt.apply(table, chain({"type": "Cast", "spec": {"n": "int64"}}), "source_ts_ms"))
    assert [(r["change_op"], r["error_message"]) for r in cast] == [("upsert", None), ("delete", None),
                                                                    ("delete", None)]
    failing = rows(rt.apply(table, chain({"type": "TombstoneHandler", "behavior": "fail"}), "source_ts_ms"))
    assert [r["error_message"] for r in failing] == [None] + ["TombstoneHandler: tombstone record (behavior fail)"] * 2


def test_zoned_texts_times_of_day_and_strict_formats() -> None:
    table = decoded([_env(1, at="2024-01-02T03:04:05Z"), _env(2, at="2024-01-02T03:04:05.5+02:00"),
                     _env(3, at="2024-1-2"), _env(4, at="02.01.2024")])
    out = rows(rt.apply(table, chain({"type": "TimestampConverter", "field": "at", "target_type": "unix",
                                      "format": "dd.MM.yyyy"}), "source_ts_ms"))
    assert [r["image"]["at"] for r in out] == ["1704164645000", "1704157445500", None, "1704153600000"]
    assert out[2]["error_message"] == "TimestampConverter: value.at = '2024-1-2' is not a timestamp in format dd.MM.yyyy"
    typed = Decoder("source_ts_ms")
    typed.column_wise_min = 1
    times = pa.Table.from_batches([typed.decode_batch(MemorySource([Record(
        "t", 0, 0, b'{"id": 1}', json.dumps({"schema": {"type": "struct", "fields": [
            *({"field": side, "type": "struct", "optional": True, "fields": [
                {"field": "id", "type": "int32"}, {"field": "t", "type": "int64", "name": "io.debezium.time.MicroTime"}]}
              for side in ("before", "after")),
            {"field": "op", "type": "string"}, {"field": "source", "type": "struct", "fields": [
                {"field": "ts_ms", "type": "int64"}]}]},
            "payload": {"before": None, "after": {"id": 1, "t": 3_600_000_000}, "op": "c", "source": {"ts_ms": 5}}},
            separators=(",", ":")).encode(),
        1)]).batch())])
    said = rows(rt.apply(times, chain({"type": "TimestampConverter", "field": "t", "target_type": "unix"}),
                         "source_ts_ms"))
    assert said[0]["error_message"] == "TimestampConverter: value.t = '01:00:00.000000' is not a timestamp"
    cast = rows(rt.apply(times, chain({"type": "Cast", "spec": {"t": "int64"}}), "source_ts_ms"))
    assert cast[0]["error_message"] == ("Cast: value.t = '01:00:00.000000' is a date or time: TimestampConverter with "
                                        "target_type unix makes it a number")


def test_every_java_pattern_regex_and_replacement_kafka_connect_accepts_is_served() -> None:
    """SimpleDateFormat's letters Spark lacks or reads otherwise, Java's regex syntax RE2 does not
    read: all on this path (tests/unit/spark_jobs/test_row_java.py checks the values); what Kafka
    Connect refuses never gets here (a config error, tests/unit/spark_jobs/test_row_java.py)."""
    def reason(step: dict[str, Any]) -> str | None:
        return rt.unserved(job(MYSQL, transforms=chain(step)))

    for fmt in ("GGGG yyyy", "dd MMMMMM yyyy", "yyyy-MM F", "yyyy[-MM]", "{yyyy}#", "ddd HHH yyyyy aa zzzzz ZZZZ",
                "yyyy-MM-dd HH:mm:ss.SSSSSS", "EEEEE, dd MMMMM yyyy u zzzz", "yyyy'['MM']'", ""):
        assert reason({"type": "TimestampConverter", "field": "a", "target_type": "unix", "format": fmt}) is None
        assert reason({"type": "TimestampRouter", "timestamp_format": fmt}) is None
    for regex in ("x[a-z&&[^c]]", r"(?<a>a)(?=b)\k<a>", r"(a)\1", "a*+b", r"(?<!x)y", r"\p{Alpha}\Q.\E"):
        assert reason({"type": "RegexRouter", "regex": regex, "replacement": "$0"}) is None
        assert reason({"type": "Filter", "predicate": {"type": "TopicNameMatches", "pattern": regex}}) is None
    for replacement in ("$2$1\\$", "$10", "${a}$0"):
        assert reason({"type": "RegexRouter", "regex": "(?<a>a)(b)", "replacement": replacement}) is None
    for step, field, said in (
            ({"type": "TimestampConverter", "field": "a", "target_type": "string", "format": "yyyy QQQ"}, "format",
             "TimestampConverter: 'Q' is not a SimpleDateFormat letter: Kafka Connect refuses the pattern"),
            ({"type": "RegexRouter", "regex": "(?<a>a)", "replacement": "${b}"}, "replacement",
             "RegexRouter: ${b} names a group the regex lacks (its named groups: a)")):
        with pytest.raises(ValidationError) as exc:
            chain(step)
        assert [(e["loc"][-1], said in e["msg"]) for e in exc.value.errors()] == [(field, True)], exc.value
    assert rt.unserved(job(MYSQL, transforms=CHAIN.validate_python(
        [{"type": "ExtractNewRecordState", "delete_handling": "rewrite", "add_fields": ["op"]}]))) is None
    kafka_offset = job(MYSQL, transforms=CHAIN.validate_python(
        [{"type": "ExtractNewRecordState", "add_fields": ["source.ts_ms"]}]))
    assert rt.unserved(replace(kafka_offset, versioning="kafka_offset")) is None  # read from the value (row_unwrap)


def test_a_route_that_cannot_name_a_table_fails_its_change_as_on_the_older_path() -> None:
    steps = chain({"type": "RegexRouter", "regex": r"mysql-server-1\.(.*)", "replacement": "cdcflow_$1"})
    out = rows(routes_checked(rt.apply(decoded(fx.events()[:1]), steps, "source_ts_ms")))
    assert out[0]["error_message"] == ("the routed topic 'cdcflow_inventory.orders' is reserved: names starting "
                                       "with cdcflow_ or cdcflow- are cdcflow's own tables and indices")


def test_a_chain_decodes_every_batch_typed_and_an_odd_record_leaves_its_group_typed() -> None:
    from spark_jobs.read.decode import change_decoder

    assert change_decoder(job(MYSQL, transforms=chain())).column_wise_min == 1
    records = [_env(i, n=i) for i in range(300)]
    records[150] = _env(150, n="odd")  # a string where the others have numbers: its group fails, halved
    image = decoded(records).column("image").combine_chunks()
    codes = np.frombuffer(image.buffers()[1], np.int8)[image.offset:image.offset + len(image)]
    kind_of_row = [image.field(int(c)).type.field("n").type for c in codes]
    texts = [i for i, k in enumerate(kind_of_row) if k == pa.string()]
    assert 150 in texts and len(texts) <= 64  # the odd record's neighbours in a half of 64 or fewer, not all 300
    assert {kind_of_row[i] for i in range(300) if i not in texts} == {pa.int64()}


def test_which_chains_the_partition_path_serves() -> None:
    ok = chain({"type": "Cast", "spec": {"id": "int64"}})
    assert rt.unserved(job(MYSQL, transforms=ok)) is None
    es = ElasticsearchSinkConfig(type="elasticsearch", name="docs", index="i", id_fields=["id"])
    dynamic = MySqlSinkConfig(type="mysql", name="t", table="{topic}", create_table=True)
    cases = {
        "source.format maxwell: the format's messages are already decoded into rows, and ExtractNewRecordState "
        "unwraps Debezium's envelopes: remove it": [job(MYSQL, transforms=ok, source_format="maxwell")],
        # a Python step or a Sql predicate before it sees the envelope (spark_jobs/transform/envelope_frame.py); a
        # SqlExpression there sets the envelope's fields, as a Cast there would (cdcflow/config.py refuses it)
        "transforms.0 (SqlExpression): before ExtractNewRecordState the value is Debezium's envelope (op, before, "
        "after, source, ts_ms), so SqlExpression would act on the field 'total' of the envelope, not of the row, and "
        "ExtractNewRecordState keeps only the envelope's 'after': put it after the ExtractNewRecordState": [
            job(MYSQL, transforms=CHAIN.validate_python([{"type": "SqlExpression", "fields": {"total": "1"}},
                                                         {"type": "ExtractNewRecordState"}]))],
        "the chain is applied to records read with the json, json_schema, string, bytes and registry converters "
        "(avro, protobuf, json_schema_registry) only": [
            job(MYSQL, transforms=ok, key_converter="xml")],
        "ExtractNewRecordState reads Debezium's envelope: value_converter json, json_schema or a registry converter": [
            job(MYSQL, transforms=ok, value_converter="string")],  # cdcflow/config.py refuses it
    }
    for reason, jobs in cases.items():
        for j in jobs:
            assert rt.unserved(j) == reason
    assert rt.unserved(job(dynamic, transforms=ok, value_converter="json_schema")) is None
    for registry in ("avro", "protobuf", "json_schema_registry"):  # transcoded into json_schema's bytes first
        assert rt.unserved(job(dynamic, transforms=ok, key_converter=registry, value_converter=registry)) is None
    for source_format in ("goldengate", "canal", "maxwell"):  # the format's rows, as after an ExtractNewRecordState
        assert rt.unserved(job(MYSQL, transforms=ok[1:], source_format=source_format)) is None
    sparked = chain({"type": "SqlExpression", "fields": {"x": "1"}},
                    {"type": "Drop", "predicate": {"type": "Sql", "condition": "value.id > 1"}})
    assert rt.unserved(job(MYSQL, es, transforms=sparked)) is None  # spark_jobs/transform/spark_stage.py
    python_first = [{"type": "Python", "function": "shop.steps.enrich"}, {"type": "ExtractNewRecordState"}]
    assert rt.unserved(job(MYSQL, transforms=CHAIN.validate_python(python_first))) is None  # envelope_frame.py
    # the key's fields (spark_jobs/transform/row_keys.py); Debezium's envelopes under a text key (spark_jobs/read/decode.py)
    assert rt.unserved(job(MYSQL, transforms=chain({"type": "Cast", "target": "key", "spec": {"id": "int64"}}))) is None
    for converter in ("string", "bytes"):
        assert rt.unserved(job(MYSQL, es, transforms=ok, key_converter=converter)) is None
    # a table from the record schema behind it: described from the values Spark left (spark_jobs/transform/row_schemas.py)
    assert rt.unserved(job(dynamic, transforms=sparked, value_converter="json_schema")) is None
    # tables from the record schema of schemaless records, of pk_mode kafka, behind a nested step or a ValueToKey:
    # described from the images after the chain (spark_jobs/transform/row_schemas.py)
    for served in (job(dynamic, transforms=ok), job(dynamic.model_copy(update={"pk_mode": "kafka"}), transforms=ok),
                   job(dynamic, transforms=chain({"type": "Flatten"}), value_converter="json_schema"),
                   job(dynamic, transforms=chain({"type": "ValueToKey", "fields": ["id"]}))):
        assert rt.unserved(served) is None
    assert rt.unserved(job(es, transforms=ok)) is None  # an index, mapped or not (spark_jobs/transform/row_documents.py)
    # Kafka Connect's record model on Debezium's topics: the value is the row (Maxwell's rows: its decoder's, above)
    rows = CHAIN.validate_python([{"type": "Cast", "spec": {"id": "int64"}}])
    assert rt.record_model(rows) and not rt.record_model(ok)
    assert rt.unserved(replace(job(MYSQL, transforms=rows), versioning="kafka_offset")) is None
    for converter in ("string", "bytes", "avro"):  # not a row (a HoistField makes one), or a transcoded one
        assert rt.unserved(replace(job(MYSQL, transforms=rows, key_converter=converter, value_converter=converter),
                                   versioning="kafka_offset")) is None


def test_declared_columns_name_the_fields_after_the_chain() -> None:
    steps = chain({"type": "ReplaceField", "renames": {"updated_ms": "updated_at", "a": "b"}},
                  {"type": "ReplaceField", "renames": {"b": "c"}},
                  {"type": "Cast", "spec": {"n": "int64"}},
                  {"type": "InsertField", "static_field": "src", "static_value": "x"})
    assert [rt.names_before(steps, f) for f in ("updated_at", "c", "b", "a", "n", "src", "plain")] == [
        "updated_ms", "a", None, None, None, None, "plain"]


def test_a_table_from_the_record_schema_gets_the_columns_the_chain_leaves() -> None:
    steps = chain({"type": "Cast", "spec": {"paid": "boolean", "id": "int64", "qty": "string"}},
                  {"type": "ReplaceField", "exclude": ["note"], "renames": {"customer": "buyer"}},
                  {"type": "TimestampConverter", "field": "created", "target_type": "unix"},
                  {"type": "InsertField", "static_field": "src", "static_value": "shop", "offset_field": "off"})
    table = rt.apply(decoded(fx.events()), steps, "source_ts_ms")
    [schema] = [s for s in table.column("row_schema").to_pylist() if s is not None]
    described = json.loads(schema)
    assert {c["name"]: c["type"] for c in described["columns"]} == {
        "id": "BIGINT", "buyer": "LONGTEXT", "amount": "DECIMAL(10,2)", "qty": "LONGTEXT", "created": "BIGINT",
        "ship_date": "DATE", "paid": "TINYINT(1)", "src": "LONGTEXT", "off": "BIGINT"}
    assert described["key"] == ["id"]
    assert "buyer" in described["properties"] and "paid" not in described["properties"]
