"""A seeded fault campaign against the real services: kill a window at every point of
connectors.faults.POINTS (the driver process, or the long-lived Spark's Python worker for the points
inside Spark tasks), or take a server away while a window runs (OUTAGES: MariaDB crashed or stopped
and restarted, Elasticsearch stopped and restarted, the broker frozen mid-read, the long-lived Spark
killed and restarted), retry it as Airflow
would (same run id), drain the backlog, and check the outcome against the state computed
independently from the produced events.

    python -m tests.faults.harness --faults 200 --seed 7     (the long campaign; prints the table)
    python -m tests.faults.harness --celery --faults 13 --seed 5    (each window a DAG run on the Celery stack)

How a window runs is tests/faults/windows.py's: a ``cdcflow run`` forked from a preloaded process,
retried here with the same run id (the default), or with ``--celery`` a DAG run on a Celery stack
of its own, whose faulted try dies on one worker and which Airflow retries itself.

Each fault gets its own chunk of changes (and two poison records) first, so every window has work.
After each fault: MySQL rows and Elasticsearch documents against the model (lost: a row that should
be there is missing; duplicated: a row that should not be there, such as a resurrected delete;
regressed: a row with an older version than the model's), the DLQ (each poison record exactly
once), and the ledger (the committed windows' ranges follow each other with no gap and no overlap).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cdcflow import cdcgen
from connectors.faults import DOCUMENT_POINTS, EXACTLY_ONCE_POINTS, POINTS, pause_entry
from tests.faults import tables
from tests.faults.windows import AirflowWindows, Attempt, ForkedWindows, Window, Windows
from tests.helpers import state_of

ROOT = Path(__file__).resolve().parents[2]
# Outages: the window pauses at one of these points (connectors.faults), the server goes away, the
# window goes on against it. Tansu keeps its log in memory, so the broker is frozen (SIGSTOP, like a
# network partition that drops packets) for a few seconds rather than restarted.
OUTAGES: dict[str, tuple[str, ...]] = {
    "mysql_down": ("after_read", "between_sink_batches"),
    "es_down": ("after_read", "between_sink_batches"),
    "broker_down": ("during_read",),
    # the long-lived Spark dies (SIGKILL of its JVM, and with it the window's session and checkpoint)
    "spark_down": ("after_read", "between_sink_batches"),
}
KINDS = (*POINTS, *DOCUMENT_POINTS, *OUTAGES)
COMPOSED_MAX = 300  # the composed index's max_documents: fewer than a chunk's keys, so a backlog is carried


def kinds(exactly_once: bool) -> tuple[str, ...]:
    """The faults of a campaign: the exactly-once points only pass with offset_store.sink; the composed
    index's (its rebuild) only without it, which a composed index refuses."""
    skipped = DOCUMENT_POINTS if exactly_once else EXACTLY_ONCE_POINTS
    return tuple(k for k in KINDS if k not in skipped)


@dataclass
class Outcome:
    point: str
    reached: bool  # the fault fired (the attempt died or failed)
    lost: int = 0
    duplicated: int = 0
    regressed: int = 0
    dlq_missing: int = 0
    dlq_duplicated: int = 0
    ledger_gaps: int = 0
    notes: list[str] = field(default_factory=list)
    how: str = ""  # what was done (outages: where, how long, crash or stop)
    error: str = ""  # how the faulted attempt ended when it failed: cdcflow's last error line
    runs: list[str] = field(default_factory=list)  # each window run: id, exit, records, what each sink did

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.regressed or self.dlq_missing or self.dlq_duplicated
                    or self.ledger_gaps)


def _money(value: Any) -> str:
    return f"{float(value):.2f}"


def poison(chunk: int, ts: int) -> list[cdcgen.Event]:
    """Two records that must reach the DLQ, unique to the chunk: one the converter rejects, one MySQL
    rejects (too long for VARCHAR(32); Elasticsearch takes it)."""
    key = 100_000 + chunk
    long_row = {"id": key, "customer": "x" * 40, "status": "new", "amount": "1.00", "updated_ms": ts}
    return [
        cdcgen.Event(json.dumps({"id": key}).encode(), f"{{not json {chunk}".encode(), kind="broken:json"),
        cdcgen.Event(json.dumps({"id": key}).encode(), json.dumps(
            {"before": None, "after": long_row, "op": "c", "ts_ms": ts,
             "source": {"connector": "mysql", "table": "orders", "ts_ms": ts}}).encode(), kind="broken:long"),
    ]


