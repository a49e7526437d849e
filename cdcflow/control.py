"""The operator's control plane: one function per question or action, used by the REST API, the page
and the CLI alike (one code path each).

States, in Kafka Connect's words, mapped onto Airflow (docs/operating.md says more):

* ``PAUSED``  the pipeline's DAG is paused in Airflow: the scheduler starts no window; a window
  triggered by hand waits, queued, until resume.
* ``STOPPED`` paused, and marked stopped in the offset store: no window is planned at all, not even
  one already queued (its run is skipped). Only then may the stored offsets be altered or reset.
* ``FAILED``  the newest window failed (its message is the trace); offsets did not move.
* ``RUNNING`` none of these. ``UNASSIGNED``: the DAG is not (yet) known to Airflow's DB.
* A pipeline file that does not validate is ``FAILED`` with its config errors as the trace.

Every action names who asked for it (the Airflow user, or ``cli:<login>``): the state and redrive
ledgers keep it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from cdcflow.airflow.dag_control import AirflowDags, DagControl, DagInfo, DagRunInfo
from cdcflow.config import PipelineConfig, config_dir, format_validation_error, load_all, parse_instant, parse_pipeline
from cdcflow.errors import BadRequest, CdcflowError, Conflict, NotFound
from cdcflow.state import StateStore, WindowPlan

State = Literal["RUNNING", "PAUSED", "STOPPED", "FAILED", "UNASSIGNED"]
log = logging.getLogger("cdcflow.control")
OFFSETS_NEED_STOP = ("Connectors must be in the STOPPED state before their offsets can be modified. This can "
                     "be done for the specified connector by issuing a 'PUT' request to the "
                     "'/connectors/{name}/stop' endpoint")
# How soon Airflow knows a pipeline file written through the API: the dag-processor re-parses
# dags/cdcflow_pipelines.py (which reads the config directory) every min_file_process_interval.
DAG_APPEARS = ("the dag-processor re-parses the pipeline files every [dag_processor] min_file_process_interval "
               "(30 s by default)")
KEPT_ON_DELETE = ("its stored offsets, window ledger and state are kept: a pipeline created again with the same "
                  "name continues from them, STOPPED until resumed (DELETE /connectors/{name}/offsets while it "
                  "is STOPPED forgets the offsets first)")
DELETE_NEEDS_STOP = ("Connector {name} must be in the STOPPED state before it can be deleted: issue a 'PUT' request "
                     "to the '/connectors/{name}/stop' endpoint first. Deleting removes its pipeline file; "
                     + KEPT_ON_DELETE)


@dataclass(frozen=True)
class Pipeline:
    """A pipeline file: its config when valid, else the errors that make it invalid."""

    name: str
    path: Path
    config: PipelineConfig | None
    error: str | None = None


@dataclass(frozen=True)
class Status:
    name: str
    state: State
    trace: str | None
    paused: bool
    stopped: bool
    in_flight: list[DagRunInfo]
    last_window: WindowPlan | None
    last_window_at: datetime | None
    schedule: str | None
    sinks: list[str]


@dataclass(frozen=True)
class PartitionOffsets:
    topic: str
    partition: int
    committed: int | None
    log_start: int
    log_end: int

    @property
    def lag(self) -> int:
        return self.log_end - (self.committed if self.committed is not None else self.log_start)


@dataclass
class DlqPage:
    topic: str
    records: list[Any]  # connectors.kafka.dlq.DeadLetter
    total: int
    next_before: dict[int, int] | None
    redriven: dict[tuple[int, int], Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RedriveResult:
    request_id: str
    redriven: list[dict[str, Any]]
    already: list[dict[str, Any]]
    matched: int


# -- pipelines -----------------------------------------------------------------------------------

def _name_of_invalid(path: Path) -> str:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("name"), str) and data["name"]:
            return data["name"]
    except (OSError, yaml.YAMLError):
        pass
    return path.stem


def pipelines(directory: Path | None = None) -> list[Pipeline]:
    """Every pipeline file, valid or not, sorted by name."""
    loaded, errors = load_all(directory)
    out = [Pipeline(i.config.name, i.path, i.config) for i in loaded]
    names = {p.name for p in out}
    for path, message in errors.items():
        name = _name_of_invalid(path)
        out.append(Pipeline(name if name not in names else f"{name} ({path.name})", path, None, message))
    return sorted(out, key=lambda p: p.name)


def get(name: str, directory: Path | None = None) -> Pipeline:
    for p in pipelines(directory):
        if p.name == name:
            return p
    raise NotFound(f"Connector {name} not found (no pipeline named {name!r} in {directory or config_dir()})")


def valid(name: str) -> PipelineConfig:
    p = get(name)
    if p.config is None:
        raise BadRequest(f"pipeline {name!r} has an invalid config, fix it first:\n{p.error}")
    return p.config


def _name_pattern() -> str:
    return next(m.pattern for m in PipelineConfig.model_fields["name"].metadata if getattr(m, "pattern", None))


NAME_PATTERN = _name_pattern()


def check_name(name: str) -> str:
    """A pipeline name as the config model allows it; it also names the file ``<name>.yaml`` in the
    config directory, so no name reaches outside it (no '/', no leading '.')."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise BadRequest(f"{name!r} is not a valid pipeline name: expected 1 to 200 letters, digits, '_', '.' or "
                         "'-', starting with a letter, a digit or '_' (it names the file <name>.yaml in the "
                         "config directory)")
    return name


