"""The set path's staging by LOAD DATA LOCAL from memory (connectors/mysql/local_load.py) on the real
MariaDB: the same rows as the INSERT staging, value for value; a server that refuses LOCAL served by
INSERT; and no file of the worker can be read through a sink's connection. (A value MySQL would
coerce is staged again by INSERT: test_sink.py::test_a_rejected_set_falls_back_to_rows_and_only_the_bad_row_fails.)"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pymysql
import pytest
import sqlalchemy as sa

from cdcflow.config import MySqlSinkConfig
from cdcflow.connections import get_connection
from connectors.mysql import local_load
from connectors.mysql import sink as mysql_sink
from connectors.mysql.connection import CONNECT_ARGS, SESSION_SQL, writer_engine
from connectors.mysql.sink import MySqlSink
from tests.helpers import mysql_engine, unique
from tests.integration.connectors.mysql.test_sink import apply, hostile_changes, table_rows

pytestmark = [pytest.mark.integration, pytest.mark.services("mysql")]

COLUMNS = [{"name": "id", "type": "BIGINT"}, {"name": "name", "type": "VARCHAR(32)"},
           {"name": "amount", "type": "DECIMAL(10,2)"}, {"name": "note", "type": "TEXT"},
           {"name": "score", "type": "DOUBLE"}]
BINARY_COLUMNS = [{"name": "id", "type": "BIGINT"}, {"name": "data", "type": "BLOB"},
                  {"name": "flags", "type": "BIT(8)"}, {"name": "place", "type": "GEOMETRY"}]
# MySQL's internal form of POINT(1 2), SRID 0: the SRID, then the WKB
POINT = bytes.fromhex("00000000" "0101000000" "000000000000F03F" "0000000000000040")


@pytest.fixture(autouse=True)
def _sets_take_the_set_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mysql_sink, "ROW_PATH_MAX", 0)


def make_sink(table: str, stage: str, columns: list[dict[str, Any]] = COLUMNS) -> MySqlSink:
    cfg = MySqlSinkConfig(type="mysql", name="m", table=table, primary_key=["id"], columns=columns,
                          create_table=True, stage=stage)
    sink = MySqlSink(cfg, get_connection("cdcflow_mysql").sqlalchemy_url())
    sink.open()
    return sink


def test_hostile_values_staged_by_load_data_are_the_ones_staged_by_insert() -> None:
    tables = unique("load"), unique("insert")
    sinks = make_sink(tables[0], "load_data"), make_sink(tables[1], "insert")
    try:
        for s in sinks:
            assert apply(s, hostile_changes()) == []
        assert table_rows(tables[0]) == table_rows(tables[1])
        got = {r[0]: r for r in table_rows(tables[0])}
        assert got[3][3] == "tab\there" * 3 and got[4][1] == "new\nline" and got[5][1] == "cr\rlf"
        assert got[6][3] == "nul\x00byte" * 3 and got[13][1] == "\\N" and got[14][1] == "\\" and got[11][1] == ""
        assert got[100][1:5] == (None, None, None, -1.5e-7)
        # the upserts' stage and the deletes' stage, each by its own way
        assert sinks[0].stats.extra["staged_by_load_data"] == 2 and "staged_by_insert" not in sinks[0].stats.extra
        assert sinks[1].stats.extra["staged_by_insert"] == 2 and "staged_by_load_data" not in sinks[1].stats.extra
        assert [(s.stats.upserted, s.stats.unchanged) for s in sinks] == [(len(HOSTILE_UPSERTS), 1)] * 2
    finally:
        for s in sinks:
            s.close()


HOSTILE_UPSERTS = [c for c in hostile_changes() if c[0] == "upsert"]


def test_binary_bit_and_spatial_values_are_loaded_as_the_insert_writes_them() -> None:
    tables = unique("load_bin"), unique("insert_bin")
    rows = pa.table({
        "topic": ["t"] * 4, "partition": [0] * 4, "offset": [0, 1, 2, 3],
        "key": pa.array([b"k"] * 4), "value": pa.array([b"v"] * 4),
        "headers": pa.array([[]] * 4, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        "change_op": ["upsert"] * 4, "version": pa.array([1, 2, 3, 4], pa.int64()),
        "c_0": pa.array([1, 2, 3, 4], pa.int64()),
        "c_1": pa.array([b"\x00\t\n\\N\xff", b"", None, bytes(range(256))], pa.binary()),
        "c_2": pa.array([b"\x05", b"\xff", None, b"\x00"], pa.binary()),
        "c_3": pa.array([POINT, None, POINT, None], pa.binary())})
    sinks = make_sink(tables[0], "load_data", BINARY_COLUMNS), make_sink(tables[1], "insert", BINARY_COLUMNS)
    try:
        for s in sinks:
            assert s.write_arrow(rows.to_batches()[0]) == [] and s.flush() == []
        read = []
        with mysql_engine().connect() as conn:
            for t in tables:
                read.append([tuple(r) for r in conn.exec_driver_sql(
                    f"SELECT id, HEX(data), flags + 0, ST_AsText(place) FROM `{t}` ORDER BY id").all()])
        assert read[0] == read[1] == [
            (1, "00090A5C4EFF", 5, "POINT(1 2)"), (2, "", 255, None), (3, None, None, "POINT(1 2)"),
            (4, bytes(range(256)).hex().upper(), 0, None)]
        assert sinks[0].stats.extra["staged_by_load_data"] == 1
    finally:
        for s in sinks:
            s.close()


def test_a_server_that_refuses_local_is_served_by_insert(monkeypatch: pytest.MonkeyPatch) -> None:
    """MySQL 8 ships local_infile=OFF. MariaDB refuses a load on a connection that does not offer LOCAL
    as it does when local_infile is OFF (4166, "disabled the local infile capability"): the load is
    refused once, and every set goes by INSERT."""
    def without_local(url: str, shared: bool = False) -> sa.Engine:
        return sa.create_engine(url, isolation_level="READ COMMITTED", poolclass=sa.pool.NullPool,
                                connect_args={**CONNECT_ARGS, "init_command": SESSION_SQL,
                                              "client_flag": pymysql.constants.CLIENT.MULTI_RESULTS})

    monkeypatch.setattr(mysql_sink, "writer_engine", without_local)
    table = unique("refused")
    local_load._refused.clear()
    try:
        sink = make_sink(table, "load_data")
        try:
            assert apply(sink, hostile_changes()) == []
            assert apply(sink, [("upsert", 99, 1, "again", Decimal(1), None, None)]) == []
        finally:
            sink.close()
        assert sink.stats.extra["staged_by_insert"] == 3 and "staged_by_load_data" not in sink.stats.extra
        assert {r[0]: r[1] for r in table_rows(table)}[1] == "again"
        assert len(local_load._refused) == 1  # asked once in this process
    finally:
        local_load._refused.clear()


def test_no_file_of_the_worker_can_be_read_through_a_sink_connection(tmp_path: Path) -> None:
    """The connection offers LOCAL, but only local_load's own statement is answered, from memory: a
    request for a file at any other time is refused by PyMySQL, and no byte of the file is sent."""
    secret = tmp_path / "secret.txt"
    secret.write_text("1\tthe worker's secret\n")
    table = unique("nofile")
    url = get_connection("cdcflow_mysql").sqlalchemy_url()
    with mysql_engine().begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, note TEXT)")
    engine = writer_engine(url)
    try:
        with engine.connect() as conn:
            cursor = conn.connection.cursor()
            with pytest.raises((RuntimeError, pymysql.MySQLError)):
                cursor.execute(f"LOAD DATA LOCAL INFILE '{secret}' INTO TABLE `{table}`")
        with mysql_engine().connect() as conn:
            assert conn.execute(sa.text(f"SELECT COUNT(*) FROM `{table}`")).scalar() == 0
        # and a load_data of its own sends the set's bytes, whatever the file name
        with engine.connect() as conn:
            cursor = conn.connection.cursor()
            assert local_load.load_data(cursor, table, ["id", "note"],
                                        [pa.array([7], pa.int64()), pa.array(["from memory"])], 1_000_000)
            conn.connection.commit()
        with mysql_engine().connect() as conn:
            assert [tuple(r) for r in conn.exec_driver_sql(f"SELECT id, note FROM `{table}`").all()] == [
                (7, "from memory")]
    finally:
        engine.dispose()
        with mysql_engine().begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS `{table}`")
