"""Every MySQL column type, as Debezium's MySQL connector writes it, through a real window into
MariaDB and Elasticsearch, compared value by value with the source rows.

The events are tests/fixtures/debezium/mysql_all_types.py (Debezium 3.7's documentation and
converters, byte for byte; its DOCS names the documented mapping of each column): three inserts, an
update of row 1 and a delete of row 3 with its tombstone, in the connector's default modes, in
time.precision.mode=connect, in the string/hex/precise modes, and without the schema wrapper (where
the declared columns and their ``encoding`` say how to read each value).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import requests

from cdcflow import cdcgen, runner
from cdcflow.connections import get_connection
from cdcflow.state import StateStore
from tests.fixtures.debezium import mysql_all_types as fx
from tests.helpers import bootstrap, make_pipeline, mysql_engine, unique

pytestmark = [pytest.mark.integration, pytest.mark.services]


@pytest.fixture(autouse=True)
def _column_wise(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixture's few events are decoded column-wise, as a large window's are: a batch of fewer than
    64 records would otherwise be decoded record by record (connectors/debezium/envelope.COLUMN_WISE_MIN),
    and that decode is compared with the column-wise one in tests/unit/connectors/debezium/test_columns.py."""
    monkeypatch.setenv("CDCFLOW_COLUMN_WISE_MIN", "1")

# the sink's declared columns: the source table's DDL (docs/types.md has the mapping table)
COLUMNS: list[dict[str, Any]] = [
    {"name": "id", "type": "INT"}, {"name": "c_tinyint", "type": "TINYINT"},
    {"name": "c_tinyint1", "type": "TINYINT(1)"}, {"name": "c_boolean", "type": "BOOLEAN"},
    {"name": "c_smallint", "type": "SMALLINT"}, {"name": "c_mediumint", "type": "MEDIUMINT"},
    {"name": "c_bigint", "type": "BIGINT"}, {"name": "c_bigint_unsigned", "type": "BIGINT UNSIGNED"},
    {"name": "c_float", "type": "FLOAT"}, {"name": "c_double", "type": "DOUBLE"},
    {"name": "c_decimal", "type": "DECIMAL(10,2)"}, {"name": "c_char", "type": "CHAR(3)"},
    {"name": "c_varchar", "type": "VARCHAR(255)"}, {"name": "c_text", "type": "TEXT"},
    {"name": "c_binary", "type": "BINARY(4)"}, {"name": "c_varbinary", "type": "VARBINARY(16)"},
    {"name": "c_blob", "type": "BLOB"}, {"name": "c_date", "type": "DATE"},
    {"name": "c_time", "type": "TIME"}, {"name": "c_time3", "type": "TIME(3)"}, {"name": "c_time6", "type": "TIME(6)"},
    {"name": "c_datetime", "type": "DATETIME"}, {"name": "c_datetime3", "type": "DATETIME(3)"},
    {"name": "c_datetime6", "type": "DATETIME(6)"}, {"name": "c_timestamp", "type": "TIMESTAMP", "nullable": False},
    {"name": "c_timestamp3", "type": "TIMESTAMP(3)"}, {"name": "c_year", "type": "YEAR"},
    {"name": "c_enum", "type": "ENUM('small','medium','large')"}, {"name": "c_set", "type": "SET('red','green','blue')"},
    {"name": "c_bit1", "type": "BIT(1)"}, {"name": "c_bit10", "type": "BIT(10)"}, {"name": "c_json", "type": "JSON"},
    {"name": "c_point", "type": "POINT"},
]
# without schemas, what the columns must declare (the connector's default modes)
SCHEMALESS_ENCODINGS = {"c_decimal": "base64", "c_time": "us", "c_time3": "us", "c_time6": "us", "c_datetime": "ms",
                        "c_datetime3": "ms", "c_datetime6": "us"}
ES_MAPPING = {"properties": {"c_bigint_unsigned": {"type": "unsigned_long"}, "c_decimal": {"type": "keyword"},
                             "c_time": {"type": "keyword"}, "c_time3": {"type": "keyword"},
                             "c_time6": {"type": "keyword"}}}


def final_rows(time_mode: str) -> dict[int, dict[str, Any]]:
    """The source table after the fixture's changes; in time.precision.mode=connect, times and
    datetimes reach the topic in milliseconds (Kafka Connect's Time and Timestamp), so that is all
    a sink can hold."""
    rows = {r["id"]: dict(r) for r in fx.ROWS}
    rows[1].update(fx.UPDATE_1)
    del rows[3]
    if time_mode == "connect":
        for row in rows.values():
            for name in ("c_time6", "c_datetime6"):
                if row[name] is not None:
                    micros = row[name].microseconds if name == "c_time6" else row[name].microsecond
                    row[name] -= dt.timedelta(microseconds=micros % 1000)
    return rows


