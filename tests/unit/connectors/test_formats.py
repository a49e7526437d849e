"""The four source formats decode the same changes into the same change model
(connectors/changes.py); the per-key reduction keeps the order of the changes of one record
(row_index) in Arrow (spark_jobs/project/tables.latest_rows);
``source.format`` is validated with the pipeline."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from cdcflow.config import MySqlSinkConfig, parse_pipeline
from cdcflow.errors import ConfigError
from connectors.formats import decoder
from spark_jobs.project.tables import key_columns, latest_rows, project_rows
from tests.fixtures import orders as o
from tests.fixtures.canal import orders as canal
from tests.fixtures.debezium import orders as debezium
from tests.fixtures.goldengate import orders as goldengate
from tests.fixtures.maxwell import orders as maxwell
from tests.unit.decoding import decode, raw_batch

GG_COLUMNS = [{**c, "field": c["name"].upper()} for c in o.SINK_COLUMNS]
SINK = MySqlSinkConfig(type="mysql", table="orders", primary_key=["id"], columns=o.SINK_COLUMNS)


def final(rows: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], Any]]:
    """Per key, the image texts and the document of the table the changes leave (in log order)."""
    table: dict[str, tuple[dict[str, Any], Any]] = {}
    for r in rows:
        image = {k.lower(): v for k, v in (r["image"] or {}).items()}
        if r["change_op"] == "upsert":
            doc = json.loads(r["image_json"], parse_float=Decimal)
            table[image["id"]] = (image, {k.lower(): v for k, v in doc.items()})
        elif r["change_op"] == "delete":
            table.pop(image["id"], None)
    return table


def test_the_same_changes_in_all_four_formats_leave_the_same_rows_and_documents() -> None:
    tables = {
        "debezium": final(decode("debezium", debezium.events(), o.SINK_COLUMNS)),
        "goldengate": final(decode("goldengate", goldengate.events(), GG_COLUMNS)),
        "canal": final(decode("canal", canal.events())),
        "maxwell": final(decode("maxwell", maxwell.events(), o.SINK_COLUMNS)),
    }
    assert sorted(tables["debezium"]) == ["3", "4"]
    assert tables["debezium"]["3"][0] == {"id": "3", "customer": "x y", "amount": "19.90", "qty": "0",
                                          "created": "1969-12-31 23:59:59.999999", "ship_date": "1960-01-01",
                                          "paid": "0", "note": "now set"}
    assert tables["debezium"]["4"][1] == {"id": 4, "customer": "plain", "amount": Decimal("-12345.67"),
                                          "qty": 9223372036854775808, "created": "2000-01-01T00:00:00.000001",
                                          "ship_date": "2000-01-01", "paid": 1, "note": "ünïcödé"}
    for name in ("goldengate", "canal", "maxwell"):
        assert tables[name] == tables["debezium"], name


# UPDATE t SET id = id + 1 WHERE id IN (1, 2) ORDER BY id DESC: one message, 2 -> 3 then 1 -> 2. The key
# 2 is deleted (row 0) and written again (row 3) by the same record, at the same version.
MOVE = [(None, canal.dumps({
    "data": [{"id": "3", "customer": "b"}, {"id": "2", "customer": "a"}], "database": "db", "es": 5000, "id": 1,
    "isDdl": False, "mysqlType": {"id": "int(11)", "customer": "varchar(64)"}, "old": [{"id": "2"}, {"id": "1"}],
    "pkNames": ["id"], "sql": "", "sqlType": {"id": 4, "customer": 12}, "table": "t", "ts": 5001, "type": "UPDATE"}))]
MOVE_SINK = MySqlSinkConfig(type="mysql", table="t", primary_key=["id"], columns=[
    {"name": "id", "type": "INT"}, {"name": "customer", "type": "VARCHAR(64)"}])



def test_the_changes_of_one_record_keep_their_order_in_the_arrow_reduction() -> None:
    batch = decoder("canal", "source_ts_ms", {}, False).decode_batch(raw_batch(MOVE))
    latest = latest_rows(project_rows(pa.Table.from_batches([batch]), MOVE_SINK), key_columns(MOVE_SINK)).to_pylist()
    assert sorted((r["c_0"], r["change_op"], r["c_1"], r["row_index"]) for r in latest) == [
        ("1", "delete", "a", 2), ("2", "upsert", "a", 3), ("3", "upsert", "b", 1)]


BASE = """
name: p
source: {topics: [t], format: %s}
versioning: source_ts_ms
sinks:
  - {type: mysql, table: t, create_table: true%s}
