"""Offsets in the MySQL sink's own database, for exactly-once (``offset_store.sink``).

The sink named by ``offset_store.sink`` writes a window's rows and these offsets in one transaction
(:meth:`connectors.mysql.sink.MySqlSink.begin_window` / ``commit_window``), so MySQL holds either
both or neither, whatever dies when. Two tables:

* ``cdcflow_sink_offsets`` (pipeline, topic, partition) -> next offset and the run that set it: the
  authority for where the pipeline's next window starts (the offset store mirrors it);
* ``cdcflow_sink_commits`` (pipeline, run id): every run whose window is in the table, so a retried
  run whose transaction committed already writes nothing again (it does not rely on re-application).

Offsets move by the rule the offset store commits by too (connectors/offset_rule.py): a window
planned from stored offsets moves a partition only when the offset is still the window's start
(compare-and-set); a ``start_offsets``/``start_time`` rewind sets it; a time-range replay never
moves it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from connectors.errors import SinkUnavailable
from connectors.offset_rule import Mode, commit_outcome

OFFSETS, COMMITS = "cdcflow_sink_offsets", "cdcflow_sink_commits"
TopicPartition = tuple[str, int]
CREATE = (
    (f"CREATE TABLE IF NOT EXISTS `{OFFSETS}` (pipeline VARCHAR(200) NOT NULL, topic VARCHAR(249) NOT NULL, "
     "`partition` INT NOT NULL, next_offset BIGINT NOT NULL, run_id VARCHAR(250) NOT NULL, "
     "updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), PRIMARY KEY (pipeline, topic, `partition`)"
     ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"),
    (f"CREATE TABLE IF NOT EXISTS `{COMMITS}` (pipeline VARCHAR(200) NOT NULL, run_id VARCHAR(250) NOT NULL, "
     "committed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), offsets TEXT NOT NULL, "
     "PRIMARY KEY (pipeline, run_id), KEY ix_cdcflow_sink_commits_age (pipeline, committed_at)"
     ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"),
)


@dataclass(frozen=True)
class OffsetCommit:
    """What a window's transaction commits beside its rows."""

    pipeline: str
    run_id: str
    mode: Mode  # stored window: compare-and-set; rewind: set; time range: keep (connectors/offset_rule.py)
    ranges: tuple[tuple[str, int, int, int], ...]  # (topic, partition, start, end)


def create_tables(conn: sa.Connection) -> None:
    """DDL commits implicitly in MySQL: run it before the window's transaction begins."""
    for sql in CREATE:
        conn.exec_driver_sql(sql)


def lock(conn: sa.Connection, commit: OffsetCommit) -> bool:
    """Inside the window's transaction, first: lock the pipeline's offset rows (a second writer waits
    here) and say whether this run committed already."""
    conn.exec_driver_sql(f"SELECT next_offset FROM `{OFFSETS}` WHERE pipeline = %s FOR UPDATE", (commit.pipeline,))
    return conn.exec_driver_sql(f"SELECT 1 FROM `{COMMITS}` WHERE pipeline = %s AND run_id = %s",
                                (commit.pipeline, commit.run_id)).first() is not None


def begin(engine: sa.Engine, commit: OffsetCommit) -> sa.Connection | None:
    """The window's transaction, its offset rows locked (:meth:`MySqlSink.begin_window`), or None when
    this run's window committed already (nothing to write)."""
    conn = engine.connect()
    try:
        create_tables(conn)
        conn.commit()
        conn.begin()
        committed = lock(conn, commit)
    except BaseException:  # failed: this connection is done
        conn.close()
        raise
    if committed:
        conn.close()
        return None
    return conn


