"""One writer per pipeline: a window holds its pipeline's writer lease while it reads and writes
its sinks, so a live window and a backfill window (Airflow runs backfills beside the live runs)
never write at the same time. cdcflow.window.lease.writer_lease holds and renews it.

A lease expires unless renewed, so a killed task does not block the pipeline for longer than it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from cdcflow.state.tables import now, writers_table


class Leases:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def try_take(self, pipeline: str, holder: str, seconds: float,
                 dead: Callable[[str], bool] | None = None) -> str | None:
        """Take or renew the pipeline's writer lease for ``seconds``. None when taken, else the
        current holder (whose lease has not expired). A holder that ``dead`` says is gone (a killed
        attempt, see cdcflow.window.lease.writer_lease) is taken at once, without waiting for its lease to expire."""
        at = now()
        until = at + timedelta(seconds=seconds)
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.insert(writers_table).values(pipeline=pipeline, holder=holder, expires_at=until))
            return None
        except IntegrityError:  # held (by us: renew; by another: take it only once expired)
            pass
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(writers_table).where(writers_table.c.pipeline == pipeline)).first()
            if row is None:
                return "(released meanwhile; try again)"
            if row.holder != holder and row.expires_at > at and not (dead is not None and dead(row.holder)):
                return str(row.holder)
            # only if nobody renewed or took it since it was read
            taken = conn.execute(sa.update(writers_table).where(
                (writers_table.c.pipeline == pipeline) & (writers_table.c.holder == row.holder)
                & (writers_table.c.expires_at == row.expires_at)).values(holder=holder, expires_at=until))
            return None if taken.rowcount == 1 else str(row.holder)

    def release(self, pipeline: str, holder: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.delete(writers_table).where(
                (writers_table.c.pipeline == pipeline) & (writers_table.c.holder == holder)))
