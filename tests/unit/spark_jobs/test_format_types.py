"""A chain reads GoldenGate's, Canal's and Maxwell's rows typed as each producer says (issue 43,
connectors/row_types.py): a ``MaskField`` masks a number to 0 and a boolean to false, as on Debezium's
rows and as Kafka Connect's MaskField does, a ``Cast`` reads numbers, and a Spark predicate reads the
numbers (the record frame it runs on holds them). Without a chain the rows stay texts, and typed or
not the sinks read the same texts.

The messages are the fixtures' (tests/fixtures/canal, maxwell, goldengate/orders.py), each written as
its producer documents it (the pages those modules name): Canal's values are texts typed by
``mysqlType``; Maxwell's and GoldenGate's JSON numbers are numbers (Maxwell's DECIMAL with its scale,
Oracle's NUMBER without trailing zeros), their dates strings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pydantic import TypeAdapter

from connectors import images
from connectors.memory import MemorySource, Record
from spark_jobs.job import WindowJob
from spark_jobs.read.decode import change_decoder
from spark_jobs.transform import record_frame as rf
from spark_jobs.transform import row_transforms as rt
from spark_jobs.transform import transform_config as cfgs
from spark_jobs.write.sinks import SinkTarget
from tests.fixtures import orders as o
from tests.fixtures.canal import orders as canal
from tests.fixtures.goldengate import orders as goldengate
from tests.fixtures.maxwell import orders as maxwell

Events = Callable[[], list[tuple[bytes | None, bytes]]]
# per format: its topic and records, how it names the columns (GoldenGate's Oracle source: upper case), and the
# types its rows are read in without declared columns (amount: Canal's decimal(10,2); Maxwell writes every amount
# at scale 2; Oracle's NUMBER drops trailing zeros, so 19.9 and 0.1 beside 1234567.89 make a double. qty past
# 2^63-1: BIGINT UNSIGNED by mysqlType a decimal(20,0), a JSON integer past int64 its text)
FORMATS: dict[str, tuple[str, Events, Callable[[str], str], dict[str, pa.DataType]]] = {
    "canal": (canal.TOPIC, canal.events, str, {
        "id": pa.int64(), "customer": pa.string(), "amount": pa.decimal128(10, 2), "qty": pa.decimal128(20, 0),
        "created": pa.string(), "ship_date": pa.string(), "paid": pa.int64(), "note": pa.string()}),
    "maxwell": (maxwell.TOPIC, maxwell.events, str, {
        "id": pa.int64(), "customer": pa.string(), "amount": pa.decimal128(38, 2), "qty": pa.string(),
        "created": pa.string(), "ship_date": pa.string(), "paid": pa.int64(), "note": pa.string()}),
    "goldengate": (goldengate.TOPIC, goldengate.events, str.upper, {
        "ID": pa.int64(), "CUSTOMER": pa.string(), "AMOUNT": pa.float64(), "QTY": pa.string(),
        "CREATED": pa.string(), "SHIP_DATE": pa.string(), "PAID": pa.int64(), "NOTE": pa.string()}),
}
CHAINS = TypeAdapter(list[cfgs.TransformConfig])


def chain(name: Callable[[str], str]) -> list[Any]:
    """Cast the flag to a boolean and the key to a text, then mask the amount (a number) and the flag."""
    return CHAINS.validate_python([
        {"type": "Cast", "spec": {name("paid"): "boolean", name("id"): "string"}},
        {"type": "MaskField", "fields": [name("amount"), name("paid")]},
    ])


def job(source_format: str, transforms: list[Any], columns: list[dict[str, Any]] | None = None) -> WindowJob:
    from cdcflow.config import MySqlSinkConfig

    sink = MySqlSinkConfig(type="mysql", name="m", table="orders", create_table=True, columns=columns or [],
                           primary_key=["id"] if columns else [])
    return WindowJob(pipeline="p", run_id="r", consumer_conf={}, producer_conf={}, ranges=(),
                     sinks=(SinkTarget(sink, "url"),), versioning="source_ts_ms", tolerance="all", dlq_topic="dlq",
                     context_headers=True, transforms=tuple(transforms), source_format=source_format)


def decoded(source_format: str, window: WindowJob) -> pa.Table:
    topic, events, _name, _types = FORMATS[source_format]
    batch = MemorySource([Record(topic, 0, i, k, v, 1_700_000_000_000 + i, [])
                          for i, (k, v) in enumerate(events())]).batch()
    return pa.Table.from_batches([change_decoder(window).decode_batch(batch)])


def upserts(changes: pa.Table) -> list[dict[str, Any]]:
    """The upserts' images as Python values of their types."""
    values = images.as_struct(changes.column("image")).to_pylist()
    return [v for v, op in zip(values, changes.column("change_op").to_pylist(), strict=True) if op == "upsert"]


def after_images() -> list[o.Row]:
    """The source rows each upsert writes, in order (a key move: its delete, then this)."""
    return [after for s in o.STATEMENTS for _before, after in s.rows if after is not None]


