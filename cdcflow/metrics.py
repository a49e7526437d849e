"""Prometheus metrics for every pipeline: counters from the state store's cumulative totals, gauges
from the ledger, the offset store and a fresh log-end sample (taken when the newest is older than
``monitor.sample_interval``).

Why not counted in the task processes: every window runs in a short-lived Airflow task process, so
in-process counters would die with it, and prometheus_client's multi-process mode needs a shared
directory on every worker. Why not summed from the ledger at scrape time, as they were: retention
prunes the ledger, and a counter that goes down is a restart to Prometheus. So each committed window
adds to cdcflow/state/totals.py once, in the transaction of its commit; the totals are never pruned,
and every counter here is monotonic across scrapes, prunes and api-server restarts. What can change
(a window's status) is a gauge. Each metric's meaning: docs/operating.md, "Metrics".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from cdcflow import control
from cdcflow.lag import STATUS_CODE
from cdcflow.state import totals

log = logging.getLogger("cdcflow.metrics")
DURATION_BUCKETS = totals.DURATION_BUCKETS
PARTITION_STATUSES = ("OK", "WARN", "STOP", "STALL", "REWIND")


class _Families:
    """The metric families of one scrape, empty until filled."""

    def __init__(self) -> None:
        self.read = CounterMetricFamily(totals.RECORDS_READ, "Records read by committed windows (each window "
                                        "counted once, when it commits)", labels=["pipeline", "topic", "partition"])
        self.written = CounterMetricFamily(totals.SINK_RECORDS, "Changes per sink and outcome of committed windows: "
                                           "upserted, deleted, stale (older than what the target holds: skipped), "
                                           "unchanged (equal to what it holds), failed (to the DLQ)",
                                           labels=["pipeline", "sink", "outcome"])
        self.documents = CounterMetricFamily(totals.DOCUMENTS, "A composed index's documents in committed windows: "
                                             "affected (by the window's changes), rebuilt, deleted (their root row "
                                             "gone), carried (put off to later windows by max_documents)",
                                             labels=["pipeline", "sink", "outcome"])
        self.backlog = GaugeMetricFamily("cdcflow_document_backlog", "A composed index's documents waiting to be "
                                         "rebuilt by the next windows (max_documents)", labels=["pipeline", "sink"])
        self.dead = CounterMetricFamily(totals.DEAD_LETTERS, "Records committed windows sent to the dead-letter "
                                        "topic", labels=["pipeline", "stage", "error_class"])
        self.windows = CounterMetricFamily(totals.WINDOWS, "Windows committed, each counted once (outcome is always "
                                           "committed; failed attempts: cdcflow_window_attempts_failed_total, "
                                           "windows in flight: cdcflow_ledger_windows)", labels=["pipeline", "outcome"])
        self.failed = CounterMetricFamily(totals.ATTEMPTS_FAILED, "Window attempts that failed (a window can fail "
                                          "several times before it commits)", labels=["pipeline"])
        self.duration = HistogramMetricFamily(totals.DURATION, "Wall time of committed windows (their processing: "
                                              "read to applied)", labels=["pipeline"])
        self.stage_seconds = HistogramMetricFamily(totals.STAGE_SECONDS, "Wall time per stage of committed windows "
                                                   "(read, decode, project, dlq, sink:<name>)",
                                                   labels=["pipeline", "stage"])
        self.ledger = GaugeMetricFamily("cdcflow_ledger_windows", "Windows the ledger holds now, by status (planned, "
                                        "read, applied: in flight; failed: its last attempt failed; retention "
                                        "removes old ones)", labels=["pipeline", "status"])
        self.committed = GaugeMetricFamily("cdcflow_committed_offset", "Stored (next) offset",
                                           labels=["pipeline", "topic", "partition"])
        self.log_end = GaugeMetricFamily("cdcflow_log_end_offset", "Log end offset, read to the partition's end",
                                         labels=["pipeline", "topic", "partition"])
        self.lag = GaugeMetricFamily("cdcflow_lag_records", "Log end offset minus stored offset",
                                     labels=["pipeline", "topic", "partition"])
        self.pstatus = GaugeMetricFamily("cdcflow_partition_lag_status", "Burrow-style partition status (1 = current)",
                                         labels=["pipeline", "topic", "partition", "status"])
        self.pcode = GaugeMetricFamily("cdcflow_partition_lag_status_code",
                                       "Burrow's status code: 1 OK, 2 WARN, 4 STOP, 5 STALL, 6 REWIND",
                                       labels=["pipeline", "topic", "partition"])
        self.gcode = GaugeMetricFamily("cdcflow_pipeline_lag_status_code", "Burrow's group status: 1 OK, 2 WARN, "
                                       "3 ERR, 0 NOTFOUND", labels=["pipeline"])
        self.total = GaugeMetricFamily("cdcflow_pipeline_lag_records", "Total lag of the pipeline",
                                       labels=["pipeline"])
        self.last_ok = GaugeMetricFamily("cdcflow_last_successful_window_timestamp_seconds",
                                         "When the newest committed window committed (Unix time)", labels=["pipeline"])
        self.since_ok = GaugeMetricFamily("cdcflow_seconds_since_last_successful_window",
                                          "Seconds since the newest committed window committed", labels=["pipeline"])
        self.state = GaugeMetricFamily("cdcflow_pipeline_state", "Pipeline state (1 = current)",
                                       labels=["pipeline", "state"])
        self.last_failed = GaugeMetricFamily("cdcflow_last_window_failed", "1 when the newest window failed "
                                             "(offsets did not move; Airflow retries), whatever the pipeline's state",
                                             labels=["pipeline"])
        self.up = GaugeMetricFamily("cdcflow_monitor_up", "1 when the pipeline's lag could be evaluated now, 0 when "
                                    "the broker or the store failed (see the api-server log)", labels=["pipeline"])

    def all(self) -> tuple[Any, ...]:
        return (self.read, self.written, self.documents, self.backlog, self.dead, self.windows, self.failed, self.duration, self.stage_seconds,
                self.ledger, self.committed, self.log_end, self.lag, self.pstatus, self.pcode, self.gcode,
                self.total, self.last_ok, self.since_ok, self.state, self.last_failed, self.up)


class PipelineCollector(Collector):
    def __init__(self, service: control.Control | None = None) -> None:
        self.service = service or control.Control()

    def collect(self) -> Iterator[Any]:
        """One pass over every pipeline: its counters from the totals, its windows from the ledger, its
        state and lag from the service."""
        now = datetime.now(UTC).replace(tzinfo=None)
        f = _Families()
        for p in control.pipelines():
            if p.config is None:
                f.state.add_metric([p.name, "CONFIG_ERROR"], 1)
                continue
            name = p.name
            try:
                store = control.store_for(p.config)
                _windows(f, name, store, now)
                _backlogs(f, p.config, store)
                f.state.add_metric([name, self.service.status(name).state], 1)
                evaluated = self.service.lag(name)
            except Exception as exc:  # one pipeline's broken broker or store must not hide the others
                log.warning("metrics of pipeline %s: %s: %s", name, exc.__class__.__name__, exc)
                f.up.add_metric([name], 0)
                continue
            f.up.add_metric([name], 1)
            _lag(f, name, evaluated)
        yield from (*f.all(), spark_up(control.pipelines()))


def _histogram(fam: HistogramMetricFamily, name: str, rows: dict[str, list[tuple[dict[str, str], float]]],
               pipeline: str, *labels: str) -> None:
    """A histogram's series from its totals: per label set, the observations of each bucket (stored
    per bucket, not cumulative: state/totals.py) added up into Prometheus's cumulative buckets."""
    counts: dict[tuple[str, ...], dict[float, float]] = {}
    for row_labels, n in rows.get(f"{name}_bucket", []):
        per = counts.setdefault(tuple(row_labels[k] for k in labels), {})
        le = float(row_labels["le"])
        per[le] = per.get(le, 0.0) + n
    sums = {tuple(row_labels[k] for k in labels): v for row_labels, v in rows.get(f"{name}_sum", [])}
    for key, per in sorted(counts.items()):
        buckets = [(str(b), sum(n for le, n in per.items() if le <= b)) for b in totals.DURATION_BUCKETS]
        buckets.append(("+Inf", sum(per.values())))
        fam.add_metric([pipeline, *key], buckets, sums.get(key, 0.0))


