"""How the MySQL sink talks to MySQL: its engines and session, and what an error of the server means
(a row's data: the DLQ; a lock conflict: retry; the deployment: fail the window, in the server's words)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pymysql
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from connectors.errors import CdcflowError, ConfigError, SinkUnavailable

SESSION_SQL = (
    "SET SESSION sql_mode='STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ZERO_DATE,NO_ZERO_IN_DATE', time_zone='+00:00'"
)

# MySQL/MariaDB error codes that mean "this row's data is wrong": the row goes to the DLQ.
DATA_ERRORS = frozenset({1048, 1062, 1264, 1265, 1292, 1364, 1366, 1367, 1406, 1411, 1452, 1690,
                         3140, 4025, 4078})
# Lock conflicts: retry the batch.
RETRY_ERRORS = frozenset({1205, 1213})
DEADLOCK = 1213
# Problems of the deployment rather than of a record: fail the window with the server's words.
CONFIG_ERRORS = frozenset({1044, 1045, 1049, 1054, 1059, 1103, 1117, 1118, 1142, 1146, 1166, 1170})
CONNECT_ARGS: dict[str, Any] = {"connect_timeout": 10, "read_timeout": 120, "write_timeout": 120, "charset": "utf8mb4"}


def writer_engine(url: str, shared: bool = False) -> sa.Engine:
    """The engine a sink writes with. READ COMMITTED: no gap locks. Concurrent writer tasks of a
    window upsert disjoint keys of one table; under REPEATABLE READ their set-based upserts deadlocked
    on the gaps between interleaved keys. Each statement still locks and re-reads the rows it guards.
    ``shared``: one pooled connection, reused by the sinks of many tables one after another (a
    connection costs a few milliseconds; a table of a routed sink may have one change)."""
    pool: dict[str, Any] = {"pool_size": 1, "max_overflow": 1} if shared else {
        "poolclass": NullPool}
    # client_flag without FOUND_ROWS (SQLAlchemy's MySQL dialects ask for it): an INSERT … ON DUPLICATE
    # KEY UPDATE that leaves a row as it was then counts 0 affected rows, not 1, which is how the
    # sink tells an unchanged row from an inserted one (connectors/mysql/apply.py::count_upserts)
    return sa.create_engine(url, isolation_level="READ COMMITTED",
                            connect_args={**CONNECT_ARGS, "init_command": SESSION_SQL,
                                          "client_flag": pymysql.constants.CLIENT.MULTI_RESULTS
                                          # LOCAL offered, answered only by local_load.load_data's own statement
                                          | pymysql.constants.CLIENT.LOCAL_FILES}, **pool)


def reader_engine(url: str) -> sa.Engine:
    return sa.create_engine(url, poolclass=NullPool, connect_args=CONNECT_ARGS)


@contextmanager
def reader_cursor(url: str) -> Iterator[Any]:
    """A DB-API cursor of its own connection, for reads (composed indices: connectors/elasticsearch/compose.py);
    the connection and its engine are gone afterwards."""
    engine = reader_engine(url)
    try:
        raw = engine.raw_connection()
        try:
            yield raw.cursor()
        finally:
            raw.close()
    finally:
        engine.dispose()


def where(url: str) -> str:
    """The server, for messages: the URL without its password."""
    return sa.make_url(url).render_as_string(hide_password=True)


def driver_error(exc: BaseException) -> BaseException:
    """The driver's exception under SQLAlchemy's wrapper (the set path raises the driver's own)."""
    return exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc


def error_code(exc: BaseException) -> int | None:
    args = driver_error(exc).args
    return args[0] if args and isinstance(args[0], int) else None


def error_detail(exc: BaseException) -> str:
    """The server's message: the second of the driver's arguments (code, message), else the error."""
    orig = driver_error(exc)
    return str(orig.args[1]) if len(orig.args) > 1 else str(orig)


def infra_error(sink: str, table: str, url: str, doing: str, exc: DBAPIError | pymysql.MySQLError) -> CdcflowError:
    """A failure that is not a row's: the deployment's (ConfigError) or the server's (SinkUnavailable)."""
    code = error_code(exc)
    detail = error_detail(exc)
    if code in CONFIG_ERRORS:
        return ConfigError(f"sink {sink!r}: MySQL refused {doing} table {table!r} at {where(url)}: ({code}) {detail}")
    return SinkUnavailable(f"sink {sink!r}: MySQL at {where(url)} failed while {doing} table {table!r}: "
                           f"({code}) {detail}")
