"""Schema changes waiting for an operator (``schema_changes: pause``, docs/schema-changes.md): the
changes met and the decisions taken, and the decision that lets the pipeline run again."""

from __future__ import annotations

from typing import Any

from cdcflow.control.base import ControlBase
from cdcflow.control.pipelines import store_for, valid
from cdcflow.errors import BadRequest, Conflict


class SchemaChanges(ControlBase):
    """Show, approve or reject the pending schema changes."""

    def schema_changes(self, name: str) -> list[dict[str, Any]]:
        """The pipeline's schema changes met under ``schema_changes: pause``: pending ones and the
        decisions taken, newest first (docs/schema-changes.md)."""
        cfg = valid(name)
        return store_for(cfg).operator.schema_changes(cfg.name)

    def decide_schema(self, name: str, decision: str, user: str) -> list[dict[str, Any]]:
        """Approve (the next window applies the changes) or reject (the windows write the columns the
        tables have) every pending change, and let the pipeline run again. Returns the changes."""
        if decision not in ("approved", "rejected"):
            raise BadRequest(f"decision must be approved or rejected, got {decision!r}")
        cfg = valid(name)
        store = store_for(cfg)
        decided = store.operator.decide_schema_changes(cfg.name, decision, user)
        if not decided:
            raise Conflict(f"pipeline {name!r} has no schema change waiting for a decision")
        store.operator.set_state(cfg.name, "running", user)
        if self.dags.info(cfg.name) is not None:
            self.dags.set_paused(cfg.name, False)
        return decided

