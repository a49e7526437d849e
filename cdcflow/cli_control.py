"""The operator commands of the ``cdcflow`` CLI (status, pause, resume, stop, trigger, replay,
schema show|apply|reject, dlq, lag, monitor), and the argument helpers they share with cdcflow/cli.py.

Each is a printout over cdcflow.control, the same functions the REST API and the page call, so they
need Airflow's metadata DB (the same AIRFLOW_HOME as the api-server). The run parameters of ``run``
and ``trigger`` become a window's conf here (:func:`run_conf`), as do the TOPIC:PARTITION=OFFSET
specs of ``offsets set`` and ``replay`` (:func:`parse_specs`).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

from cdcflow import control
from cdcflow.errors import CdcflowError, ConfigError
from cdcflow.run_params import RUN_PARAMS


def run_conf(args: argparse.Namespace) -> dict[str, Any]:
    """The run parameters: --conf (a JSON object), with the declared parameters' options over it."""
    try:
        conf = json.loads(args.conf) if args.conf else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--conf is not valid JSON: {exc}") from exc
    if not isinstance(conf, dict):
        raise ConfigError(f"--conf must be a JSON object, got {args.conf!r}")
    for param in RUN_PARAMS:
        value = getattr(args, param.name)
        if value not in (None, ""):
            conf[param.name] = value
    return conf


def parse_specs(specs: list[str]) -> dict[tuple[str, int], int]:
    offsets: dict[tuple[str, int], int] = {}
    for spec in specs:
        try:
            tp, off = spec.rsplit("=", 1)
            topic, part = tp.rsplit(":", 1)
            offsets[(topic, int(part))] = int(off)
        except ValueError:
            raise ConfigError(f"expected TOPIC:PARTITION=OFFSET, got {spec!r}") from None
    if not offsets:
        raise ConfigError("give at least one TOPIC:PARTITION=OFFSET")
    return offsets


def who() -> str:
    import getpass  # noqa: PLC0415

    return f"cli:{getpass.getuser()}"


def service() -> control.Control:
    return control.Control()


def cmd_status(args: argparse.Namespace) -> int:
    names = [args.pipeline] if args.pipeline else [p.name for p in control.pipelines()]
    svc = service()
    for name in names:
        st = svc.status(name)
        last = (f"last window {st.last_window.run_id} {st.last_window.status} at {st.last_window_at:%Y-%m-%d %H:%M:%S}Z"
                if st.last_window and st.last_window_at else "no window yet")
        print(f"{st.name:30} {st.state:10} {last}")
        if st.trace:
            print("    " + st.trace.replace("\n", "\n    "))
    return 0


def cmd_schema_changes(args: argparse.Namespace) -> int:
    """cdcflow schema show|apply|reject PIPELINE: the schema changes a pipeline under schema_changes:
    pause waits on (docs/schema-changes.md)."""
    if not args.pipeline:
        raise ConfigError(f"cdcflow schema {args.action} needs a pipeline name")
    svc = service()
    if args.action == "show":
        for c in svc.schema_changes(args.pipeline):
            ch = c["change"]
            print(f"{c['decision']:9} {ch['table']}.{ch['column']}: {ch['change']} {ch.get('old') or ''} -> "
                  f"{ch.get('new') or ''} (run {c['run_id']}{', by ' + c['decided_by'] if c['decided_by'] else ''})")
        return 0
    decided = svc.decide_schema(args.pipeline, "approved" if args.action == "apply" else "rejected", who())
    verb = "approved: the next window applies" if args.action == "apply" else "rejected: the tables stay as they are for"
    print(f"{args.pipeline}: {verb} {len(decided)} change(s); the pipeline runs again")
    return 0


def cmd_lifecycle(args: argparse.Namespace) -> int:
    svc = service()
    st = {"pause": svc.pause, "resume": svc.resume, "stop": svc.stop}[args.command](args.pipeline, who())
    print(f"{st.name}: {st.state}")
    return 0