def mysql_value(name: str, value: Any) -> Any:
    """What MariaDB gives back for the source value (pymysql's types)."""
    if value is None:
        return None
    if name == "c_timestamp" or name == "c_timestamp3":
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if name in ("c_boolean", "c_bit1"):
        return int(value)
    if name == "c_json":
        return json.loads(value)
    if name == "c_point":
        return (value["x"], value["y"], value["srid"])
    return value


def read_mysql(table: str) -> dict[int, dict[str, Any]]:
    names = [c["name"] for c in COLUMNS]
    select = ", ".join(f"`{n}`" if n != "c_point" else "ST_X(c_point), ST_Y(c_point), ST_SRID(c_point)" for n in names)
    out: dict[int, dict[str, Any]] = {}
    with mysql_engine().connect() as conn:
        conn.exec_driver_sql("SET time_zone = '+00:00'")
        for r in conn.exec_driver_sql(f"SELECT {select} FROM `{table}` ORDER BY id"):
            values = list(r)
            point = tuple(values[-3:]) if values[-3] is not None else None
            row = dict(zip(names[:-1], values[:-3], strict=True))
            row["c_point"] = point
            for bits in ("c_bit1", "c_bit10"):  # BIT(n) reads back as bytes (a table from the schema: BIT(1) is TINYINT(1))
                if isinstance(row[bits], bytes):
                    row[bits] = int.from_bytes(row[bits], "big")
            row["c_json"] = json.loads(row["c_json"]) if row["c_json"] is not None else None
            if isinstance(row["c_set"], set):
                row["c_set"] = ",".join(m for m in ("red", "green", "blue") if m in row["c_set"])
            out[row["id"]] = row
    return out


def doc_value(name: str, value: Any, modes: dict[str, Any]) -> Any:
    """The JSON value Elasticsearch keeps for the source value (_source as sent). Where the
    connector writes a value as a string (decimal.handling.mode=string, a ZonedTimestamp without the
    schema to say so), the document keeps the string."""
    if value is None:
        return None
    if name == "c_decimal" and modes.get("decimal_mode") == "string":
        return fx._decimal_value(value, 2, "string")
    if name.startswith("c_timestamp") and modes.get("schemas") is False:
        return fx._zoned_timestamp(value, 3 if name == "c_timestamp3" else 0)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.timedelta):
        total = value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds
        return f"{total // 3_600_000_000:02d}:{total // 60_000_000 % 60:02d}:{total // 1_000_000 % 60:02d}." \
               f"{total % 1_000_000:06d}"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
        return value.isoformat(timespec="microseconds")
    if isinstance(value, dt.date):
        return value.isoformat()
    if name == "c_json":
        return json.loads(value)
    if name == "c_point":
        return {"x": Decimal(str(value["x"])), "y": Decimal(str(value["y"])), "srid": value["srid"] or None}
    if isinstance(value, float):
        return Decimal(str(value))
    return value


def read_es(index: str) -> dict[int, dict[str, Any]]:
    url = get_connection("cdcflow_elasticsearch").http_url()
    requests.post(f"{url}/{index}/_refresh", timeout=30).raise_for_status()
    hits = json.loads(requests.get(f"{url}/{index}/_search?size=100", timeout=30).text,
                      parse_float=Decimal)["hits"]["hits"]
    docs = {}
    for h in hits:
        doc = h["_source"]
        doc["c_json"] = json.loads(doc["c_json"]) if doc.get("c_json") is not None else None
        if doc.get("c_point") is not None:
            doc["c_point"] = {k: doc["c_point"][k] for k in ("x", "y", "srid")}
        docs[doc["id"]] = doc
    return docs


