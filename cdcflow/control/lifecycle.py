"""A pipeline's lifecycle: pause, resume and stop (Connect's states, mapped onto Airflow's paused DAG
and the offset store's stopped mark), and windows run now: a trigger, Connect's restart, a replay."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdcflow.control.pipelines import store_for, valid
from cdcflow.control.status import Reading, Status
from cdcflow.errors import BadRequest, Conflict


class Lifecycle(Reading):
    """Pause, resume, stop; run a window now."""

    def pause(self, name: str, user: str) -> Status:
        cfg = valid(name)
        self._dag(cfg.name)
        self.dags.set_paused(cfg.name, True)
        return self.status(cfg.name)

    def resume(self, name: str, user: str) -> Status:
        cfg = valid(name)
        self._dag(cfg.name)
        store_for(cfg).operator.set_state(cfg.name, "running", user)
        self.dags.set_paused(cfg.name, False)
        return self.status(cfg.name)

    def stop(self, name: str, user: str) -> Status:
        cfg = valid(name)
        self._dag(cfg.name)
        self.dags.set_paused(cfg.name, True)
        store_for(cfg).operator.set_state(cfg.name, "stopped", user)
        return self.status(cfg.name)

    def run_now(self, name: str, user: str, conf: Mapping[str, Any] | None = None, note: str | None = None) -> str:
        """Trigger one window now (also Connect's restart). Returns the Airflow run id."""
        from cdcflow.errors import ConfigError  # noqa: PLC0415
        from cdcflow.run_params import RunParams  # noqa: PLC0415

        cfg = valid(name)
        self._dag(cfg.name)
        if store_for(cfg).operator.get_state(cfg.name) == "stopped":
            raise Conflict(f"pipeline {cfg.name!r} is STOPPED: resume it before running a window")
        try:
            RunParams.parse(conf, cfg)
        except ConfigError as exc:
            raise BadRequest(str(exc)) from exc
        return self.dags.trigger(cfg.name, dict(conf or {}), user, note)

    def replay(self, name: str, start_offsets: Mapping[str, Mapping[str | int, int]], user: str) -> str:
        """A window from the given offsets ({topic: {partition: offset}}); the pipeline continues from its end."""
        if not start_offsets:
            raise BadRequest("replay needs start offsets: {topic: {partition: offset}}")
        conf = {"start_offsets": {t: {str(p): o for p, o in parts.items()} for t, parts in start_offsets.items()}}
        return self.run_now(name, user, conf, note=f"replay requested by {user}")

