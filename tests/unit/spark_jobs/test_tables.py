"""A sink's many tables in one write job (spark_jobs/project/tables.py): the projection and the last change
per key in Arrow, on decoded changes: what MySQL would be given."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from cdcflow.config import MySqlSinkConfig
from connectors.kafka.reader import RAW_SCHEMA
from connectors.mysql import bulk
from spark_jobs.project.tables import (
    DECLARE_BINARY_ENCODING,
    DECLARE_TIME_ENCODING,
    GROUP_COLUMNS,
    by_table,
    key_columns,
    latest_rows,
    project_rows,
)
from tests.unit.connectors.debezium.test_envelope import decoded, env

SINK = MySqlSinkConfig(
    type="mysql",
    table="t",
    primary_key=["id"],
    columns=[
        {"name": "id", "type": "BIGINT"},
        {"name": "name", "type": "VARCHAR(10)"},
        {"name": "amount", "type": "DECIMAL(6,2)"},
        {"name": "flag", "type": "TINYINT(1)"},
        {"name": "at", "type": "DATETIME(6)"},
        {"name": "during", "type": "TIME(6)"},
        {"name": "blob", "type": "VARBINARY(10)"},
        {"name": "bits", "type": "BIT(10)"},
        {"name": "ratio", "type": "DOUBLE"},
        {"name": "big", "type": "BIGINT UNSIGNED"},
    ],
)

RECORDS = [
    (
        b'{"id":1}',
        env(
            "c",
            None,
            {
                "id": 1,
                "name": "x",
                "amount": "12.50",
                "flag": True,
                "at": "2024-02-29 23:59:59.123456",
                "during": "-838:59:59.000000",
                "blob": "AAEC",
                "bits": 1023,
                "ratio": 0.5,
                "big": "18446744073709551615",
            },
            1,
        ),
    ),
    (b'{"id":2}', env("c", None, {"id": 2, "amount": "12,5", "flag": "false", "at": "1969-12-31T23:59:59"}, 2)),
    (b'{"id":3}', env("c", None, {"name": "no id"}, 3)),
    (b'{"id":4}', env("d", {"id": 4, "amount": "junk"}, None, 4)),
    (
        b'{"id":5}',
        env(
            "c",
            None,
            {
                "id": 5,
                "amount": "12345.00",
                "at": "1700000000000",
                "during": "12345678",
                "blob": "not base64!",
                "bits": 1024,
                "ratio": "1e400x",
                "flag": "yes",
            },
            5,
        ),
    ),
    (b'{"id":6}', env("c", None, {"id": "six", "amount": "-9999.99", "bits": "true", "ratio": "-1.5e-3"}, 6)),
]


def arrow_changes(records: list[tuple[bytes | None, bytes | None]]) -> pa.Table:
    rows = decoded(records)
    for r in rows:
        r["image"] = list(r["image"].items()) if r["image"] is not None else None
        r["_table"] = "t"
    schema = pa.schema(
        [
            *RAW_SCHEMA,
            ("route", pa.string()),
            ("change_op", pa.string()),
            ("version", pa.int64()),
            ("image", pa.map_(pa.string(), pa.string())),
            ("key_image", pa.map_(pa.string(), pa.string())),
            ("_table", pa.string()),
        ]
    )
    valid = [r for r in rows if r["error_stage"] is None]
    return pa.Table.from_pylist([{n: r.get(n) for n in GROUP_COLUMNS} for r in valid], schema=schema)


def literals(table: Any, n: int) -> list[list[str]]:
    """Per row, each sink column as the SQL literal MySQL is given (connectors/mysql/bulk.py)."""
    columns = [bulk._literals(pa.array(table.column(f"c_{i}"))) for i in range(n)]
    return [list(row) for row in zip(*[c.to_pylist() for c in columns], strict=True)]



def test_unfit_values_are_named_column_by_column() -> None:
    messages = project_rows(arrow_changes(RECORDS), SINK).column("error_message").to_pylist()
    assert messages[2] == "primary key field 'id' is missing or null"
    assert messages[3] is None  # a delete needs only its key
    assert messages[4] == "; ".join(
        [
            "field 'amount' = '12345.00' is not a valid DECIMAL(6,2)",
            "field 'flag' = 'yes' is not a valid TINYINT(1)",
            f"field 'at' = '1700000000000' is not a valid DATETIME(6){DECLARE_TIME_ENCODING}",
            f"field 'during' = '12345678' is not a valid TIME(6){DECLARE_TIME_ENCODING}",
            f"field 'blob' = 'not base64!' is not a valid VARBINARY(10){DECLARE_BINARY_ENCODING}",
            "field 'bits' = '1024' is not a valid BIT(10)",
            "field 'ratio' = '1e400x' is not a valid DOUBLE",
        ]
    )
    assert messages[5] == "field 'id' = 'six' is not a valid BIGINT"



def test_the_last_change_per_key_over_a_compound_key_and_partitions() -> None:
    sink = MySqlSinkConfig(
        type="mysql",
        table="t",
        primary_key=["a", "b"],
        columns=[{"name": "a", "type": "INT"}, {"name": "b", "type": "VARCHAR(5)"}, {"name": "v", "type": "INT"}],
    )
    records = [
        (b'{"a":1,"b":"x"}', env("c", None, {"a": 1, "b": "x", "v": 1}, 5)),
        (b'{"a":1,"b":"y"}', env("c", None, {"a": 1, "b": "y", "v": 2}, 5)),
        (b'{"a":1,"b":"x"}', env("u", None, {"a": 1, "b": "x", "v": 3}, 5)),  # same version: the later offset
        (b'{"a":1,"b":"y"}', env("u", None, {"a": 1, "b": "y", "v": 4}, 4)),
    ]  # older version: loses
    latest = latest_rows(project_rows(arrow_changes(records), sink), key_columns(sink))
    assert sorted(zip(latest.column("c_1").to_pylist(), latest.column("c_2").to_pylist(), strict=True)) == [
        ("x", "3"),
        ("y", "2"),
    ]


def test_a_delete_beats_its_tombstone_and_a_history_keeps_one_change_per_version() -> None:
    """Of a delete and its tombstone (one version) the delete is kept: its before image is what a soft
    delete and a history table write; a tombstone after an upsert still deletes it."""
    sink = MySqlSinkConfig(type="mysql", table="t", primary_key=["id"],
                           columns=[{"name": "id", "type": "INT"}, {"name": "v", "type": "INT"}])
    records = [
        (b'{"id":1}', env("c", None, {"id": 1, "v": 1}, 5)),
        (b'{"id":1}', env("u", {"id": 1, "v": 1}, {"id": 1, "v": 2}, 6)),
        (b'{"id":1}', env("d", {"id": 1, "v": 2}, None, 7)),
        (b'{"id":1}', None),  # its tombstone
        (b'{"id":2}', env("c", None, {"id": 2, "v": 9}, 5)),
        (b'{"id":2}', None),  # a tombstone after an upsert: it deletes it
    ]
    projected = project_rows(arrow_changes(records), sink)
    latest = latest_rows(projected, key_columns(sink))
    assert sorted(zip(latest.column("c_0").to_pylist(), latest.column("change_op").to_pylist(),
                      latest.column("c_1").to_pylist(), strict=True)) == [("1", "delete", "2"), ("2", "delete", None)]
    every = latest_rows(projected, key_columns(sink), every_version=True)
    assert sorted(zip(every.column("c_0").to_pylist(), every.column("change_op").to_pylist(),
                      every.column("c_1").to_pylist(), strict=True)) == [
        ("1", "delete", "2"), ("1", "upsert", "1"), ("1", "upsert", "2"), ("2", "delete", None)]


def test_a_tasks_changes_split_table_by_table_keep_every_row_in_log_order() -> None:
    changes = arrow_changes(RECORDS)
    tables = pa.array(["b", "a", "b", "c", "a", "b"][:changes.num_rows])
    tagged = changes.set_column(changes.schema.get_field_index("_table"), "_table", tables)
    split = {name: rows.column("offset").to_pylist() for name, rows in by_table(tagged)}
    offsets = tagged.column("offset").to_pylist()
    assert split == {t: [o for o, n in zip(offsets, tables.to_pylist(), strict=True) if n == t]
                     for t in sorted(set(tables.to_pylist()))}