"""
COLUMNS = ", primary_key: [id], columns: [{name: id, type: INT}]"


def test_source_format_is_checked_with_the_pipeline() -> None:
    assert parse_pipeline(BASE % ("canal", "")).source.format == "canal"  # tables from mysqlType
    assert parse_pipeline(BASE % ("maxwell", COLUMNS)).source.format == "maxwell"
    assert parse_pipeline("name: p\nsource: {topics: [t]}\nsinks: [{type: elasticsearch, index: i, id_fields: [id]}]"
                          ).source.format == "debezium"
    with pytest.raises(ConfigError, match="need columns: GoldenGate JSON formatter operations carry no column types"):
        parse_pipeline(BASE % ("goldengate", ""))
    with pytest.raises(ConfigError, match="source.format: expected input should be 'debezium', 'goldengate', "
                                          "'canal' or 'maxwell'; got 'ogg'"):
        parse_pipeline(BASE % ("ogg", COLUMNS))
    with_chain = parse_pipeline(BASE % ("maxwell", COLUMNS) + "transforms: [{type: Cast, spec: {id: int64}}]\n")
    assert with_chain.versioning == "source_ts_ms"  # Maxwell's ts versions its rows, with transforms too
    with pytest.raises(ConfigError, match="timestamp source_ts_ms reads Debezium's source.ts_ms"):
        parse_pipeline((BASE % ("canal", "")).replace("format: canal", "format: canal, timestamp: source_ts_ms"))


def test_extract_new_record_state_on_a_canal_topic_is_refused_saying_why() -> None:
    """Canal's flat messages are read into rows by their decoder, which the chain's steps then apply to:
    there is no Debezium envelope to unwrap."""
    text = BASE % ("canal", "") + ("transforms:\n  - {type: ReplaceField, renames: {id: order_id}}\n"
                                   "  - {type: ExtractNewRecordState}\n")
    with pytest.raises(ConfigError) as exc:
        parse_pipeline(text, "p.yaml")
    message = str(exc.value)
    assert ("transforms.1.type: source.format canal: the format's messages are already decoded into rows, and "
            "ExtractNewRecordState unwraps Debezium's envelopes: remove it (the steps apply to the rows); got "
            "'ExtractNewRecordState'") in message, message
    assert "transforms.0" not in message  # a step on the value's fields is no envelope problem here
    served = parse_pipeline(text.replace("  - {type: ExtractNewRecordState}\n", ""))
    assert served.versioning == "source_ts_ms" and [t.type for t in served.transforms] == ["ReplaceField"]
    with pytest.raises(ConfigError, match="source.value_converter: source.format canal decodes each message, a JSON "
                                          "object, before the transforms: use value_converter json"):
        parse_pipeline(text.replace("  - {type: ExtractNewRecordState}\n", "").replace(
            "format: canal", "format: canal, value_converter: string"))


def test_a_debezium_truncate_event_is_a_truncate_change_of_its_table() -> None:
    """Debezium's MySQL connector writes a TRUNCATE as an event with op "t", a source block and no
    row images, and no key (mysql.adoc, "truncate events")."""
    event = {"source": {"version": "2.7.0.Final", "connector": "mysql", "name": "mysql-server-1",
                        "ts_ms": 1_724_000_000_000, "snapshot": "false", "db": "inventory", "table": "customers",
                        "server_id": 223344, "gtid": None, "file": "mysql-bin.000003", "pos": 484, "row": 0,
                        "thread": None, "query": None},
             "op": "t", "ts_ms": 1_724_000_000_123, "transaction": None}
    [row] = decode("debezium", [(None, json.dumps(event).encode())])
    assert (row["change_op"], row["source_db"], row["source_table"], row["error_stage"]) == (
        "truncate", "inventory", "customers", None)
    assert row["version"] >> 20 == 1_724_000_000_000


def test_truncate_apply_refuses_what_it_does_not_cover() -> None:
    base = "name: p\nsource: {topics: [t]}\ntruncate: apply\nsinks:\n"
    assert parse_pipeline(base + "  - {type: elasticsearch, name: e, index: i, id_fields: [id]}\n").truncate == "apply"
    with pytest.raises(ConfigError, match="sink 'e' has key_ignore: true"):
        parse_pipeline(base + "  - {type: elasticsearch, name: e, index: i, key_ignore: true}\n")
    with pytest.raises(ConfigError, match="truncate: apply is not supported with transforms yet"):
        parse_pipeline(base + "  - {type: mysql, name: m, table: t, create_table: true}\n"
                       "transforms: [{type: ExtractNewRecordState}]\n")
