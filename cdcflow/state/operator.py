"""What operators decided about a pipeline: whether it is STOPPED, which schema changes met under
``schema_changes: pause`` they approved or rejected, and which dead letters they sent back
(redrives), so that none is sent twice by accident."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa

from cdcflow.state.tables import now, redrives_table, schema_changes_table, states_table

PipelineState = Literal["running", "stopped"]
RedriveStatus = Literal["pending", "done"]


@dataclass(frozen=True)
class Redrive:
    dlq_topic: str
    partition: int
    offset: int
    target_topic: str
    fingerprint: str
    status: RedriveStatus
    request_id: str
    requested_by: str
    updated_at: datetime


class OperatorState:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    # -- running or stopped --------------------------------------------------------------------
    def get_state(self, pipeline: str) -> PipelineState:
        with self.engine.connect() as conn:
            state = conn.execute(sa.select(states_table.c.state)
                                 .where(states_table.c.pipeline == pipeline)).scalar_one_or_none()
        return "stopped" if state == "stopped" else "running"

    def set_state(self, pipeline: str, state: PipelineState, by: str) -> None:
        with self.engine.begin() as conn:
            values = {"state": state, "updated_by": by, "updated_at": now()}
            if conn.execute(sa.update(states_table).where(states_table.c.pipeline == pipeline)
                            .values(**values)).rowcount == 0:
                conn.execute(sa.insert(states_table).values(pipeline=pipeline, **values))

    # -- schema changes waiting for an operator (schema_changes: pause) ---------------------------
    def schema_changes(self, pipeline: str) -> list[dict[str, Any]]:
        """Every schema change recorded for the pipeline: {key, change, decision, run_id, decided_by,
        updated_at}, newest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(schema_changes_table).where(schema_changes_table.c.pipeline == pipeline)
                                .order_by(schema_changes_table.c.updated_at.desc())).all()
        return [{"key": r.change_key, "change": json.loads(r.change), "decision": r.decision, "run_id": r.run_id,
                 "decided_by": r.decided_by, "updated_at": r.updated_at} for r in rows]

    def record_schema_pending(self, pipeline: str, run_id: str, changes: Mapping[str, Mapping[str, Any]]) -> None:
        """The changes (by key) a window met and waits on; a change decided before keeps its decision."""
        with self.engine.begin() as conn:
            known = set(conn.execute(sa.select(schema_changes_table.c.change_key)
                                     .where(schema_changes_table.c.pipeline == pipeline)).scalars())
            for key, change in changes.items():
                if key not in known:
                    conn.execute(sa.insert(schema_changes_table).values(
                        pipeline=pipeline, change_key=key, change=json.dumps(change, sort_keys=True),
                        decision="pending", run_id=run_id, decided_by=None, updated_at=now()))

    def decide_schema_changes(self, pipeline: str, decision: str, by: str) -> list[dict[str, Any]]:
        """Approve or reject every pending change; returns them."""
        with self.engine.begin() as conn:
            where = (schema_changes_table.c.pipeline == pipeline) & (schema_changes_table.c.decision == "pending")
            pending = [json.loads(c) for c in conn.execute(sa.select(schema_changes_table.c.change).where(where))
                       .scalars()]
            conn.execute(sa.update(schema_changes_table).where(where).values(
                decision=decision, decided_by=by, updated_at=now()))
        return pending

    # -- redrives ------------------------------------------------------------------------------
    def redrives(self, pipeline: str, dlq_topic: str) -> dict[tuple[int, int], Redrive]:
        """Every recorded redrive of the pipeline's DLQ, by (DLQ partition, DLQ offset)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(redrives_table).where(
                (redrives_table.c.pipeline == pipeline) & (redrives_table.c.dlq_topic == dlq_topic)))
            return {(r.partition, r.offset): Redrive(
                r.dlq_topic, r.partition, r.offset, r.target_topic, r.fingerprint, r.status, r.request_id,
                r.requested_by, r.updated_at) for r in rows}

    def claim_redrives(self, pipeline: str, dlq_topic: str, records: list[tuple[int, int, str, str]],
                       request_id: str, by: str) -> None:
        """Record (partition, offset, target, fingerprint) as pending, in one transaction. An entry of
        another record at the same offset (the DLQ topic was recreated) is replaced; one of the same
        record makes the insert fail, so two concurrent requests cannot both send it."""
        at = now()
        with self.engine.begin() as conn:
            for p, o, _t, f in records:
                conn.execute(sa.delete(redrives_table).where(
                    (redrives_table.c.pipeline == pipeline) & (redrives_table.c.dlq_topic == dlq_topic)
                    & (redrives_table.c.partition == p) & (redrives_table.c.offset == o)
                    & (redrives_table.c.fingerprint != f)))
            conn.execute(sa.insert(redrives_table), [
                {"pipeline": pipeline, "dlq_topic": dlq_topic, "partition": p, "offset": o,
                 "target_topic": t, "fingerprint": f, "status": "pending", "request_id": request_id,
                 "requested_by": by, "updated_at": at} for p, o, t, f in records])

    def finish_redrives(self, pipeline: str, request_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.update(redrives_table).where(
                (redrives_table.c.pipeline == pipeline) & (redrives_table.c.request_id == request_id)
            ).values(status="done", updated_at=now()))