def _windows(f: _Families, name: str, store: Any, now: datetime) -> None:
    """A pipeline's counters from its totals (records read, windows committed, failed attempts, sink
    changes, dead letters, durations and stage times); from the ledger, its windows by status now
    and whether the newest failed."""
    rows = store.totals.read(name)

    def values(metric: str, *labels: str) -> list[tuple[list[str], float]]:
        return [([name, *(row_labels[k] for k in labels)], v) for row_labels, v in rows.get(metric, [])]

    for family, metric, labels in ((f.read, totals.RECORDS_READ, ("topic", "partition")),
                                   (f.written, totals.SINK_RECORDS, ("sink", "outcome")),
                                   (f.documents, totals.DOCUMENTS, ("sink", "outcome")),
                                   (f.dead, totals.DEAD_LETTERS, ("stage", "error_class"))):
        for label_values, v in values(metric, *labels):
            family.add_metric(label_values, v)
    committed = values(totals.WINDOWS, "outcome")
    f.windows.add_metric([name, "committed"], sum(v for _l, v in committed))
    f.failed.add_metric([name], sum(v for _l, v in values(totals.ATTEMPTS_FAILED)))
    _histogram(f.duration, totals.DURATION, rows, name)
    _histogram(f.stage_seconds, totals.STAGE_SECONDS, rows, name, "stage")
    counts = store.ledger.status_counts(name)
    for status in ("planned", "read", "applied", "committed", "failed"):
        f.ledger.add_metric([name, status], counts.get(status, 0))
    f.last_failed.add_metric([name], 1 if store.ledger.newest_status(name) == "failed" else 0)
    newest_ok = [v for _l, v in values(totals.LAST_COMMITTED)]
    if newest_ok:
        f.last_ok.add_metric([name], newest_ok[0])
        f.since_ok.add_metric([name], max(0.0, now.replace(tzinfo=UTC).timestamp() - newest_ok[0]))


