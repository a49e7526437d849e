"""The Spark projection and last-change-per-key (spark_jobs/debezium.py, the older window path's, for
pipelines with SMTs) on real Spark frames built from the decoders' output, and the Arrow ones of the
default path (spark_jobs/tables.py) against them. These start a JVM (an in-process Spark)."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow.compute as pc
import pytest

from cdcflow.config import MySqlSinkConfig
from connectors.changes import DECODED_SPARK_COLUMNS
from connectors.debezium.envelope import VERSION_SHIFT
from connectors.kafka.reader import RAW_SPARK_SCHEMA
from spark_jobs.debezium import latest_per_key, mysql_key_columns, project_for_sink
from spark_jobs.tables import key_columns, latest_rows, project_rows
from tests.unit.connectors.debezium.test_envelope import SINK, decoded, env
from tests.unit.connectors.test_formats import MOVE, MOVE_SINK
from tests.unit.decoding import decode
from tests.unit.spark_jobs.test_tables import RECORDS, arrow_changes, literals
from tests.unit.spark_jobs.test_tables import SINK as TABLES_SINK

pytestmark = pytest.mark.spark


def frame(spark: Any, records: list[tuple[bytes | None, bytes | None]]) -> Any:
    return spark.createDataFrame(decoded(records), f"{RAW_SPARK_SCHEMA}, {DECODED_SPARK_COLUMNS}")


def test_projection_types_and_errors(spark: Any) -> None:
    df = frame(spark, [
        (b'{"id":1}', env("c", None, {"id": 1, "name": "x", "amount": "12.50", "flag": True}, 1)),
        (b'{"id":2}', env("c", None, {"id": 2, "amount": "12,5"}, 2)),
        (b'{"id":3}', env("c", None, {"name": "no id"}, 3)),
        (b'{"id":4}', env("d", {"id": 4, "amount": "junk"}, None, 4)),
    ])
    rows = project_for_sink(df, SINK).orderBy("offset").collect()
    assert (rows[0].c_0, rows[0].c_1, str(rows[0].c_2), rows[0].c_3, rows[0].error_message) == (1, "x", "12.50", 1, None)
    assert rows[1].error_message == "field 'amount' = '12,5' is not a valid DECIMAL(6,2)"
    assert rows[2].error_message == "primary key field 'id' is missing or null"
    assert rows[3].error_message is None  # a delete only needs its key


def test_latest_change_per_key_wins_and_tombstones_take_their_delete_version(spark: Any) -> None:
    k1, k2 = b'{"id": 1}', b'{"id": 2}'
    df = frame(spark, [
        (k1, env("c", None, {"id": 1, "name": "first"}, 10)),
        (k2, env("r", None, {"id": 2, "name": "snap"}, 11)),
        (k1, env("u", None, {"id": 1, "name": "second"}, 12)),
        (k2, env("c", None, {"id": 2, "name": "again"}, 13)),  # same row as op=r then op=c
        (k2, env("d", {"id": 2}, None, 14)),
        (k2, None),  # tombstone after the delete
        (b'{"id": 3}', None),  # tombstone whose delete was in an earlier window: nothing to do
    ])
    latest = latest_per_key(project_for_sink(df, SINK), mysql_key_columns(SINK))
    rows = {r.c_0: r for r in latest.collect()}
    assert set(rows) == {1, 2}
    assert (rows[1].change_op, rows[1].c_1) == ("upsert", "second")
    assert rows[2].change_op == "delete" and rows[2].offset == 4  # the delete over its tombstone: its before image
    assert rows[2].version == 14 * VERSION_SHIFT + 4  # the version of its delete event


def test_a_value_in_another_form_says_what_to_declare(spark: Any) -> None:
    """Without schemas, a DATETIME arriving as epoch ms, or a DECIMAL as Debezium's base64, cannot be
    read without the column's encoding: the dead letter says which to declare."""
    sink = MySqlSinkConfig(type="mysql", table="t", primary_key=["id"], columns=[
        {"name": "id", "type": "BIGINT"}, {"name": "at", "type": "DATETIME(3)"}, {"name": "price", "type": "DECIMAL(10,2)"}])
    df = frame(spark, [(b'{"id":1}', env("c", None, {"id": 1, "at": 1709212455123, "price": "B88="}, 1))])
    message = project_for_sink(df, sink).collect()[0].error_message
    assert "field 'at' = '1709212455123' is not a valid DATETIME(3) (a number is time since the epoch" in message
    assert "declare the column's encoding: ms, us or ns" in message
    assert "field 'price' = 'B88=' is not a valid DECIMAL(10,2) (this looks like the base64 Decimal" in message
    assert "declare encoding: base64" in message