def run(config_dir: Path, store: StateStore, spark: Any, encodings: dict[str, str] | None = None,
        mapping: dict[str, Any] | None = ES_MAPPING, es: bool = True, **modes: Any) -> tuple[str, str, dict[str, Any]]:
    """One window of the fixture into MySQL and (``es``) Elasticsearch. Without Elasticsearch no sink
    needs documents, and the window decodes column-wise (connectors/debezium/columns.py)."""
    table, index = unique("all_types"), unique("all-types").replace("_", "-")
    columns = [{**c, **({"encoding": encodings[c["name"]]} if encodings and c["name"] in encodings else {})}
               for c in COLUMNS]
    sinks: list[dict[str, Any]] = [
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": table, "create_table": True,
         "primary_key": ["id"], "columns": columns}]
    if es:
        sinks.append({"type": "elasticsearch", "name": "docs", "conn_id": "cdcflow_elasticsearch", "index": index,
                      "id_fields": ["id"], "behavior_on_null_values": "delete", **({"mapping": mapping} if mapping else {})})
    cfg = make_pipeline(config_dir, sinks=sinks)
    events = [cdcgen.Event(k, v) for k, v in fx.events(**modes)]
    cdcgen.produce(bootstrap(), cfg.source.topics[0], events, partitions=1)
    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)
    return table, index, stats


def check(table: str, index: str | None, stats: dict[str, Any], time_mode: str, **modes: Any) -> None:
    assert stats["dead_lettered"] == 0, stats
    expected = final_rows(time_mode)
    got = read_mysql(table)
    assert sorted(got) == sorted(expected)
    for key, row in expected.items():
        for name, value in row.items():
            assert got[key][name] == mysql_value(name, value), f"MySQL row {key} column {name} ({fx.DOCS[name]})"
    if index is None:
        return
    docs = read_es(index)
    assert sorted(docs) == sorted(expected)
    for key, row in expected.items():
        for name, value in row.items():
            assert docs[key].get(name) == doc_value(name, value, modes), f"ES doc {key} field {name} ({fx.DOCS[name]})"


@pytest.mark.parametrize("time_mode", ["adaptive_time_microseconds", "connect"])
def test_every_type_in_the_connectors_default_modes(config_dir: Path, store: StateStore, spark: Any,
                                                    time_mode: str) -> None:
    table, index, stats = run(config_dir, store, spark, time_precision_mode=time_mode)
    check(table, index, stats, time_mode)


@pytest.mark.parametrize(("decimal_mode", "binary_mode", "bigint_unsigned_mode"), [
    ("string", "hex", "precise"), ("double", "base64", "long")])
def test_every_type_in_the_other_decimal_binary_and_unsigned_modes(config_dir: Path, store: StateStore, spark: Any,
                                                                   decimal_mode: str, binary_mode: str,
                                                                   bigint_unsigned_mode: str) -> None:
    binary = {"c_binary": binary_mode, "c_varbinary": binary_mode, "c_blob": binary_mode}
    table, index, stats = run(config_dir, store, spark, encodings=binary, decimal_mode=decimal_mode,
                              binary_mode=binary_mode, bigint_unsigned_mode=bigint_unsigned_mode)
    check(table, index, stats, "adaptive_time_microseconds", decimal_mode=decimal_mode)


def test_every_type_without_the_schema_wrapper_read_by_the_declared_columns(config_dir: Path, store: StateStore,
                                                                            spark: Any) -> None:
    table, index, stats = run(config_dir, store, spark, encodings=SCHEMALESS_ENCODINGS, schemas=False)
    check(table, index, stats, "adaptive_time_microseconds", schemas=False)


@pytest.mark.parametrize("schemas", [True, False])
def test_every_type_into_mysql_alone_decoded_column_wise(config_dir: Path, store: StateStore, spark: Any,
                                                        schemas: bool) -> None:
    table, _index, stats = run(config_dir, store, spark, encodings=None if schemas else SCHEMALESS_ENCODINGS,
                               es=False, schemas=schemas)
    check(table, None, stats, "adaptive_time_microseconds", schemas=schemas)


# the index mapping an index without a declared mapping gets from the Connect schema (docs/types.md)
DERIVED_ES = {"c_tinyint": {"type": "byte"}, "c_boolean": {"type": "boolean"}, "c_bigint_unsigned": {"type": "unsigned_long"},
              "c_decimal": {"type": "scaled_float", "scaling_factor": 100.0}, "c_binary": {"type": "binary"},
              "c_date": {"type": "date"}, "c_datetime6": {"type": "date"},  # ES's default format, as declared
              "c_timestamp3": {"type": "date"},
              "c_time6": {"type": "keyword"}, "c_year": {"type": "short"}, "c_enum": {"type": "keyword"},
              "c_bit10": {"type": "long"}, "c_json": {"type": "text"}}


def test_an_index_without_a_mapping_gets_one_from_the_schema(config_dir: Path, store: StateStore, spark: Any) -> None:
    table, index, stats = run(config_dir, store, spark, mapping=None)
    check(table, index, stats, "adaptive_time_microseconds")
    url = get_connection("cdcflow_elasticsearch").http_url()
    properties = requests.get(f"{url}/{index}/_mapping", timeout=30).json()[index]["mappings"]["properties"]
    assert {k: properties[k] for k in DERIVED_ES} == DERIVED_ES