@pytest.mark.parametrize("source_format", list(FORMATS))
def test_under_a_chain_the_rows_are_typed_as_the_producer_says_and_give_the_same_texts(source_format: str) -> None:
    _topic, _events, name, types = FORMATS[source_format]
    typed = decoded(source_format, job(source_format, chain(name)))
    texts = decoded(source_format, job(source_format, []))
    image = images.compact(typed.column("image"))
    assert {f.name: f.type for f in image.type.field(0).type} == types
    assert all(f.type == pa.string() for f in images.compact(texts.column("image")).type.field(0).type)
    for field in types:  # what the sinks read: the same texts typed or not
        assert images.texts(typed.column("image"), field).to_pylist() == images.texts(
            texts.column("image"), field).to_pylist(), field
    got = upserts(typed)
    assert [r[name("id")] for r in got] == [r["id"] for r in after_images()]
    want_amounts = [r["amount"] for r in after_images()]
    assert [Decimal(str(r[name("amount")])) for r in got] == want_amounts  # numbers, of the source's value


@pytest.mark.parametrize("source_format", list(FORMATS))
def test_mask_field_masks_a_number_to_0_and_a_boolean_to_false_after_a_cast(source_format: str) -> None:
    _topic, _events, name, types = FORMATS[source_format]
    steps = chain(name)
    out = rt.apply(decoded(source_format, job(source_format, steps)), steps, "source_ts_ms")
    got = upserts(out)
    assert [r[name("id")] for r in got] == [str(r["id"]) for r in after_images()]  # Cast to string: the text
    assert {r[name("paid")] for r in got} == {False}  # Cast to boolean, then masked: false
    assert {r[name("amount")] for r in got} == {0}  # masked as the number it is (0.00, 0.0), not to ''
    masked = images.texts(out.column("image"), name("amount")).to_pylist()
    zero = "0" if pa.types.is_floating(types[name("amount")]) else "0.00"
    assert {t for t, op in zip(masked, out.column("change_op").to_pylist(), strict=True) if op == "upsert"} == {zero}
    assert [r[name("customer")] for r in got] == [r["customer"] for r in after_images()]  # untouched


@pytest.mark.parametrize("source_format", list(FORMATS))
def test_a_cast_reads_the_numbers(source_format: str) -> None:
    _topic, _events, name, _types = FORMATS[source_format]
    steps = CHAINS.validate_python([{"type": "Cast", "spec": {name("amount"): "int32", name("id"): "float64"}}])
    out = rt.apply(decoded(source_format, job(source_format, steps)), steps, "source_ts_ms")
    got = upserts(out)
    # Kafka Connect's Cast of a number to int32 drops its fraction; of a text it would fail on '1234567.89'
    assert [r[name("amount")] for r in got] == [int(r["amount"]) for r in after_images()]
    assert [r[name("id")] for r in got] == [float(r["id"]) for r in after_images()]
    assert out.column("error_message").null_count == out.num_rows  # no record failed


@pytest.mark.parametrize("source_format", list(FORMATS))
def test_a_spark_predicate_reads_the_numbers_of_the_record_frame(source_format: str) -> None:
    """A ``Sql`` predicate runs on the record frame (spark_jobs/transform/record_frame.py): ``value.amount <
    0`` and ``value.id > 2`` compare numbers (on texts Spark's ANSI mode would cast '1234567.89' to a BIGINT
    and fail: tests/integration/spark_jobs/test_format_chains.py runs such a predicate)."""
    _topic, _events, name, _types = FORMATS[source_format]
    steps = CHAINS.validate_python([{"type": "Filter", "predicate": {
        "type": "Sql", "condition": f"value.{name('amount')} < 0"}}])
    changes = rt.apply(decoded(source_format, job(source_format, steps)), [], "source_ts_ms", finish=False)
    frame = rf.to_frame(changes, "json")
    values = [v for v in frame.column("value").to_pylist() if v is not None]
    assert [v[name("amount")] < 0 for v in values] == [r["amount"] < 0 for r in after_images()]
    assert [v[name("id")] > 2 for v in values] == [r["id"] > 2 for r in after_images()]


def test_a_declared_column_types_maxwells_values_as_it_reads_them() -> None:
    """Maxwell writes no column types: a sink's declared column reads its values (a DECIMAL(10,2) at its
    scale, BIGINT UNSIGNED exactly, a DATETIME(6) its text) and types them for the chain."""
    columns = [{"name": c["name"], "type": c["type"]} for c in o.SINK_COLUMNS]
    steps = CHAINS.validate_python([{"type": "MaskField", "fields": ["qty"]}])
    changes = decoded("maxwell", replace(job("maxwell", steps, columns)))
    image = images.compact(changes.column("image"))
    assert {f.name: f.type for f in image.type.field(0).type} == {
        "id": pa.int64(), "customer": pa.string(), "amount": pa.decimal128(10, 2), "qty": pa.decimal128(20, 0),
        "created": pa.string(), "ship_date": pa.string(), "paid": pa.int64(), "note": pa.string()}
    got = upserts(changes)
    assert [r["qty"] for r in got] == [r["qty"] for r in after_images()]  # 2^64-1 exactly
    out = upserts(rt.apply(changes, steps, "source_ts_ms"))
    assert {r["qty"] for r in out} == {0}
