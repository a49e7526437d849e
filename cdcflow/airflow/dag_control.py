"""What cdcflow's control plane needs from Airflow: a DAG's pause flag, its runs, and triggering one.

Works wherever Airflow's metadata DB is configured: inside the api-server (the plugin) and in the
``cdcflow`` CLI (same ``AIRFLOW_HOME``). Airflow is imported only when a method runs, so importing
this module stays cheap. :class:`AirflowDags` is the real thing; the control service takes any
object with these methods (a test double may stand beside it for unit tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

RunState = str  # Airflow's DagRunState values: queued, running, success, failed


@dataclass(frozen=True)
class DagInfo:
    dag_id: str
    is_paused: bool
    has_import_errors: bool
    next_run: datetime | None


@dataclass(frozen=True)
class DagRunInfo:
    run_id: str
    state: RunState
    run_type: str
    conf: dict[str, Any]
    start: datetime | None
    end: datetime | None


class DagControl(Protocol):
    def info(self, dag_id: str) -> DagInfo | None: ...
    def set_paused(self, dag_id: str, paused: bool) -> None: ...
    def trigger(self, dag_id: str, conf: dict[str, Any], user: str, note: str | None = None) -> str: ...
    def runs(self, dag_id: str, limit: int = 10) -> list[DagRunInfo]: ...
    def active_runs(self, dag_id: str) -> list[DagRunInfo]: ...


class AirflowDags:
    """DagControl on Airflow's metadata DB (the ORM Airflow's own REST API uses)."""

    def info(self, dag_id: str) -> DagInfo | None:
        from airflow.models.dag import DagModel  # noqa: PLC0415
        from airflow.utils.session import create_session  # noqa: PLC0415

        with create_session() as session:
            dm = session.get(DagModel, dag_id)
            if dm is None or dm.is_stale:
                return None
            return DagInfo(dag_id, bool(dm.is_paused), bool(dm.has_import_errors),
                           getattr(dm, "next_dagrun_run_after", None))

    def set_paused(self, dag_id: str, paused: bool) -> None:
        from airflow.models.dag import DagModel  # noqa: PLC0415
        from airflow.utils.session import create_session  # noqa: PLC0415

        with create_session() as session:
            dm = session.get(DagModel, dag_id)
            if dm is None:
                raise LookupError(dag_id)
            dm.is_paused = paused

    def trigger(self, dag_id: str, conf: dict[str, Any], user: str, note: str | None = None) -> str:
        from airflow.api.common.trigger_dag import trigger_dag  # noqa: PLC0415
        from airflow.utils.session import create_session  # noqa: PLC0415
        from airflow.utils.types import DagRunTriggeredByType  # noqa: PLC0415

        with create_session() as session:
            run = trigger_dag(dag_id, triggered_by=DagRunTriggeredByType.REST_API, conf=conf,
                              triggering_user_name=user, note=note, session=session)
            if run is None:
                raise RuntimeError(f"Airflow created no run for {dag_id}")
            return str(run.run_id)

    def _runs(self, dag_id: str, limit: int, active_only: bool) -> list[DagRunInfo]:
        from airflow.models.dagrun import DagRun  # noqa: PLC0415
        from airflow.utils.session import create_session  # noqa: PLC0415
        from sqlalchemy import select  # noqa: PLC0415

        query = select(DagRun).where(DagRun.dag_id == dag_id)
        if active_only:
            query = query.where(DagRun.state.in_(("queued", "running")))
        query = query.order_by(DagRun.id.desc()).limit(limit)
        with create_session() as session:
            return [DagRunInfo(r.run_id, str(r.state), str(r.run_type), dict(r.conf or {}), r.start_date, r.end_date)
                    for r in session.scalars(query)]

    def runs(self, dag_id: str, limit: int = 10) -> list[DagRunInfo]:
        return self._runs(dag_id, limit, active_only=False)

    def active_runs(self, dag_id: str) -> list[DagRunInfo]:
        return self._runs(dag_id, 100, active_only=True)