def commit_window(window: sa.Connection, commit: OffsetCommit,
                  before_commit: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Write the window's offsets into its transaction and commit rows and offsets together; the
    connection is closed either way."""
    try:
        result = write(window, commit)
        before_commit()
        window.commit()
    finally:
        window.close()
    return result


def _upsert(conn: sa.Connection, pipeline: str, topic: str, partition: int, offset: int, run_id: str) -> None:
    conn.exec_driver_sql(
        f"INSERT INTO `{OFFSETS}` (pipeline, topic, `partition`, next_offset, run_id) VALUES (%s, %s, %s, %s, %s) "
        "ON DUPLICATE KEY UPDATE next_offset = VALUES(next_offset), run_id = VALUES(run_id), "
        "updated_at = CURRENT_TIMESTAMP(6)", (pipeline, topic, partition, offset, run_id))


def write(conn: sa.Connection, commit: OffsetCommit) -> dict[str, Any]:
    """Inside the window's transaction, last: move the offsets and record the run. Returns
    {advanced: {"topic:partition": offset}, left: {"topic:partition": why}}."""
    current = {(r[0], r[1]): (r[2], r[3]) for r in conn.exec_driver_sql(
        f"SELECT topic, `partition`, next_offset, run_id FROM `{OFFSETS}` WHERE pipeline = %s", (commit.pipeline,))}
    advanced: dict[str, int] = {}
    left: dict[str, str] = {}
    for topic, partition, start, end in commit.ranges:
        name = f"{topic}:{partition}"
        now = current.get((topic, partition))
        # no run id: a repeated run is recognised by its commit record (lock), not by the offset it left
        outcome = commit_outcome(commit.mode, now, start, end)
        if outcome == "keep":
            left[name] = "a replay of a time range: stored offsets stay"
            continue
        if outcome == "conflict":
            assert now is not None
            left[name] = (f"the sink's offset is {now[0]} (set by run {now[1]}), not this window's start {start}: "
                          "left unchanged")
            continue
        _upsert(conn, commit.pipeline, topic, partition, end, commit.run_id)
        advanced[name] = end
    conn.exec_driver_sql(f"INSERT INTO `{COMMITS}` (pipeline, run_id, offsets) VALUES (%s, %s, %s)",
                         (commit.pipeline, commit.run_id, json.dumps(advanced, sort_keys=True)))
    return {"advanced": advanced, "left": left}


class SinkOffsets:
    """The driver's and the operator's view of a pipeline's offsets in the sink's database."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = sa.create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 10})

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _begin(self, doing: str) -> Iterator[sa.Connection]:
        """A connection with the tables in place; a failure of MySQL is a clear SinkUnavailable."""
        try:
            with self.engine.connect() as conn:
                create_tables(conn)
                conn.commit()
                yield conn
        except DBAPIError as exc:
            where = sa.make_url(self.url).render_as_string(hide_password=True)
            orig = getattr(exc, "orig", exc)
            raise SinkUnavailable(f"exactly-once offsets (offset_store.sink): MySQL at {where} failed while {doing}: "
                                  f"{orig}; no offset moved") from exc

    def load(self, pipeline: str) -> dict[TopicPartition, tuple[int, str]]:
        with self._begin(f"reading the offsets of {pipeline!r}") as conn:
            return {(r[0], r[1]): (r[2], r[3]) for r in conn.exec_driver_sql(
                f"SELECT topic, `partition`, next_offset, run_id FROM `{OFFSETS}` WHERE pipeline = %s", (pipeline,))}

    def set(self, pipeline: str, offsets: Mapping[TopicPartition, int], by: str) -> None:
        """Operator reset: the given partitions' offsets, as they are."""
        with self._begin(f"setting the offsets of {pipeline!r}") as conn, conn.begin():
            for (topic, partition), offset in offsets.items():
                _upsert(conn, pipeline, topic, partition, offset, by)

    def forget(self, pipeline: str, tps: list[TopicPartition] | None = None) -> None:
        """Forget some partitions' offsets, or all of the pipeline's (``tps`` None)."""
        with self._begin(f"forgetting the offsets of {pipeline!r}") as conn, conn.begin():
            if tps is None:
                conn.exec_driver_sql(f"DELETE FROM `{OFFSETS}` WHERE pipeline = %s", (pipeline,))
            for topic, partition in tps or []:
                conn.exec_driver_sql(f"DELETE FROM `{OFFSETS}` WHERE pipeline = %s AND topic = %s AND `partition` = %s",
                                     (pipeline, topic, partition))

    def prune(self, pipeline: str, older_than_s: float, batch: int = 10_000) -> int:
        """Forget the run records older than ``older_than_s`` (retention.ledger): a run that old is
        not retried any more."""
        total = 0
        with self._begin(f"pruning the run records of {pipeline!r}") as conn:
            while True:
                with conn.begin():
                    n = conn.exec_driver_sql(
                        f"DELETE FROM `{COMMITS}` WHERE pipeline = %s AND committed_at < NOW(6) - INTERVAL %s SECOND "
                        f"LIMIT {int(batch)}", (pipeline, int(older_than_s))).rowcount
                total += n
                if n < batch:
                    return total