def _backlogs(f: _Families, cfg: Any, store: Any) -> None:
    """Each composed index's documents waiting for the next windows (docs/composed-documents.md)."""
    for sink in cfg.sinks:
        if getattr(sink, "document", None) is not None:
            f.backlog.add_metric([cfg.name, sink.name], store.documents.backlog_size(cfg.name, sink.name))


def _lag(f: _Families, name: str, evaluated: Any) -> None:
    """A pipeline's lag, Burrow-style: per partition its offsets, lag and status; the group's status."""
    for pl in evaluated.partitions:
        labels = [name, pl.topic, str(pl.partition)]
        if pl.committed is not None:
            f.committed.add_metric(labels, pl.committed)
        if pl.log_end is not None:
            f.log_end.add_metric(labels, pl.log_end)
        f.lag.add_metric(labels, pl.current_lag)
        for s in PARTITION_STATUSES:
            f.pstatus.add_metric([*labels, s], 1 if pl.status == s else 0)
        f.pcode.add_metric(labels, STATUS_CODE[pl.status])
    f.gcode.add_metric([name], STATUS_CODE[evaluated.status])
    f.total.add_metric([name], evaluated.total_lag)


SPARK_PROBE_EVERY = 30.0  # seconds a probe's answer is reused (Prometheus scrapes every 15 s)
_spark_probes: dict[str, tuple[float, str | None]] = {}


def spark_state(remote: str) -> str | None:
    """None when the long-lived Spark at ``remote`` runs a one-row job (spark_jobs/health.py, in a
    child process: a hung server cannot hang the scrape), else why not; reused for 30 s."""
    import time  # noqa: PLC0415

    from spark_jobs.health import probe_in_child  # noqa: PLC0415

    checked = _spark_probes.get(remote)
    if checked is None or time.monotonic() - checked[0] > SPARK_PROBE_EVERY:
        checked = (time.monotonic(), probe_in_child(remote, timeout=20.0))
        _spark_probes[remote] = checked
    return checked[1]


def spark_states(pipelines: list[Any]) -> list[tuple[str, str | None]]:
    """(remote, None when up else why) of each long-lived Spark the pipelines run on (spark.mode
    connect); the metrics and the page both show it."""
    from spark_jobs.session import resolve_remote  # noqa: PLC0415

    remotes = sorted({resolve_remote(p.config.spark) for p in pipelines
                      if p.config is not None and p.config.spark.mode == "connect"})
    return [(remote, spark_state(remote)) for remote in remotes]


def spark_up(pipelines: list[Any]) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily("cdcflow_spark_up", "1 when the long-lived Spark (Spark Connect) runs a one-row job, "
                              "0 when it is down or its Spark context has stopped", labels=["remote"])
    for remote, why in spark_states(pipelines):
        gauge.add_metric([remote], 1 if why is None else 0)
    return gauge


def render(service: control.Control | None = None) -> tuple[bytes, str]:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415
    from prometheus_client.registry import CollectorRegistry  # noqa: PLC0415

    registry = CollectorRegistry(auto_describe=False)
    registry.register(PipelineCollector(service))
    return generate_latest(registry), CONTENT_TYPE_LATEST
