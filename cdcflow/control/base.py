"""What every area of the control service shares: Airflow's DAGs (``dags``: Airflow, or a double in
unit tests), a pipeline's DAG that must exist, and the STOPPED state that offset changes and deletes
need."""

from __future__ import annotations

from cdcflow.airflow.dag_control import AirflowDags, DagControl, DagInfo
from cdcflow.config import PipelineConfig
from cdcflow.control.pipelines import store_for
from cdcflow.errors import Conflict
from cdcflow.state import StateStore

OFFSETS_NEED_STOP = ("Connectors must be in the STOPPED state before their offsets can be modified. This can "
                     "be done for the specified connector by issuing a 'PUT' request to the "
                     "'/connectors/{name}/stop' endpoint")


class ControlBase:
    """The state every area's methods share: ``dags``."""

    def __init__(self, dags: DagControl | None = None) -> None:
        self.dags: DagControl = dags or AirflowDags()

    def _dag(self, name: str) -> DagInfo:
        info = self.dags.info(name)
        if info is None:
            raise Conflict(f"pipeline {name!r} has no DAG in Airflow yet (the dag-processor has not parsed "
                           "it, or its file is invalid); wait for it to appear in the DAG list")
        return info

    def _require_stopped(self, cfg: PipelineConfig, need_stop: str = OFFSETS_NEED_STOP) -> StateStore:
        """The pipeline is STOPPED (else Conflict with ``need_stop``) and no run is queued or running."""
        store = store_for(cfg)
        if store.operator.get_state(cfg.name) != "stopped":
            raise Conflict(need_stop.replace("{name}", cfg.name))
        active = self.dags.active_runs(cfg.name) if self.dags.info(cfg.name) is not None else []
        if active:
            raise Conflict(f"pipeline {cfg.name!r} is STOPPED but run(s) {[r.run_id for r in active]} are still "
                           "queued or running; wait for them to end (a stopped pipeline skips them)")
        return store