def cmd_trigger(args: argparse.Namespace) -> int:
    print(f"triggered {service().run_now(args.pipeline, who(), run_conf(args))}")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    starts: dict[str, dict[int | str, int]] = {}
    for (topic, part), off in parse_specs(args.specs).items():
        starts.setdefault(topic, {})[part] = off
    print(f"triggered {service().replay(args.pipeline, starts, who())}")
    return 0


def cmd_dlq(args: argparse.Namespace) -> int:
    svc = service()
    if args.action == "show":
        before = None
        if args.before:
            try:
                before = {int(p): int(o) for p, o in (i.split(":") for i in args.before.split(","))}
            except ValueError:
                raise ConfigError(f"--before: expected P:O[,P:O...], got {args.before!r}") from None
        page = svc.dlq(args.pipeline, args.limit, before)
        print(f"dead-letter topic {page.topic}: {page.total} records; newest first")
        for d in page.records:
            done = page.redriven.get((d.partition, d.offset))
            print(f"- {d.partition}@{d.offset} from {d.original_topic}[{d.original_partition}]@{d.original_offset} "
                  f"stage={d.stage} {d.error_class}: {d.message}"
                  + (f"  [redriven to {done.target_topic} by {done.requested_by}, {done.status}]" if done else ""))
            print(f"    key={d.key!r:.120} value={d.value!r:.200}")
            if args.trace and d.stacktrace:
                print("    " + d.stacktrace.replace("\n", "\n    "))
        if page.next_before:
            print("older: --before " + ",".join(f"{p}:{o}" for p, o in sorted(page.next_before.items())))
        return 0
    result = svc.redrive(args.pipeline, who(), partition=args.partition, start=args.start, end=args.end,
                         stage=args.stage, error_class=args.error_class, target_topic=args.topic)
    print(f"redrive {result.request_id}: {len(result.redriven)} of {result.matched} matching records sent")
    for r in result.redriven:
        print(f"  {r['partition']}@{r['offset']} -> {r['target_topic']} (was {r['original']})")
    for r in result.already:
        print(f"  {r['partition']}@{r['offset']} skipped: redriven already to {r['target_topic']} by {r['by']} at {r['at']}")
    return 0


def cmd_lag(args: argparse.Namespace) -> int:
    if not args.pipeline and not args.all:
        raise ConfigError("give a pipeline or --all")
    svc = service()
    names = [p.name for p in control.pipelines() if p.config is not None] if args.all else [args.pipeline]
    worst = 0
    for name in names:
        ev = svc.lag(name, refresh=True)
        worst = max(worst, {"OK": 0, "NOTFOUND": 0, "WARN": 1, "ERR": 2}[ev.status])
        print(f"{name} (group {ev.group}): {ev.status}, total lag {ev.total_lag}, window {ev.complete:.0%} full")
        for p in ev.partitions:
            print(f"  {p.topic}[{p.partition}] {p.status:6} lag {p.current_lag:>8}  committed "
                  f"{p.committed if p.committed is not None else '-':>10}  log end "
                  f"{p.log_end if p.log_end is not None else '-':>10}  {p.reason}")
    return 3 if worst == 2 else 0


def cmd_monitor(args: argparse.Namespace) -> int:
    import time  # noqa: PLC0415

    svc = service()
    names = [args.pipeline] if args.pipeline else [p.name for p in control.pipelines() if p.config is not None]
    n = 0
    while True:
        for name in names:
            try:
                rows = svc.sample(name)
                print(f"{datetime.now(UTC):%H:%M:%S} {name}: lag "
                      f"{sum(e - (c or 0) for c, e in rows.values())} over {len(rows)} partitions", flush=True)
            except CdcflowError as exc:
                print(f"{datetime.now(UTC):%H:%M:%S} {name}: {exc.__class__.__name__}: {exc}", file=sys.stderr,
                      flush=True)
        n += 1
        if args.count and n >= args.count:
            return 0
        time.sleep(args.interval)
