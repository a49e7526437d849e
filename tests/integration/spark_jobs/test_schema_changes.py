"""Schema changes at the source (issue 23): a table made from the record schema meets a later schema
in a real window, under each ``schema_changes`` policy.

The events are Debezium's MySQL connector's (tests/fixtures/debezium/mysql_all_types.py); a later
schema is the connector's event with its Connect schema edited as the connector writes it after an
ALTER TABLE at the source (the field's type, parameters or optional flag, a field added or gone)."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.state import StateStore
from cdcflow.window import clients
from connectors.mysql.evolution import SchemaChangeRefused
from tests.fixtures.debezium import mysql_all_types as fx
from tests.helpers import bootstrap, make_pipeline, mysql_engine, run_cli_window, unique
from tests.integration.connectors.debezium.test_tables import edited

pytestmark = [pytest.mark.integration, pytest.mark.services]


def columns(table: str) -> dict[str, tuple[str, str]]:
    with mysql_engine().connect() as conn:
        return {r[0]: (r[1], r[2]) for r in conn.exec_driver_sql(
            "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = %s", (table,))}


def later(schema: Callable[[dict[str, Any]], None], rows: Callable[[dict[str, Any], dict[str, Any]], None]) -> cdcgen.Event:
    """The fixture's update of row 1, ten minutes later, with ``schema(field schemas by name)``
    applied to both row schemas (before and after share one) and ``rows(before, after)`` to the images."""
    key, value = edited(fx.events()[3], 600)
    doc = json.loads(value)
    for part in doc["schema"]["fields"][:2]:
        fields = {f["field"]: f for f in part["fields"]}
        schema(fields)
        part["fields"] = list(fields.values())
    rows(doc["payload"]["before"], doc["payload"]["after"])
    return cdcgen.Event(key, json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode())


def _changed_at_the_source(fields: dict[str, Any]) -> None:
    """ADD c_note; MODIFY c_mediumint BIGINT, c_decimal DECIMAL(12,2), c_datetime3 DATETIME(6), c_enum with
    'xlarge', c_timestamp NULL; RENAME c_text TO c_body; DROP c_varchar."""
    fields["c_note"] = {"type": "string", "optional": True, "field": "c_note"}
    fields["c_mediumint"]["type"] = "int64"
    fields["c_decimal"]["parameters"]["connect.decimal.precision"] = "12"
    fields["c_datetime3"]["name"] = "io.debezium.time.MicroTimestamp"
    fields["c_enum"]["parameters"]["allowed"] += ",xlarge"
    fields["c_timestamp"]["optional"] = True
    fields["c_body"] = {**fields.pop("c_text"), "field": "c_body"}
    del fields["c_varchar"]


def _changed_rows(before: dict[str, Any], after: dict[str, Any]) -> None:
    for image in (before, after):
        image["c_note"] = None
        image["c_datetime3"] *= 1000  # µs now
        image["c_body"] = image.pop("c_text")
        del image["c_varchar"]
    after.update(c_note="added at the source", c_mediumint=8_388_608_000, c_enum="xlarge")


def _two_windows(config_dir: Path, store: StateStore, spark: Any, policy: str,
                 second: cdcgen.Event) -> tuple[Any, str, Callable[[], dict[str, Any]]]:
    cfg = make_pipeline(config_dir, schema_changes=policy, sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": unique("schema"), "create_table": True}])
    topic, table = cfg.source.topics[0], cfg.sinks[0].table
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()[:3]], partitions=1)
    runner.run_window(cfg, "run-1", store=store, spark=spark)
    cdcgen.produce(bootstrap(), topic, [second], partitions=1, create=False)
    return cfg, table, lambda: runner.run_window(cfg, "run-2", store=store, spark=spark)


def test_lenient_adds_widens_extends_relaxes_and_keeps_what_the_source_dropped(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    _cfg, table, run = _two_windows(config_dir, store, spark, "lenient", later(_changed_at_the_source, _changed_rows))
    before = columns(table)
    stats = run()

    after = columns(table)
    assert stats["dead_lettered"] == 0, stats
    assert after["c_note"] == ("longtext", "YES") and after["c_body"] == ("longtext", "YES")  # added; a rename adds
    assert after["c_mediumint"][0] == "bigint(20)" and after["c_decimal"][0] == "decimal(12,2)"
    assert after["c_datetime3"][0] == "datetime(6)" and after["c_enum"][0] == "enum('small','medium','large','xlarge')"
    assert before["c_timestamp"][1] == "NO" and after["c_timestamp"][1] == "YES"
    assert after["c_varchar"] == before["c_varchar"] and after["c_text"] == before["c_text"]  # kept, never dropped
    with mysql_engine().connect() as conn:
        row = conn.exec_driver_sql(f"SELECT c_note, c_mediumint, c_datetime3, c_enum, c_body, c_text FROM `{table}` "
                                   "WHERE id = 1").one()
    assert tuple(row) == ("added at the source", 8_388_608_000, fx.ROWS[0]["c_datetime3"], "xlarge",
                          fx.UPDATE_1.get("c_text", fx.ROWS[0]["c_text"]), fx.ROWS[0]["c_text"])
    done = {(c["column"], c["change"]) for c in stats["schema_changes"] if c["applied"]}
    assert done == {("c_note", "add"), ("c_body", "add"), ("c_mediumint", "widen"), ("c_decimal", "widen"),
                    ("c_datetime3", "widen"), ("c_enum", "extend"), ("c_timestamp", "relax")}
    assert all(c["ddl"].startswith(f"ALTER TABLE `{table}`") for c in stats["schema_changes"] if c["applied"])


def _narrowed(fields: dict[str, Any]) -> None:
    """MODIFY c_bigint INT at the source (its values now fit an INT)."""
    fields["c_bigint"]["type"] = "int32"


def _narrowed_rows(before: dict[str, Any], after: dict[str, Any]) -> None:
    for image in (before, after):
        image["c_bigint"] = 7


def test_a_narrowing_change_stops_the_window_before_any_write(config_dir: Path, store: StateStore,
                                                                spark: Any) -> None:
    cfg, table, run = _two_windows(config_dir, store, spark, "lenient", later(_narrowed, _narrowed_rows))
    offsets = store.offsets.load(cfg.name)
    with pytest.raises(SchemaChangeRefused, match=rf"schema_changes: lenient never applies narrow changes.*table "
                                                  rf"'{table}' column 'c_bigint': bigint\(20\) -> INT: narrower"):
        run()
    assert store.offsets.load(cfg.name) == offsets  # no offset moved
    assert columns(table)["c_bigint"][0] == "bigint(20)"


def _converted(fields: dict[str, Any]) -> None:
    """MODIFY c_mediumint VARCHAR(32) at the source."""
    fields["c_mediumint"]["type"] = "string"


def _converted_rows(before: dict[str, Any], after: dict[str, Any]) -> None:
    for image in (before, after):
        image["c_mediumint"] = str(image["c_mediumint"])
    after["c_mediumint"] = "now text"


@pytest.mark.parametrize("policy", ["evolve", "lenient", "fail", "ignore"])
def test_a_type_conversion_under_each_policy(config_dir: Path, store: StateStore, spark: Any, policy: str) -> None:
    _cfg, table, run = _two_windows(config_dir, store, spark, policy, later(_converted, _converted_rows))
    if policy in ("lenient", "fail"):
        with pytest.raises(SchemaChangeRefused, match=rf"table '{table}' column 'c_mediumint': int\(11\) -> LONGTEXT"):
            run()
        assert columns(table)["c_mediumint"][0] == "int(11)"
        return
    stats = run()
    with mysql_engine().connect() as conn:
        value = conn.exec_driver_sql(f"SELECT c_mediumint FROM `{table}` WHERE id = 1").scalar()
    if policy == "evolve":
        assert columns(table)["c_mediumint"][0] == "longtext" and value == "now text"
        assert stats["dead_lettered"] == 0
    else:  # ignore: no DDL; the value does not fit the column as it is, so its row goes to the DLQ
        assert columns(table)["c_mediumint"][0] == "int(11)" and stats["dead_lettered"] == 1
        assert [(c["column"], c["change"], c["applied"]) for c in stats["schema_changes"]] == [
            ("c_mediumint", "convert", False)]


def test_ignore_writes_the_columns_the_table_has(config_dir: Path, store: StateStore, spark: Any) -> None:
    def added(fields: dict[str, Any]) -> None:
        fields["c_note"] = {"type": "string", "optional": True, "field": "c_note"}

    def rows(before: dict[str, Any], after: dict[str, Any]) -> None:
        before["c_note"], after["c_note"] = None, "not written"
        after["c_enum"] = "small"

    _cfg, table, run = _two_windows(config_dir, store, spark, "ignore", later(added, rows))
    stats = run()
    assert "c_note" not in columns(table) and stats["dead_lettered"] == 0
    with mysql_engine().connect() as conn:
        assert conn.exec_driver_sql(f"SELECT c_enum FROM `{table}` WHERE id = 1").scalar() == "small"
    assert [(c["column"], c["change"], c["applied"]) for c in stats["schema_changes"]] == [("c_note", "add", False)]


@pytest.mark.parametrize("point", ["during_ddl", "after_ddl"])
def test_a_window_killed_during_or_after_its_ddl_recovers(config_dir: Path, store: StateStore, spark: Any,
                                                           point: str) -> None:
    """SIGKILL after the first of the window's DDL statements (MySQL's DDL is not transactional), or
    after all of them and before any row: the retry finds what is left to do, and writes the window."""
    cfg, table, _run = _two_windows(config_dir, store, spark, "lenient", later(_changed_at_the_source, _changed_rows))
    offsets = clients.offset_store(cfg).offsets.load(cfg.name)
    died = run_cli_window(config_dir, cfg.name, "run-2", point)
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    assert clients.offset_store(cfg).offsets.load(cfg.name) == offsets  # no offset moved
    half = columns(table)
    changed = ["c_note" in half, "c_body" in half, half["c_mediumint"][0] == "bigint(20)",
               half["c_decimal"][0] == "decimal(12,2)", half["c_timestamp"][1] == "YES"]
    assert sum(changed) == (1 if point == "during_ddl" else 5)
    with mysql_engine().connect() as conn:  # no row of the window written
        assert conn.exec_driver_sql(f"SELECT c_enum FROM `{table}` WHERE id = 1").scalar() == fx.ROWS[0]["c_enum"]

    retry = run_cli_window(config_dir, cfg.name, "run-2")
    assert retry.returncode == 0, retry.stderr[-2000:]
    after = columns(table)
    assert after["c_note"][0] == "longtext" and after["c_mediumint"][0] == "bigint(20)"
    assert after["c_enum"][0] == "enum('small','medium','large','xlarge')"
    with mysql_engine().connect() as conn:
        assert tuple(conn.exec_driver_sql(f"SELECT c_note, c_enum FROM `{table}` WHERE id = 1").one()) == (
            "added at the source", "xlarge")
    window = clients.offset_store(cfg).ledger.get_window(cfg.name, "run-2")
    assert window is not None and window.status == "committed"


def test_two_windows_never_run_the_same_ddl() -> None:
    """Two pipelines' windows meet the same change of one table at once: under the schema-change lock
    the second reads the table again and finds nothing left to do."""
    from concurrent.futures import ThreadPoolExecutor

    from cdcflow.config import MySqlSinkConfig
    from cdcflow.connections import get_connection
    from connectors.mysql.sink import prepare_derived

    url = get_connection("cdcflow_mysql").sqlalchemy_url()
    table = unique("shared")
    base = [{"name": "id", "type": "INT"}, {"name": "name", "type": "VARCHAR(32)"}]
    first = MySqlSinkConfig(type="mysql", name="m", table=table, create_table=True, primary_key=["id"], columns=base)
    prepare_derived(url, [(first, first)], "lenient")
    later_cfg = first.model_copy(update={"columns": [*first.columns, *MySqlSinkConfig(
        type="mysql", name="m", table=table, primary_key=["id"], columns=[*base, {"name": "note", "type": "LONGTEXT"},
                                                                         {"name": "n", "type": "BIGINT"}]).columns[2:]]})
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _i: prepare_derived(url, [(first, later_cfg)], "lenient"), range(2)))
    ran = sorted(c["column"] for _configs, changes in results for c in changes if c["applied"])
    assert ran == ["n", "note"]  # each DDL once, by one of the two
    assert columns(table)["note"][0] == "longtext" and columns(table)["n"][0] == "bigint(20)"


def _priced(fields: dict[str, Any]) -> None:
    """ALTER TABLE ... ADD COLUMN c_price DECIMAL(12,2): the field as the connector describes it."""
    fields["c_price"] = {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
                         "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "12"},
                         "field": "c_price"}


def _price(before: dict[str, Any], after: dict[str, Any]) -> None:
    from decimal import Decimal

    before["c_price"] = None
    after["c_price"] = fx._decimal_value(Decimal("12.50"), 2, "precise")  # noqa: SLF001 - the connector's bytes


def _index_window(config_dir: Path, store: StateStore, spark: Any, policy: str) -> tuple[Any, str, str, dict[str, Any]]:
    """An index made from the record schema, then a window whose record schema has c_price:
    (config, index, Elasticsearch's URL, the second window's stats)."""
    from cdcflow.connections import get_connection

    index = unique("schema-es").replace("_", "-")
    cfg = make_pipeline(config_dir, schema_changes=policy, sinks=[
        {"type": "elasticsearch", "name": "docs", "conn_id": "cdcflow_elasticsearch", "index": index,
         "id_fields": ["id"]}])
    topic = cfg.source.topics[0]
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()[:3]], partitions=1)
    runner.run_window(cfg, "run-1", store=store, spark=spark)
    cdcgen.produce(bootstrap(), topic, [later(_priced, _price)], partitions=1, create=False)
    stats = runner.run_window(cfg, "run-2", store=store, spark=spark)
    return cfg, index, get_connection("cdcflow_elasticsearch").http_url(), stats


def test_an_index_gets_the_new_fields_and_refuses_a_new_type(config_dir: Path, store: StateStore, spark: Any) -> None:
    """An index whose mapping comes from the record schema: ADD COLUMN c_price DECIMAL(12,2) at the source
    gives the index a scaled_float field (Elasticsearch's dynamic mapping would guess a float); a column
    whose type changes cannot change in Elasticsearch, and the window stops, naming the field."""
    import requests

    cfg, index, url, stats = _index_window(config_dir, store, spark, "lenient")
    topic = cfg.source.topics[0]
    properties = requests.get(f"{url}/{index}/_mapping", timeout=30).json()[index]["mappings"]["properties"]
    assert properties["c_price"] == {"type": "scaled_float", "scaling_factor": 100.0}
    assert [(c["column"], c["change"], c["applied"]) for c in stats["schema_changes"]] == [("c_price", "add", True)]
    doc = requests.get(f"{url}/{index}/_doc/1", timeout=30).json()["_source"]
    assert doc["c_price"] == 12.5

    def retyped(fields: dict[str, Any]) -> None:
        _priced(fields)
        fields["c_bigint"]["type"] = "string"

    def as_text(before: dict[str, Any], after: dict[str, Any]) -> None:
        _price(before, after)
        before["c_bigint"], after["c_bigint"] = str(before["c_bigint"]), "now text"

    cdcgen.produce(bootstrap(), topic, [later(retyped, as_text)], partitions=1, create=False)
    with pytest.raises(SchemaChangeRefused, match=rf"index '{index}' field 'c_bigint': long -> text: Elasticsearch "
                                                  "cannot change the type of an existing field"):
        runner.run_window(cfg, "run-3", store=store, spark=spark)


def test_an_index_under_ignore_keeps_its_fields(config_dir: Path, store: StateStore, spark: Any) -> None:
    """schema_changes: ignore: the index gets no c_price field, neither from the schema nor from
    Elasticsearch's dynamic mapping (the documents are written without it), and the stats say so;
    the fields the index has are written as before."""
    import requests

    _cfg, index, url, stats = _index_window(config_dir, store, spark, "ignore")
    properties = requests.get(f"{url}/{index}/_mapping", timeout=30).json()[index]["mappings"]["properties"]
    assert "c_price" not in properties and "c_bigint" in properties
    assert [(c["column"], c["change"], c["applied"]) for c in stats["schema_changes"]] == [("c_price", "add", False)]
    doc = requests.get(f"{url}/{index}/_doc/1", timeout=30).json()["_source"]
    assert "c_price" not in doc
    assert doc["id"] == 1 and "c_bigint" in doc and "c_enum" in doc, doc
