"""Prometheus metrics for every pipeline, derived at scrape time from the offset store and the window
ledger (plus a fresh log-end sample when the newest is older than ``monitor.sample_interval``).

Why derived, not counted in the task processes: every window runs in a short-lived Airflow task
process, so in-process counters would die with it, and prometheus_client's multi-process mode needs a
shared directory on every worker. The ledger already holds each window's outcome and statistics, in
the same database as the offsets, so counters read from it survive any process and agree with the
page and the API. A counter only goes down if ledger rows are deleted (Prometheus's rate() treats
that as a reset).
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

log = logging.getLogger("cdcflow.metrics")
DURATION_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
PARTITION_STATUSES = ("OK", "WARN", "STOP", "STALL", "REWIND")


def _histogram(name: str, doc: str, labels: list[str], series: dict[tuple[str, ...], list[float]]) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=labels)
    for key, values in sorted(series.items()):
        buckets = [(str(b), float(sum(1 for v in values if v <= b))) for b in DURATION_BUCKETS]
        buckets.append(("+Inf", float(len(values))))
        fam.add_metric(list(key), buckets, sum(values))
    return fam


class _Families:
    """The metric families of one scrape, empty until filled."""

    def __init__(self) -> None:
        self.read = CounterMetricFamily("cdcflow_records_read", "Records read by windows that were applied",
                                   labels=["pipeline", "topic", "partition"])
        self.written = CounterMetricFamily("cdcflow_sink_records", "Changes applied per sink and outcome "
                                      "(upserted, deleted, stale = skipped as older, failed = to the DLQ)",
                                      labels=["pipeline", "sink", "outcome"])
        self.dead = CounterMetricFamily("cdcflow_dead_letters", "Records sent to the dead-letter topic",
                                   labels=["pipeline", "stage", "error_class"])
        self.windows = CounterMetricFamily("cdcflow_windows", "Windows by their latest outcome "
                                      "(committed, failed, applied, read, planned)", labels=["pipeline", "outcome"])
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
        self.gcode = GaugeMetricFamily("cdcflow_pipeline_lag_status_code", "Burrow's group status: 1 OK, 2 WARN, 3 ERR, "
                                  "0 NOTFOUND", labels=["pipeline"])
        self.total = GaugeMetricFamily("cdcflow_pipeline_lag_records", "Total lag of the pipeline", labels=["pipeline"])
        self.last_ok = GaugeMetricFamily("cdcflow_last_successful_window_timestamp_seconds",
                                    "When the newest committed window committed (Unix time)", labels=["pipeline"])
        self.since_ok = GaugeMetricFamily("cdcflow_seconds_since_last_successful_window",
                                     "Seconds since the newest committed window committed", labels=["pipeline"])
        self.state = GaugeMetricFamily("cdcflow_pipeline_state", "Pipeline state (1 = current)",
                                  labels=["pipeline", "state"])
        self.last_failed = GaugeMetricFamily("cdcflow_last_window_failed", "1 when the newest window failed (offsets "
                                        "did not move; Airflow retries), whatever the pipeline's state",
                                        labels=["pipeline"])
        self.up = GaugeMetricFamily("cdcflow_monitor_up", "1 when the pipeline's lag could be evaluated now, 0 when "
                               "the broker or the store failed (see the api-server log)", labels=["pipeline"])

    def all(self) -> tuple[Any, ...]:
        return (self.read, self.written, self.dead, self.windows, self.committed, self.log_end, self.lag,
                self.pstatus, self.pcode, self.gcode, self.total, self.last_ok, self.since_ok, self.state,
                self.last_failed, self.up)


class PipelineCollector(Collector):
    def __init__(self, service: control.Control | None = None) -> None:
        self.service = service or control.Control()

    def collect(self) -> Iterator[Any]:
        """One pass over every pipeline: its windows from the ledger, its state and lag from the service."""
        now = datetime.now(UTC).replace(tzinfo=None)
        f = _Families()
        durations: dict[tuple[str, ...], list[float]] = {}
        stages: dict[tuple[str, ...], list[float]] = {}
        for p in control.pipelines():
            if p.config is None:
                f.state.add_metric([p.name, "CONFIG_ERROR"], 1)
                continue
            name = p.name
            try:
                _windows(f, name, control.store_for(p.config), now, durations, stages)
                f.state.add_metric([name, self.service.status(name).state], 1)
                evaluated = self.service.lag(name)
            except Exception as exc:  # one pipeline's broken broker or store must not hide the others
                log.warning("metrics of pipeline %s: %s: %s", name, exc.__class__.__name__, exc)
                f.up.add_metric([name], 0)
                continue
            f.up.add_metric([name], 1)
            _lag(f, name, evaluated)
        yield from (*f.all(), spark_up(control.pipelines()))
        yield _histogram("cdcflow_window_duration_seconds", "Wall time of applied windows", ["pipeline"], durations)
        yield _histogram("cdcflow_window_stage_seconds", "Wall time per stage of applied windows "
                         "(read, decode, project, dlq, sink:<name>)", ["pipeline", "stage"], stages)


def _windows(f: _Families, name: str, store: Any, now: datetime, durations: dict[tuple[str, ...], list[float]],
             stages: dict[tuple[str, ...], list[float]]) -> None:
    """A pipeline's counters from the ledger: records read, windows by outcome, sink changes, dead
    letters, the newest committed window; its applied windows' durations and stage times."""
    for (t, part), n in sorted(store.ledger.records_read(name).items()):
        f.read.add_metric([name, t, str(part)], n)
    outcomes: dict[str, int] = {}
    sinks: dict[tuple[str, str], int] = {}
    dls: dict[tuple[str, str], int] = {}
    newest_ok: datetime | None = None
    summary = store.ledger.windows_summary(name)
    f.last_failed.add_metric([name], 1 if summary and summary[-1][1] == "failed" else 0)
    for _run, status, _origin, stats, at in summary:
        outcomes[status] = outcomes.get(status, 0) + 1
        if status not in ("applied", "committed"):
            continue
        if status == "committed":
            newest_ok = at if newest_ok is None or at > newest_ok else newest_ok
        for sink, s in (stats.get("sinks") or {}).items():
            for outcome in ("upserted", "deleted", "stale", "failed"):
                sinks[(sink, outcome)] = sinks.get((sink, outcome), 0) + int(s.get(outcome, 0))
        for d in stats.get("dead_letters") or []:
            key = (d["stage"], d["error_class"])
            dls[key] = dls.get(key, 0) + int(d["count"])
        if stats.get("seconds") is not None:
            durations.setdefault((name,), []).append(float(stats["seconds"]))
        for stage, secs in (stats.get("stages") or {}).items():
            stages.setdefault((name, stage), []).append(float(secs))
    for outcome in ("planned", "read", "applied", "committed", "failed"):
        f.windows.add_metric([name, outcome], outcomes.get(outcome, 0))
    for (sink, outcome), n in sorted(sinks.items()):
        f.written.add_metric([name, sink, outcome], n)
    for (stage, cls), n in sorted(dls.items()):
        f.dead.add_metric([name, stage, cls], n)
    if newest_ok is not None:
        ts = newest_ok.replace(tzinfo=UTC).timestamp()
        f.last_ok.add_metric([name], ts)
        f.since_ok.add_metric([name], max(0.0, now.replace(tzinfo=UTC).timestamp() - ts))


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