def test_the_changes_of_one_record_keep_their_order_in_the_spark_reduction(spark: Any) -> None:
    df = spark.createDataFrame(decode("canal", MOVE), f"{RAW_SPARK_SCHEMA}, {DECODED_SPARK_COLUMNS}")
    latest = latest_per_key(project_for_sink(df, MOVE_SINK), mysql_key_columns(MOVE_SINK)).collect()
    assert sorted((r.c_0, r.change_op, r.c_1) for r in latest) == [
        (1, "delete", "a"), (2, "upsert", "a"), (3, "upsert", "b")]


def test_the_arrow_projection_gives_mysql_what_the_spark_projection_gives(spark: Any) -> None:
    ours = project_rows(arrow_changes(RECORDS), TABLES_SINK)
    spark_rows = project_for_sink(frame(spark, RECORDS), TABLES_SINK).orderBy("offset").toArrow()
    assert ours.column("error_message").to_pylist() == spark_rows.column("error_message").to_pylist()
    fitting = pc.is_null(ours.column("error_message"))
    mine = literals(ours.filter(fitting), len(TABLES_SINK.columns))
    theirs = literals(spark_rows.filter(fitting), len(TABLES_SINK.columns))
    assert mine[0] == [
        *theirs[0][:2],
        "'12.50'",
        "'1'",
        "'2024-02-29 23:59:59.123456'",
        "'-838:59:59.000000'",
        "X'000102'",
        "X'03ff'",
        "'0.5'",
        "'18446744073709551615'",
    ]
    assert mine == theirs
    assert ours.column("error_message").to_pylist()[1] == "field 'amount' = '12,5' is not a valid DECIMAL(6,2)"


def test_the_last_change_per_key_in_arrow_is_the_one_spark_keeps(spark: Any) -> None:
    """Random logs over four keys (creates, updates, deletes, tombstones, changes that do not fit,
    equal versions, a tombstone first), against debezium.latest_per_key(keep_unfit=True)."""
    rng = random.Random(21)
    for _round in range(12):
        records: list[tuple[bytes | None, bytes | None]] = []
        for _ in range(40):
            key = rng.randint(1, 4)
            k = json.dumps({"id": key}).encode()
            roll = rng.random()
            ts = rng.randint(1, 15)
            if roll < 0.15:
                records.append((k, None))
            elif roll < 0.3:
                records.append((k, env("d", {"id": key}, None, ts)))
            else:
                amount = "bad" if roll > 0.9 else f"{rng.randint(0, 99)}.00"
                records.append((k, env("u", None, {"id": key, "name": f"n{len(records)}", "amount": amount}, ts)))
        ours = latest_rows(project_rows(arrow_changes(records), TABLES_SINK), key_columns(TABLES_SINK))
        theirs = latest_per_key(
            project_for_sink(frame(spark, records), TABLES_SINK), mysql_key_columns(TABLES_SINK), keep_unfit=True
        ).toArrow()
        assert sorted(
            zip(ours.column("offset").to_pylist(), ours.column("version").to_pylist(), strict=True)
        ) == sorted(zip(theirs.column("offset").to_pylist(), theirs.column("version").to_pylist(), strict=True))