# the source table's columns as MySQL 8's SHOW CREATE TABLE writes them (tests/fixtures/debezium/mysql_all_types.DDL),
# some with attributes added: a user copies these into the sink's columns (issue 42, part 5)
SHOWN = {
    "id": "int NOT NULL", "c_tinyint": "tinyint DEFAULT NULL", "c_tinyint1": "tinyint(1) DEFAULT NULL",
    "c_boolean": "tinyint(1) DEFAULT NULL", "c_smallint": "smallint DEFAULT NULL", "c_mediumint": "mediumint DEFAULT NULL",
    "c_bigint": "bigint DEFAULT NULL", "c_bigint_unsigned": "bigint unsigned DEFAULT NULL",
    "c_float": "float DEFAULT NULL", "c_double": "double DEFAULT NULL", "c_decimal": "decimal(10,2) DEFAULT '0.00'",
    "c_char": "char(3) DEFAULT NULL",
    "c_varchar": "varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL COMMENT 'Grüße'",
    "c_text": "text COMMENT 'it''s 50% off'", "c_binary": "binary(4) DEFAULT NULL",
    "c_varbinary": "varbinary(16) DEFAULT NULL", "c_blob": "blob", "c_date": "date DEFAULT NULL",
    "c_time": "time DEFAULT NULL", "c_time3": "time(3) DEFAULT NULL", "c_time6": "time(6) DEFAULT NULL",
    "c_datetime": "datetime DEFAULT NULL",
    "c_datetime3": "datetime(3) DEFAULT NULL ON UPDATE CURRENT_TIMESTAMP(3)", "c_datetime6": "datetime(6) DEFAULT NULL",
    "c_timestamp": "timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP", "c_timestamp3": "timestamp(3) NULL DEFAULT NULL",
    "c_year": "year DEFAULT NULL", "c_enum": "enum('small','medium','large') DEFAULT 'small'",
    "c_set": "set('red','green','blue') DEFAULT NULL", "c_bit1": "bit(1) DEFAULT b'0'", "c_bit10": "bit(10) DEFAULT NULL",
    "c_json": "json DEFAULT NULL", "c_point": "point DEFAULT NULL",
}


def test_every_type_into_columns_declared_as_show_create_table_writes_them(config_dir: Path, store: StateStore,
                                                                          spark: Any) -> None:
    """Declared columns copied from the source's SHOW CREATE TABLE: the table is created with their NOT
    NULL, DEFAULT, ON UPDATE, COMMENT, CHARACTER SET and COLLATE (read back from MariaDB's
    information_schema and SHOW CREATE TABLE), and every value is read by the type alone and reads back
    equal (issue 42, part 5)."""
    table = unique("shown")
    cfg = make_pipeline(config_dir, sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": table, "create_table": True,
         "primary_key": ["id"], "columns": [{"name": n, "type": t} for n, t in SHOWN.items()]}])
    cdcgen.produce(bootstrap(), cfg.source.topics[0], [cdcgen.Event(k, v) for k, v in fx.events()], partitions=1)
    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)
    check(table, None, stats, "adaptive_time_microseconds")

    with mysql_engine().connect() as conn:
        columns = {r[0]: r[1:] for r in conn.exec_driver_sql(
            "SELECT COLUMN_NAME, IS_NULLABLE, COLUMN_DEFAULT, EXTRA, COLUMN_COMMENT, CHARACTER_SET_NAME, COLLATION_NAME "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s", (table,))}
        shown = conn.exec_driver_sql(f"SHOW CREATE TABLE `{table}`").one()[1]
    assert columns["id"][0] == "NO" and columns["c_timestamp"][0] == "NO" and columns["c_tinyint"][0] == "YES"
    assert columns["c_timestamp"][1].lower() == "current_timestamp()"  # MariaDB's form of CURRENT_TIMESTAMP
    assert (columns["c_decimal"][1], columns["c_enum"][1], columns["c_bit1"][1]) == ("0.00", "'small'", "b'0'")
    assert columns["c_tinyint"][1] == "NULL"
    assert columns["c_datetime3"][2].lower() == "on update current_timestamp(3)"
    assert (columns["c_varchar"][3], columns["c_text"][3]) == ("Grüße", "it's 50% off")
    assert columns["c_varchar"][4:] == ("utf8mb4", "utf8mb4_bin")
    assert "`c_varchar` varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL COMMENT 'Grüße'" in shown
