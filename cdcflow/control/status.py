"""Reading a pipeline: its state (RUNNING, PAUSED, STOPPED, FAILED, UNASSIGNED; the package's
docstring says what each means), its windows and its partitions' offsets, and the service's own
health and Connect's root resource."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from cdcflow.airflow.dag_control import DagInfo, DagRunInfo
from cdcflow.control.base import ControlBase
from cdcflow.control.pipelines import get, pipelines, store_for, valid
from cdcflow.state import WindowPlan
from cdcflow.window import clients

State = Literal["RUNNING", "PAUSED", "STOPPED", "FAILED", "UNASSIGNED"]

# How soon Airflow knows a pipeline file written through the API: the dag-processor re-parses
# dags/cdcflow_pipelines.py (which reads the config directory) every min_file_process_interval.
DAG_APPEARS = ("the dag-processor re-parses the pipeline files every [dag_processor] min_file_process_interval "
               "(30 s by default)")


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


class Reading(ControlBase):
    """What the page, ``GET /connectors/...`` and ``cdcflow status`` read."""

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

            from cdcflow.window.clients import kafka_client  # noqa: PLC0415

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

    def composed(self, name: str) -> list[dict[str, Any]]:
        """The pipeline's composed indices (docs/composed-documents.md): each one's relations, the last
        document version handed out, and the root keys carried over to the next windows."""
        from connectors.elasticsearch import compose  # noqa: PLC0415

        cfg = valid(name)
        store = store_for(cfg)
        out = []
        for sink in cfg.sinks:
            document = getattr(sink, "document", None)
            if document is None:
                continue
            relations = []
            for node in compose.graph(document).walk():
                if node.parent is None:
                    relations.append(f"{node.table} (root, key {', '.join(document.root.key)})")
                    continue
                on = " AND ".join(f"{node.table}.{c} = {node.parent.table}.{p}" for c, p in node.on)
                kind = "N:1 lookup" if node.kind == "lookup" else "1:N nested"
                relations.append(f"{node.name}: {node.table} ({kind} on {on})")
            out.append({"sink": sink.name, "index": sink.index, "relations": relations,  # type: ignore[union-attr]
                        "version": store.documents.version(cfg.name, sink.name),
                        "backlog": store.documents.backlog_size(cfg.name, sink.name),
                        "max_documents": document.max_documents})
        return out

    def offsets(self, name: str) -> list[PartitionOffsets]:
        from connectors.kafka.reader import discover  # noqa: PLC0415

        cfg = valid(name)
        stored = clients.stored_offsets(cfg, store_for(cfg))  # exactly-once: the MySQL sink's (the authority)
        return [PartitionOffsets(s.topic, s.partition, stored.get((s.topic, s.partition)), s.low, s.end)
                for s in discover(clients.consumer_conf(cfg), clients.source_topics(cfg))]

    def stored_offsets(self, name: str) -> dict[tuple[str, int], int]:

        cfg = valid(name)
        return clients.stored_offsets(cfg, store_for(cfg))