def pipeline_yaml(cfg: PipelineConfig, written_by: str) -> str:
    """A pipeline file for ``cfg``: nested YAML in the models' field order, settings at their defaults
    left out (they read back as the same config)."""
    header = (f"# Pipeline {cfg.name}: {written_by}.\n"
              "# Settings at their defaults are left out (README.md, config/pipeline.schema.json); the next\n"
              "# change through the API rewrites this file, comments included.\n")
    for dump in (cfg.model_dump(mode="json", exclude_defaults=True), cfg.model_dump(mode="json", exclude_none=True)):
        text = header + yaml.safe_dump({"name": cfg.name, **dump}, sort_keys=False, allow_unicode=True,
                                     default_flow_style=None, width=100)
        if parse_pipeline(text).model_dump() == cfg.model_dump():
            return text
    raise CdcflowError(f"pipeline {cfg.name!r}: its YAML does not read back as the same config")  # a bug


def write_atomically(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it (a name no reader lists), fsync,
    then os.replace. The dag-processor and every reader see the old file or the new one."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise CdcflowError(f"cannot write {path}: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise CdcflowError(f"cannot write {path}: {exc.strerror}") from exc
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a crash
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


@functools.lru_cache(maxsize=32)
def _store(url: str) -> StateStore:
    return StateStore(url)


def store_for(cfg: PipelineConfig | None) -> StateStore:
    """The pipeline's offset store, one per URL for the life of the process: the api-server serves
    every request and scrape from it instead of building an engine (and checking the schema) each time."""
    from cdcflow import runner  # noqa: PLC0415
    from cdcflow.state import default_store_url  # noqa: PLC0415

    return _store(runner.offset_store_url(cfg) if cfg is not None else default_store_url())


class Control:
    """The service. ``dags`` is Airflow (or a double in unit tests)."""

    def __init__(self, dags: DagControl | None = None) -> None:
        self.dags: DagControl = dags or AirflowDags()

    # -- reading -----------------------------------------------------------------------------
    def health(self) -> str | None:
        """None when requests can be served (the offset store answers a query), else why not."""
        try:
            with store_for(None).engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except Exception as exc:  # noqa: BLE001 - any failure is the answer
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            return f"the offset store does not answer: {exc.__class__.__name__}: {first}"
        return None

    def cluster_info(self) -> dict[str, Any]:
        """Kafka Connect's root resource (``GET /``): the version, and the Kafka cluster the pipelines
        read (that of the first valid pipeline's connection; null when none answers in 5 s)."""
        from cdcflow import __version__  # noqa: PLC0415

        cluster = None
        cfg = next((p.config for p in pipelines() if p.config is not None), None)
        if cfg is not None:
            from confluent_kafka.admin import AdminClient  # noqa: PLC0415

            from cdcflow.runner import kafka_client  # noqa: PLC0415

            try:
                cluster = AdminClient(kafka_client(cfg)).list_topics(timeout=5).cluster_id
            except Exception:  # noqa: BLE001 - the root answers without it
                cluster = None
        return {"version": __version__, "commit": "", "kafka_cluster_id": cluster}

    def status(self, name: str) -> Status:
        p = get(name)
        if p.config is None:
            return Status(p.name, "FAILED", f"invalid pipeline config:\n{p.error}", False, False, [], None, None,
                          None, [])
        cfg = p.config
        store = store_for(cfg)
        info: DagInfo | None = self.dags.info(cfg.name)
        stopped = store.operator.get_state(cfg.name) == "stopped"
        last = store.ledger.last_window(cfg.name)
        window, at = last if last else (None, None)
        in_flight = self.dags.active_runs(cfg.name) if info is not None else []
        trace = None
        state: State
        if stopped:  # why, when the last window failed (the dead-letter breaker and schema_changes pause stop it)
            state = "STOPPED"
            trace = window.message if window is not None and window.status == "failed" else None
        elif info is None:
            state = "UNASSIGNED"
            trace = f"no DAG in Airflow yet: {DAG_APPEARS}"
        elif info.is_paused:
            state = "PAUSED"
        elif window is not None and window.status == "failed":
            state, trace = "FAILED", window.message
        else:
            state = "RUNNING"
        return Status(cfg.name, state, trace, bool(info and info.is_paused), stopped, in_flight, window, at,
                      cfg.schedule, [f"{s.type}:{s.name}" for s in cfg.sinks])

    def windows(self, name: str, limit: int = 20) -> list[tuple[WindowPlan, datetime, datetime]]:
        cfg = valid(name)
        store = store_for(cfg)
        plans = store.ledger.history(cfg.name, limit)
        times = store.ledger.window_times(cfg.name, [w.run_id for w in plans])
        return [(w, *times[w.run_id]) for w in plans if w.run_id in times]

    def offsets(self, name: str) -> list[PartitionOffsets]:
        from cdcflow import runner  # noqa: PLC0415
        from connectors.kafka.reader import discover  # noqa: PLC0415

        cfg = valid(name)
        stored = runner.stored_offsets(cfg, store_for(cfg))  # exactly-once: the MySQL sink's (the authority)
        return [PartitionOffsets(s.topic, s.partition, stored.get((s.topic, s.partition)), s.low, s.end)
                for s in discover(runner.consumer_conf(cfg), runner.source_topics(cfg))]

    def stored_offsets(self, name: str) -> dict[tuple[str, int], int]:
        from cdcflow import runner  # noqa: PLC0415

        cfg = valid(name)
        return runner.stored_offsets(cfg, store_for(cfg))

    # -- lag -------------------------------------------------------------------------------------
    def sample(self, name: str) -> dict[tuple[str, int], tuple[int | None, int]]:
        """Read every partition's log end from the broker now (no window) and record it with the
        stored offset: the monitor's sample."""
        from cdcflow import runner  # noqa: PLC0415
        from connectors.kafka.reader import discover  # noqa: PLC0415

        cfg = valid(name)
        store = store_for(cfg)
        stored = store.offsets.load(cfg.name)
        rows = {(s.topic, s.partition): (stored.get((s.topic, s.partition)), s.end)
                for s in discover(runner.consumer_conf(cfg), runner.source_topics(cfg), timeout=10)}
        store.lag.record(cfg.name, "sample", rows)
        return rows

    def lag(self, name: str, refresh: bool | None = None, now: datetime | None = None) -> Any:
        """Burrow-style evaluation (cdcflow.lag). ``refresh``: sample the broker first; None = only
        when the newest sample is older than monitor.sample_interval."""
        from cdcflow import lag as lagmod  # noqa: PLC0415

        cfg = valid(name)
        store = store_for(cfg)
        now = now or datetime.now(UTC).replace(tzinfo=None)
        entries = store.lag.entries(cfg.name, per_partition=max(50, 2 * cfg.monitor.window))
        newest = max((e.at for rows in entries.values() for e in rows if e.source in ("sample", "plan")),
                     default=None)
        if refresh or (refresh is None and (newest is None
                                            or (now - newest).total_seconds() > cfg.monitor.sample_interval)):
            self.sample(cfg.name)
            entries = store.lag.entries(cfg.name, per_partition=max(50, 2 * cfg.monitor.window))
        partitions = sorted(set(entries) | set(store.offsets.load(cfg.name)))
        replays = frozenset(store.ledger.run_ids(cfg.name, origin="params"))
        return lagmod.from_entries(cfg.name, cfg.group_id, entries, partitions, replays, now,
                                   cfg.monitor.window, cfg.monitor.stop_after)

    def lag_history(self, name: str, per_partition: int = 50) -> dict[tuple[str, int], list[Any]]:
        """The stored lag entries of each partition, oldest first (``LagHistory.entries``): the
        page's lag chart. Reads only; :meth:`lag` samples the broker when its samples are stale."""
        cfg = valid(name)
        return dict(store_for(cfg).lag.entries(cfg.name, per_partition=per_partition))

    # -- lifecycle -----------------------------------------------------------------------------
    def _dag(self, name: str) -> DagInfo:
        info = self.dags.info(name)
        if info is None:
            raise Conflict(f"pipeline {name!r} has no DAG in Airflow yet (the dag-processor has not parsed "
                           "it, or its file is invalid); wait for it to appear in the DAG list")
        return info

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

    # -- schema changes waiting for an operator (schema_changes: pause) ---------------------------
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

    # -- creating, changing and deleting pipelines (Connect's PUT /config and DELETE) --------------
    def put_config(self, name: str, data: Mapping[str, Any], user: str) -> tuple[PipelineConfig, bool]:
        """Create or replace the pipeline ``name`` from a nested config (validated by the same models as
        the files). An existing pipeline's file is rewritten in place, a new one is ``<name>.yaml`` in
        the config directory. Returns the config and whether it is new. Windows read the file when their
        tasks start; a new pipeline's DAG appears when the dag-processor re-parses (DAG_APPEARS)."""
        check_name(name)
        data = dict(data)
        if data.setdefault("name", name) != name:
            raise BadRequest(f"name: expected {name!r} (the name in the path), got {data['name']!r}")
        try:
            cfg = PipelineConfig.model_validate(data)
        except ValidationError as exc:
            raise BadRequest(format_validation_error(f"config of connector {name}", "", exc, data)) from None
        directory = config_dir()
        existing = next((p for p in pipelines(directory) if p.name == name), None)
        if existing is not None:
            path = existing.path
        else:
            path = directory / f"{name}.yaml"
            if path.exists():  # a file of another name (an invalid file's name is read from it)
                raise Conflict(f"{path} exists and does not define pipeline {name!r}; rename or remove it first")
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        write_atomically(path, pipeline_yaml(cfg, f"written by PUT /connectors/{name}/config ({user}, {stamp})"))
        log.info("pipeline %s %s by %s: %s", name, "created" if existing is None else "changed", user, path)
        return cfg, existing is None

    def delete(self, name: str, user: str) -> Path:
        """Remove the pipeline's file, only while it is STOPPED with no run queued or running (Connect
        deletes at once; a file removed under a running window would fail it midway). Its offsets,
        ledger and state stay (KEPT_ON_DELETE). The DAG leaves Airflow's DAG list when the
        dag-processor re-parses; its runs' history stays in Airflow."""
        check_name(name)
        p = get(name)
        if p.config is None:
            raise Conflict(f"pipeline {name!r} cannot be STOPPED while its file {p.path} does not validate: fix it "
                           f"(PUT /connectors/{name}/config), stop it, then delete it; or remove the file by "
                           f"hand (it has no DAG that could run):\n{p.error}")
        self._require_stopped(p.config, DELETE_NEEDS_STOP)
        try:
            p.path.unlink()
        except FileNotFoundError:
            raise NotFound(f"Connector {name} not found (its file {p.path} is gone)") from None
        except OSError as exc:
            raise CdcflowError(f"cannot remove {p.path}: {exc.strerror}") from exc
        log.info("pipeline %s deleted by %s: %s removed; %s", name, user, p.path, KEPT_ON_DELETE.replace("{name}", name))
        return p.path

    def run_now(self, name: str, user: str, conf: Mapping[str, Any] | None = None, note: str | None = None) -> str:
        """Trigger one window now (also Connect's restart). Returns the Airflow run id."""
        from cdcflow.errors import ConfigError  # noqa: PLC0415
        from cdcflow.runner import RunParams  # noqa: PLC0415

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

    # -- offsets (Connect: only while STOPPED) --------------------------------------------------
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

    def alter_offsets(self, name: str, offsets: Mapping[tuple[str, int], int | None], user: str) -> dict[str, Any]:
        """Set (or, with None, forget) the stored offset of the given partitions."""
        cfg = valid(name)
        store = self._require_stopped(cfg)
        if not offsets:
            raise BadRequest("no offsets given")
        parts = {(o.topic, o.partition): o for o in self.offsets(cfg.name)}
        problems = []
        for (topic, partition), off in offsets.items():
            state = parts.get((topic, partition))
            if state is None:
                problems.append(f"{topic}[{partition}] is not a partition of this pipeline's topics "
                                f"({cfg.source.described})")
            elif off is not None and not state.log_start <= off <= state.log_end:
                problems.append(f"{topic}[{partition}]: offset {off} is outside the log "
                                f"[{state.log_start}, {state.log_end}]")
        if problems:
            raise BadRequest("; ".join(problems))
        by = f"offsets-altered-by:{user}@{datetime.now(UTC):%Y-%m-%dT%H:%M:%S}"
        from cdcflow import runner  # noqa: PLC0415

        runner.set_offsets(cfg, store, offsets, by)
        return {"message": "The offsets for this connector have been altered successfully"}

    def reset_offsets(self, name: str, to: str, user: str, timestamp_ms: int | None = None) -> dict[str, Any]:
        """Reset every partition to ``earliest``, ``latest`` or the first offset at/after ``timestamp``;
        ``forget`` removes the stored offsets (the next window starts from initial_offsets)."""
        cfg = valid(name)
        if to not in ("earliest", "latest", "timestamp", "forget"):
            raise BadRequest(f"reset to {to!r}: expected earliest, latest, timestamp or forget")
        if to == "timestamp" and timestamp_ms is None:
            raise BadRequest("reset to a timestamp needs the timestamp (ISO 8601 or epoch ms)")
        self._require_stopped(cfg)
        from cdcflow import runner  # noqa: PLC0415

        if to == "forget":
            runner.clear_offsets(cfg, store_for(cfg))
            return {"message": "The offsets for this connector have been reset successfully"}
        parts = self.offsets(cfg.name)
        if to == "earliest":
            target = {(p.topic, p.partition): p.log_start for p in parts}
        elif to == "latest":
            target = {(p.topic, p.partition): p.log_end for p in parts}
        else:
            assert timestamp_ms is not None
            from connectors.kafka.reader import offsets_for_time  # noqa: PLC0415

            target = offsets_for_time(runner.consumer_conf(cfg), [(p.topic, p.partition, p.log_start, p.log_end)
                                                                  for p in parts], timestamp_ms,
                                      source=cfg.source.timestamp)
        self.alter_offsets(cfg.name, dict(target), user)
        return {"message": "The offsets for this connector have been altered successfully",
                "offsets": {f"{t}:{p}": o for (t, p), o in sorted(target.items())}}

    # -- dead letters --------------------------------------------------------------------------
    def _dlq(self, name: str) -> tuple[PipelineConfig, str]:
        cfg = valid(name)
        if not cfg.errors.dlq_topic:
            raise BadRequest(f"pipeline {cfg.name!r} has no dead-letter topic (errors.dlq_topic)")
        return cfg, cfg.errors.dlq_topic

    def dlq(self, name: str, limit: int = 20, before: Mapping[int, int] | None = None) -> DlqPage:
        """The newest dead letters, newest first; ``next_before`` pages to older ones."""
        from cdcflow import runner  # noqa: PLC0415
        from connectors.kafka.dlq import describe, read_dead_letters  # noqa: PLC0415

        if not 1 <= limit <= 500:
            raise BadRequest(f"limit: expected 1..500, got {limit}")
        cfg, topic = self._dlq(name)
        conf = runner.consumer_conf(cfg)
        parts = describe(conf, topic)
        total = sum(p.end - p.low for p in parts)
        ends = {p.partition: min(p.end, (before or {}).get(p.partition, p.end)) for p in parts}
        ranges = {p.partition: (max(p.low, ends[p.partition] - limit), ends[p.partition]) for p in parts}
        records = read_dead_letters(conf, topic, ranges)
        records.sort(key=lambda d: (d.timestamp or 0, d.partition, d.offset), reverse=True)
        page = records[:limit]
        nxt = dict(ends)
        for d in page:
            nxt[d.partition] = min(nxt[d.partition], d.offset)
        more = any(nxt[p.partition] > p.low for p in parts)
        done = store_for(cfg).operator.redrives(cfg.name, topic)
        return DlqPage(topic, page, total, nxt if more else None,
                       {(d.partition, d.offset): done[(d.partition, d.offset)] for d in page
                        if (d.partition, d.offset) in done
                        and done[(d.partition, d.offset)].fingerprint == d.fingerprint})

    def dlq_record(self, name: str, partition: int, offset: int) -> Any:
        from cdcflow import runner  # noqa: PLC0415
        from connectors.kafka.dlq import read_dead_letters  # noqa: PLC0415

        cfg, topic = self._dlq(name)
        found = read_dead_letters(runner.consumer_conf(cfg), topic, {partition: (offset, offset + 1)})
        if not found:
            raise NotFound(f"no record at offset {offset} of partition {partition} of DLQ topic {topic!r}")
        return found[0]

    def redrive(self, name: str, user: str, *, partition: int | None = None, start: int | None = None,
                end: int | None = None, stage: str | None = None, error_class: str | None = None,
                target_topic: str | None = None) -> RedriveResult:
        """Send dead letters back: all (no range), or ``partition`` from ``start`` to ``end``
        (inclusive), optionally only those of a stage or error class; to their original topic or
        ``target_topic``. A record already redriven is never sent again; if that leaves nothing to
        send, Conflict says when and by whom it was."""
        from cdcflow import runner  # noqa: PLC0415
        from connectors.kafka.client import producer_config  # noqa: PLC0415
        from connectors.kafka.dlq import REDRIVE_HEADER, describe, read_dead_letters, republish  # noqa: PLC0415

        cfg, topic = self._dlq(name)
        if (start is not None or end is not None) and partition is None:
            raise BadRequest("a range (start/end) needs its DLQ partition")
        if start is not None and end is not None and end < start:
            raise BadRequest(f"end {end} is before start {start}")
        if target_topic is not None and target_topic == topic:
            raise BadRequest("redriving into the dead-letter topic itself would loop")
        conf = runner.consumer_conf(cfg)
        parts = {p.partition: p for p in describe(conf, topic)}
        if partition is not None and partition not in parts:
            raise NotFound(f"DLQ topic {topic!r} has no partition {partition} (partitions: {sorted(parts)})")
        ranges = {p.partition: (max(p.low, start if start is not None and p.partition == partition else p.low),
                                min(p.end, end + 1 if end is not None and p.partition == partition else p.end))
                  for p in parts.values() if partition is None or p.partition == partition}
        records = [d for d in read_dead_letters(conf, topic, ranges)
                   if (stage is None or d.stage == stage) and (error_class is None or d.error_class == error_class)]
        if not records:
            raise NotFound(f"no dead letter in {topic!r} matches {_describe_selection(partition, start, end, stage, error_class)}")
        store = store_for(cfg)
        prints = {(d.partition, d.offset): d.fingerprint for d in records}
        done = {k: r for k, r in store.operator.redrives(cfg.name, topic).items() if prints.get(k) == r.fingerprint}
        already = [{"partition": d.partition, "offset": d.offset, "status": done[(d.partition, d.offset)].status,
                    "target_topic": done[(d.partition, d.offset)].target_topic,
                    "by": done[(d.partition, d.offset)].requested_by,
                    "at": done[(d.partition, d.offset)].updated_at.isoformat() + "Z"}
                   for d in records if (d.partition, d.offset) in done]
        todo = [d for d in records if (d.partition, d.offset) not in done]
        if not todo:
            first = already[0]
            raise Conflict(f"all {len(already)} matching dead letters were redriven already (e.g. partition "
                           f"{first['partition']} offset {first['offset']} to {first['target_topic']!r} by "
                           f"{first['by']} at {first['at']}, status {first['status']}); nothing was sent again")
        missing = [d for d in todo if not (target_topic or d.original_topic)]
        if missing:
            raise BadRequest(f"{len(missing)} dead letters have no __connect.errors.topic header (e.g. offset "
                             f"{missing[0].offset}); give a target topic")
        request_id = uuid.uuid4().hex[:16]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        plan = [(target_topic or d.original_topic or "", d) for d in todo]
        store.operator.claim_redrives(cfg.name, topic, [(d.partition, d.offset, t, d.fingerprint) for t, d in plan],
                             request_id, user)
        marker = lambda d: (REDRIVE_HEADER, json.dumps(  # noqa: E731
            {"dlq": f"{topic}/{d.partition}/{d.offset}", "request": request_id, "by": user, "at": now}).encode())
        try:
            republish(producer_config(runner.kafka_client(cfg)), [(t, d, marker(d)) for t, d in plan])
        except CdcflowError:
            # nothing confirmed: Kafka's idempotent producer may still have written some, so the claims
            # stay "pending" and a later request reports them instead of sending twice
            raise
        store.operator.finish_redrives(cfg.name, request_id)
        return RedriveResult(request_id, [{"partition": d.partition, "offset": d.offset, "target_topic": t,
                                           "original": f"{d.original_topic}[{d.original_partition}]@{d.original_offset}"}
                                          for t, d in plan], already, len(records))


def _describe_selection(partition: int | None, start: int | None, end: int | None, stage: str | None,
                        error_class: str | None) -> str:
    parts = [f"partition {partition}" if partition is not None else "all partitions"]
    if start is not None or end is not None:
        parts.append(f"offsets {start if start is not None else 'first'}..{end if end is not None else 'last'}")
    if stage:
        parts.append(f"stage {stage!r}")
    if error_class:
        parts.append(f"error class {error_class!r}")
    return ", ".join(parts)


def parse_time(value: str | int) -> int:
    """Epoch milliseconds from an ISO 8601 time with a zone, or from epoch milliseconds."""
    try:
        return parse_instant(value)
    except ValueError as exc:
        raise BadRequest(f"timestamp {exc}") from None