class Campaign:
    def __init__(self, directory: Path, seed: int, bootstrap: str, exactly_once: bool = False,
                 windows: Windows | None = None) -> None:
        self.rng = random.Random(seed)
        self.exactly_once = exactly_once
        self.seen: set[Any] = set()  # findings already counted (each is counted at its first check)
        self.dir = directory
        self.bootstrap = bootstrap
        tag = f"{seed}_{int(time.time() * 1000) % 10**9}"
        self.name, self.topic, self.table, self.index = f"faults_{tag}", f"faults.{tag}", f"faults_{tag}", f"faults-{tag}"
        self.events: list[cdcgen.Event] = []
        self.ts = 1_767_300_000_000
        self.windows = windows or ForkedWindows(directory)
        (directory / "pipelines").mkdir(parents=True, exist_ok=True)
        self._write_pipeline()
        cdcgen.produce(bootstrap, self.topic, [], partitions=3)
        self.windows.open(self.name)

    def _write_pipeline(self) -> None:
        columns = [{**c, "type": "VARCHAR(32)"} if c["name"] == "customer" else c for c in tables.COLUMNS]
        cfg = {
            "name": self.name, **self.windows.settings,
            "source": {"topics": [self.topic], "kafka_conn_id": "cdcflow_kafka"},
            "window": {"max_records": 400, "max_duration": "120s", "stop_on_empty": True},
            "initial_offsets": "earliest",
            "sinks": [
                {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": self.table,
                 "create_table": True, "primary_key": ["id"], "columns": columns, "set_rows": 100},
                {"type": "elasticsearch", "name": "docs", "conn_id": "cdcflow_elasticsearch", "index": self.index,
                 "id_fields": ["id"], "bulk_max_actions": 100,
                 "mapping": {"properties": {"id": {"type": "long"}, "customer": {"type": "keyword"},
                                            "status": {"type": "keyword"},
                                            "amount": {"type": "keyword"},
                                            "updated_ms": {"type": "long"}}}},
                *tables.sinks(self.table),  # a history table and a soft-delete table (issue 44)
                # a composed index of the state table (issue 45), whose max_documents carries a backlog
                *([] if self.exactly_once else [{
                    "type": "elasticsearch", "name": "composed", "conn_id": "cdcflow_elasticsearch",
                    "index": f"{self.index}-composed", "bulk_max_actions": 100,
                    "mapping": {"properties": {"customer": {"type": "keyword"}, "status": {"type": "keyword"}}},
                    "document": {"kept_by": "rows", "root": {"table": self.table, "key": ["id"]},
                                 "max_documents": COMPOSED_MAX, "rebuild_batch": 100}}]),
            ],
            "errors": {"tolerance": "all", "dlq_topic": f"{self.topic}.dlq"},
            **({"offset_store": {"sink": "history"}} if self.exactly_once else {}),
        }
        (self.dir / "pipelines" / f"{self.name}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    # -- running windows (tests/faults/windows.py) -------------------------------------------------
    def run(self, run_id: str) -> Attempt:
        return self.windows.start(run_id).first()

    def produce_chunk(self, i: int) -> None:  # many keys: the sinks write several batches (set_rows 100 …)
        stream = cdcgen.orders_stream(self.rng.randint(250, 450), 500, seed=self.rng.randrange(10**6), broken=False,
                                      start_ts=self.ts)
        self.ts += 10 * len(stream.events) + 1000
        chunk = [*stream.events, *poison(i, self.ts)]
        self.events += chunk
        cdcgen.produce(self.bootstrap, self.topic, chunk, create=False)

    def fault(self, i: int, point: str) -> Outcome:
        self.produce_chunk(i)
        if point in OUTAGES:
            window, first, reached, how = self.outage(f"w{i}", point)
            out = Outcome(point, reached=reached, how=how)
        else:
            window = self.windows.start(f"w{i}", point)
            first = window.first()
            out = Outcome(point, reached=not first.ok, how=f"SIGKILL at {point}")
        out.runs.append(first.line())
        if not first.ok:
            out.error = first.error
        for attempt in range(3):  # Airflow's retries: the same run id (under --celery, Airflow's own)
            if first.ok:
                break
            first = window.retry()
            out.runs.append(first.line())
            if not first.ok and attempt == 2:
                out.notes.append(f"w{i} still failing: {first.error[-500:]}")
        for j in range(20):  # drain the backlog with fresh windows
            done = self.run(f"w{i}-drain{j}")
            out.runs.append(done.line())
            if not done.ok:
                out.notes.append(f"drain failed: {done.error[-500:]}")
                break
            if done.records == 0 and not ((done.stats or {}).get("documents") or {}).get("composed", {}).get("backlog"):
                break  # nothing read, and no document carried over
        self.check(out)
        return out

    def outage(self, run_id: str, kind: str) -> tuple[Window, Attempt, bool, str]:
        """Run a window that pauses at a point of OUTAGES[kind]; take the server away there, let the
        window go on against it, bring the server back (before or after the window ends)."""
        where = self.rng.choice(OUTAGES[kind])
        back_first = self.rng.random() < 0.5  # the server returns while the window still waits
        with tempfile.TemporaryDirectory() as pause:
            flag, resume = Path(pause) / "reached", Path(pause) / "resume"
            window = self.windows.start(run_id, pause_entry(where, pause))
            deadline = time.monotonic() + 300
            while not flag.exists() and not window.ended() and time.monotonic() < deadline:
                time.sleep(0.05)
            reached = flag.exists()
            how = f"{kind} at {where}" + ("" if kind == "broker_down" else
                                           f", server back {'before' if back_first else 'after'} the window went on")
            if reached:
                if kind == "broker_down":
                    frozen = self.rng.uniform(2.0, 12.0)
                    with _frozen(_pid_of("kafka.pid")):
                        resume.touch()
                        time.sleep(frozen)  # the window reads on against the frozen broker
                    how += f", frozen {frozen:.1f}s while the window read on"
                else:
                    service = {"mysql_down": "mysql", "es_down": "elasticsearch", "spark_down": "spark"}[kind]
                    crash = kind == "spark_down" or (kind == "mysql_down" and self.rng.random() < 0.5)
                    _services("stop", service, crash=crash)
                    how += " (crashed)" if crash else ""
                    if back_first:
                        _services("start", service)
                        resume.touch()
                    else:
                        resume.touch()
                        try:
                            window.first(timeout=300)
                        finally:
                            _services("start", service)
            else:
                resume.touch()
            return window, window.first(timeout=600), reached, how  # in the block: the pause directory stays

    # -- checks ------------------------------------------------------------------------------------
    def check(self, out: Outcome) -> None:
        """Compare with the model. Each check sees everything produced so far, so a finding is counted
        at the fault where it first appears (self.seen), not again at every later check."""
        from tests.helpers import es_docs, mysql_engine, read_topic  # noqa: PLC0415

        want = state_of(self.events)
        with mysql_engine().connect() as conn:
            rows = {r[0]: r for r in conn.exec_driver_sql(
                f"SELECT id, customer, status, amount, updated_at FROM `{self.table}`")}
            tables.check(conn, self.table, self.events, lambda kind, key, note: _found(out, self.seen, kind, key, note))
        self._compare(out, want, {i: int(r[4]) for i, r in rows.items()},
                      {i: (r[1], r[2], _money(r[3])) for i, r in rows.items()}, "mysql", self.seen)
        docs = es_docs(self.index)
        es_want = {**want, **{json.loads(e.value)["after"]["id"]: json.loads(e.value)["after"]
                              for e in self.events if e.kind == "broken:long"}}  # ES takes the long one
        lost_before = out.lost
        self._compare(out, es_want, {int(k): int(d["updated_ms"]) for k, d in docs.items()},
                      {int(k): (d["customer"], d["status"], _money(d["amount"])) for k, d in docs.items()}, "es",
                      self.seen)
        if out.lost > lost_before:  # keep what explains it (a CI run lost documents once, unexplained)
            out.notes.append(self._explain_es_loss(sorted(set(es_want) - {int(k) for k in docs})[:5], es_want))
            out.notes += out.runs
        if not self.exactly_once:  # the composed index: a document per row of the state table, as MySQL has it
            composed = es_docs(f"{self.index}-composed")
            self._compare(out, want, {int(k): int(d["updated_at"]) for k, d in composed.items()},
                          {int(k): (d["customer"], d["status"], _money(d["amount"])) for k, d in composed.items()},
                          "composed", self.seen)
        dead = collections.Counter(m.value() for m in read_topic(f"{self.topic}.dlq"))
        for e in self.events:
            if e.kind.startswith("broken"):
                if dead[e.value] == 0:
                    _found(out, self.seen, "dlq_missing", ("dlq", e.value), f"DLQ: {e.value[:40]!r} missing")
                elif dead[e.value] > 1:
                    _found(out, self.seen, "dlq_duplicated", ("dlq", e.value),
                           f"DLQ: {e.value[:40]!r} {dead[e.value]} times")
        for gap in self._ledger_gaps():
            _found(out, self.seen, "ledger_gaps", gap, f"ledger: {gap}")

    def _explain_es_loss(self, ids: list[int], want: dict[int, dict[str, Any]]) -> str:
        """For a few lost documents: does a realtime GET find them (search did not: a refresh
        problem), and does a tombstone newer than the expected version hide them?"""
        from connectors.elasticsearch.sink import TOMBSTONES, tombstone_id  # noqa: PLC0415
        from tests.helpers import es_client  # noqa: PLC0415

        es, seen = es_client(), []
        try:
            for i in ids:
                doc = es.options(ignore_status=404).get(index=self.index, id=str(i), realtime=True)
                tomb = es.options(ignore_status=404).get(index=TOMBSTONES, id=tombstone_id(self.index, str(i)))
                seen.append(f"{i} (want updated_ms {want[i]['updated_ms']}): GET "
                            f"{'v' + str(doc.get('_version')) if doc.get('found') else 'absent'}, tombstone "
                            f"{'v' + str(tomb.get('_version')) if tomb.get('found') else 'none'}")
        finally:
            es.close()
        return "es loss: " + "; ".join(seen)

    @staticmethod
    def _compare(out: Outcome, want: dict[int, dict[str, Any]], versions: dict[int, int],
                 values: dict[int, tuple[Any, ...]], where: str, seen: set[Any]) -> None:
        for i, row in want.items():
            if i not in versions:
                _found(out, seen, "lost", (where, i, "lost"), f"{where}: {i} lost")
            elif versions[i] < row["updated_ms"]:
                _found(out, seen, "regressed", (where, i, row["updated_ms"]),
                       f"{where}: {i} at {versions[i]}, expected {row['updated_ms']}")
            elif values[i] != (row["customer"], row["status"], _money(row["amount"])):
                _found(out, seen, "regressed", (where, i, row["updated_ms"]), f"{where}: {i} = {values[i]}, expected {row}")
        for i in versions.keys() - want.keys():
            _found(out, seen, "duplicated", (where, i, "extra"), f"{where}: {i} should not exist (a resurrected delete?)")

    def _ledger_gaps(self) -> list[tuple[Any, ...]]:
        from cdcflow.state import StateStore  # noqa: PLC0415

        store = StateStore(self.windows.store_url)
        ranges: dict[tuple[str, int], list[tuple[int, int]]] = collections.defaultdict(list)
        for w in store.ledger.history(self.name, limit=100_000):
            if w.status == "committed" and w.origin == "stored":
                for p in w.partitions:
                    if p.end is not None and p.end > p.start:
                        ranges[p.tp].append((p.start, p.end))
        gaps: list[tuple[Any, ...]] = []
        stored = store.offsets.load(self.name)
        for tp, spans in ranges.items():
            spans.sort()
            expect = 0
            for start, end in spans:
                if start != expect:
                    gaps.append((tp, "range starts at", start, "expected", expect))
                expect = end
            if stored.get(tp) != expect:
                gaps.append((tp, "stored", stored.get(tp), "ranges end at", expect))
        store.close()
        if self.exactly_once:  # the sink's offsets (the authority) end where the ledger's ranges end
            from connectors.mysql.offsets import SinkOffsets  # noqa: PLC0415
            from tests.helpers import mysql_engine  # noqa: PLC0415

            held = SinkOffsets(mysql_engine().url.render_as_string(hide_password=False))
            in_sink = {tp: o for tp, (o, _run) in held.load(self.name).items()}
            held.close()
            gaps += [(tp, "sink offset", in_sink.get(tp)) for tp in ranges.keys() | in_sink.keys()
                     if in_sink.get(tp) != (ranges[tp][-1][1] if ranges.get(tp) else None)]
        return gaps


def _found(out: Outcome, seen: set[Any], kind: str, key: Any, note: str) -> None:
    """Count a finding of ``kind`` once, at the first check that sees it."""
    if key in seen:
        return
    seen.add(key)
    setattr(out, kind, getattr(out, kind) + 1)
    out.notes.append(note)


def _pid_of(pidfile: str) -> int:
    return int((Path(os.environ["CDCFLOW_HOME"]) / "services" / pidfile).read_text().strip())


class _frozen:
    """SIGSTOP a server for the block (SIGCONT always follows)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def __exit__(self, *_exc: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


def _alive(pid: int) -> bool:
    """Exists and is not a zombie (PID 1 may not reap the orphaned server)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _services(action: str, service: str, crash: bool = False) -> None:
    """scripts/services.sh for one server; crash: SIGKILL it instead of a stop (MariaDB: no clean
    shutdown; Spark: dies as a JVM out of memory does, and its supervisor may restart it first)."""
    if crash:
        pid = _pid_of({"mysql": "mysql.pid", "spark": "spark/connect.pid"}[service])
        os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.05)
        if service == "spark":
            return
    subprocess.run(["bash", str(ROOT / "scripts" / "services.sh"), action, service], check=True,
                   capture_output=True, text=True, timeout=300)


