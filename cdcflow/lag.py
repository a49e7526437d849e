"""Consumer lag over time, evaluated the way Burrow does (seed 003: lag = log end − committed offset,
and what matters is its trend), for every partition of a pipeline.

Entries come from the offset store's lag table: one per partition at each window's commit (the
committed offset, and the log end offset seen when the window was planned) and one per partition at
each sample (``cdcflow monitor``, or the metrics endpoint when its samples are older than
``monitor.sample_interval``: the log end read from the broker, the stored offset).

The evaluation follows Burrow's rules over the last ``monitor.window`` commits of a partition,
checked in this order:

* the current lag (latest log end − stored offset) is 0 → ``OK``, whatever happened before;
* no commit for longer than ``monitor.stop_after`` (and lag > 0) → ``STOP``;
* if the lag was 0 at any commit in the window → ``OK`` (the consumer caught up recently);
* the committed offset went back between two commits → ``REWIND``; in cdcflow only an operator
  does that (a replay or an offset reset), so the entry names the run and the pipeline's status
  does not turn to an error for it;
* the committed offset did not move over the window (full window, lag > 0) → ``STALL``;
* the lag did not decrease between any two commits of a full window → ``WARN`` (falling behind);
* otherwise ``OK``.

A pipeline's status is the worst partition's: ``OK`` < ``WARN`` < ``ERR`` (STOP and STALL are
errors; REWIND is not), with the partition of the most lag, the total lag, and ``complete``, the
share of the sliding window that is filled.

What the figures can be trusted for (see ../shared/ENVIRONMENT.md): log ends come from reading each
partition to its end, not from the broker's high watermark, so they are exact at the time they were
read; a commit's lag uses the log end of its window's plan, so records that arrived while the window
ran show up at the next sample, not earlier. Lag counts offsets, which on a compacted topic or with
transaction markers can exceed the records left to read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

PartitionStatus = Literal["OK", "WARN", "STOP", "STALL", "REWIND"]
GroupStatus = Literal["OK", "WARN", "ERR", "NOTFOUND"]
SEVERITY: dict[str, int] = {"OK": 0, "REWIND": 0, "WARN": 1, "STOP": 2, "STALL": 2}
OPERATOR_PREFIXES = ("offsets-altered-by:", "manual-reset@")
# Burrow's numeric constants, for the gauge
STATUS_CODE: dict[str, int] = {"NOTFOUND": 0, "OK": 1, "WARN": 2, "ERR": 3, "STOP": 4, "STALL": 5, "REWIND": 6}


@dataclass(frozen=True)
class Commit:
    """One commit of a partition: the committed (next) offset and the lag when it was committed."""

    offset: int
    lag: int
    at: datetime
    run_id: str = ""


@dataclass
class PartitionLag:
    topic: str
    partition: int
    status: PartitionStatus
    current_lag: int
    committed: int | None
    log_end: int | None
    commits: list[Commit] = field(default_factory=list)
    complete: float = 0.0
    reason: str = ""


@dataclass
class PipelineLag:
    pipeline: str
    group: str
    status: GroupStatus
    partitions: list[PartitionLag]
    total_lag: int
    max_lag: PartitionLag | None
    complete: float


def evaluate_partition(commits: Sequence[Commit], current_lag: int, now: datetime, window: int,
                       stop_after: float, replays: frozenset[str] = frozenset()) -> tuple[PartitionStatus, str]:
    """Burrow's rules on the last ``window`` commits (oldest first). ``replays``: run ids that rewound
    offsets on purpose (a replay, an operator's reset)."""
    recent = list(commits)[-window:]
    if current_lag <= 0:
        return "OK", "no lag"
    if not recent:
        return "OK", "no commit yet"
    idle = (now - recent[-1].at).total_seconds()
    if idle > stop_after:
        return "STOP", f"no commit for {idle:.0f}s (threshold {stop_after:.0f}s) while {current_lag} records wait"
    if any(c.lag == 0 for c in recent):
        return "OK", "lag was 0 within the window"
    for prev, cur in zip(recent, recent[1:], strict=False):
        if cur.offset < prev.offset:
            who = ("a replay" if cur.run_id in replays else "an operator's offset change"
                   if cur.run_id.startswith(OPERATOR_PREFIXES) else "a window")
            return "REWIND", f"offset went back from {prev.offset} to {cur.offset} by {who} ({cur.run_id})"
    full = len(recent) >= window
    if full and all(c.offset == recent[0].offset for c in recent):
        return "STALL", f"offset stuck at {recent[0].offset} over {len(recent)} commits while lag is {current_lag}"
    if full and all(cur.lag >= prev.lag for prev, cur in zip(recent, recent[1:], strict=False)):
        return "WARN", f"lag did not decrease over {len(recent)} commits ({recent[0].lag} → {recent[-1].lag})"
    return "OK", "consuming"


def from_entries(pipeline: str, group: str, entries: dict[tuple[str, int], list[Any]],
                 partitions: list[tuple[str, int]], replays: frozenset[str], now: datetime, window: int,
                 stop_after: float) -> PipelineLag:
    """Evaluate a pipeline from the offset store's lag entries (``LagHistory.entries``) for the
    given partitions (a partition with no entry has no commit yet)."""
    out: list[PartitionLag] = []
    for tp in partitions:
        rows = entries.get(tp, [])
        commits = [Commit(r.committed, max((r.log_end or r.committed) - r.committed, 0), r.at, r.run_id or "")
                   for r in rows if r.source in ("commit", "reset") and r.committed is not None]
        ends = [r.log_end for r in rows if r.log_end is not None]
        log_end = ends[-1] if ends else None
        committed_rows = [r.committed for r in rows if r.source in ("commit", "reset", "sample", "plan")
                          and r.committed is not None]
        committed = committed_rows[-1] if committed_rows else None
        current = (log_end - committed) if log_end is not None and committed is not None else (log_end or 0)
        status, reason = evaluate_partition(commits, current, now, window, stop_after, replays)
        out.append(PartitionLag(tp[0], tp[1], status, max(current, 0), committed, log_end, commits[-window:],
                                round(min(len(commits), window) / window, 3), reason))
    return summarize(pipeline, group, out, window)


def group_status(partitions: Sequence[PartitionLag]) -> GroupStatus:
    if not partitions:
        return "NOTFOUND"
    worst = max(SEVERITY[p.status] for p in partitions)
    return "ERR" if worst >= 2 else "WARN" if worst == 1 else "OK"


def summarize(pipeline: str, group: str, partitions: list[PartitionLag], window: int) -> PipelineLag:
    total = sum(max(p.current_lag, 0) for p in partitions)
    max_lag = max(partitions, key=lambda p: p.current_lag, default=None)
    complete = (sum(min(len(p.commits), window) for p in partitions) / (window * len(partitions))
                if partitions else 0.0)
    return PipelineLag(pipeline, group, group_status(partitions), partitions, total, max_lag, round(complete, 3))


def burrow_json(lag: PipelineLag, cluster: str, url: str) -> dict[str, object]:
    """Burrow's ``GET /v3/kafka/{cluster}/consumer/{group}/lag`` answer."""

    def entry(c: Commit | None) -> dict[str, object] | None:
        if c is None:
            return None
        ms = int(c.at.timestamp() * 1000)
        return {"offset": c.offset, "timestamp": ms, "observedAt": ms, "lag": c.lag}

    def part(p: PartitionLag) -> dict[str, object]:
        return {"topic": p.topic, "partition": p.partition, "owner": "", "client_id": lag.pipeline,
                "status": p.status, "start": entry(p.commits[0] if p.commits else None),
                "end": entry(p.commits[-1] if p.commits else None), "current_lag": p.current_lag,
                "complete": p.complete, "reason": p.reason}

    return {"error": False, "message": "consumer status returned",
            "status": {"cluster": cluster, "group": lag.group, "status": lag.status, "complete": lag.complete,
                       "partitions": [part(p) for p in lag.partitions], "partition_count": len(lag.partitions),
                       "maxlag": part(lag.max_lag) if lag.max_lag else None, "totallag": lag.total_lag},
            "request": {"url": url, "host": "cdcflow"}}