def run_campaign(faults: int, seed: int, directory: Path | None = None, exactly_once: bool = False,
                 on_outcome: Callable[[int, Outcome], None] = lambda _i, _o: None,
                 celery: bool = False) -> list[Outcome]:
    """``celery``: each window a DAG run on a Celery stack of its own (tests/faults/windows.py)."""
    from tests.helpers import bootstrap  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp, _windows(where := directory or Path(tmp), celery) as windows:
        campaign = Campaign(where, seed, bootstrap(), exactly_once, windows)
        these = kinds(exactly_once)
        points = [these[i % len(these)] for i in range(faults)]
        random.Random(seed).shuffle(points)
        outcomes = []
        for i, point in enumerate(points):
            outcomes.append(campaign.fault(i, point))
            on_outcome(i, outcomes[-1])
        return outcomes


@contextmanager
def _windows(directory: Path, celery: bool) -> Iterator[Windows]:
    """The campaign's window runner, closed at the end (the fork server, or the Celery stack, stopped)."""
    runner: Windows = AirflowWindows(directory) if celery else ForkedWindows(directory)
    try:
        yield runner
    finally:
        runner.close()


def table(outcomes: list[Outcome]) -> str:
    by: dict[str, list[Outcome]] = collections.defaultdict(list)
    for o in outcomes:
        by[o.point].append(o)
    cols = ("count", "reached", "lost", "duplicated", "regressed", "DLQ missing", "DLQ duplicated", "ledger gaps")
    lines = [f"| fault | {' | '.join(cols)} |", "|---|" + "---|" * len(cols)]
    for point in [p for p in KINDS if p in by] + ["total"]:
        os_ = outcomes if point == "total" else by[point]
        nums = (len(os_), sum(o.reached for o in os_), sum(o.lost for o in os_), sum(o.duplicated for o in os_),
                sum(o.regressed for o in os_), sum(o.dlq_missing for o in os_), sum(o.dlq_duplicated for o in os_),
                sum(o.ledger_gaps for o in os_))
        lines.append(f"| {point} | {' | '.join(str(n) for n in nums)} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description="the long fault campaign (needs the services: scripts/services.sh start)")
    ap.add_argument("--faults", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path, help="also write every outcome (how, error, counts) to this file")
    ap.add_argument("--exactly-once", action="store_true", help="the pipeline commits its offsets in the MySQL "
                    "sink's transaction (offset_store.sink); adds the during_sink_commit kill point")
    ap.add_argument("--celery", action="store_true", help="each window a DAG run on a Celery stack of its own "
                    "(PostgreSQL, Redis, two workers: tests/faults/windows.py); Airflow retries the faulted try")
    ap.add_argument("--runs", action="store_true", help="also print each fault's window runs: every attempt, "
                    "where it ran (under --celery: the task's try and its worker), records, what each sink did")
    args = ap.parse_args()
    started = time.time()

    def progress(i: int, o: Outcome) -> None:  # one line per fault as it ends (a long run takes hours)
        state = "clean" if o.clean else f"DAMAGED {o.notes[:3]}"
        print(f"[{i + 1}/{args.faults} {time.time() - started:.0f}s] {o.point}: {o.how}; {state}", flush=True)
        for run in o.runs if args.runs else []:
            print(f"    {run}", flush=True)

    outcomes = run_campaign(args.faults, args.seed, exactly_once=args.exactly_once, on_outcome=progress,
                            celery=args.celery)
    print(table(outcomes))
    mode = "exactly-once (offset_store.sink)" if args.exactly_once else "offset store"
    how = "DAG runs on the Celery stack" if args.celery else "forked cdcflow run"
    print(f"{len(outcomes)} faults, seed {args.seed}, {mode}, {how}, {time.time() - started:.0f} s")
    for o in outcomes:
        if o.error:
            print(f"  {o.point}: {o.how}; the faulted attempt ended with: {o.error[:300]}")
    if args.json:
        args.json.write_text(json.dumps([vars(o) for o in outcomes], indent=1))
    sys.exit(0 if all(o.clean for o in outcomes) else 1)


if __name__ == "__main__":
    main()
