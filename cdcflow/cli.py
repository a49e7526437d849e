"""The ``cdcflow`` command: validate configs, export the JSON Schema, run a window, manage offsets.

    cdcflow validate [--dir DIR]                 check every pipeline file, print every error
    cdcflow schema [--output FILE]               the JSON Schema of a pipeline file (for editors)
    cdcflow schema show|apply|reject PIPELINE    schema changes waiting for an operator (schema_changes: pause)
    cdcflow run PIPELINE [--run-id ID] [--conf JSON] [--from T --to T] [--start-offsets T:P=O,...]
                [--max-records N] [--max-duration S]
                                                 one window (plan, process, commit) in this process
    cdcflow offsets show PIPELINE                stored offsets, log end and lag per partition
    cdcflow offsets set PIPELINE TOPIC:PARTITION=OFFSET ...     (only while STOPPED)
    cdcflow offsets reset PIPELINE --to earliest|latest|timestamp|forget [--time T]
    cdcflow history PIPELINE [--limit N]         the window ledger
    cdcflow documents rebuild PIPELINE [--sink S]  a composed index rebuilt whole into a new index behind
                                                 its alias (windows go on meanwhile)
    cdcflow status [PIPELINE]                    state (RUNNING, PAUSED, STOPPED, FAILED) and last window
    cdcflow pause|resume|stop PIPELINE           as the page and PUT /cdcflow/connectors/{name}/...
    cdcflow trigger PIPELINE [--conf JSON] [run parameter options, as run]
                                                 a window now, run by Airflow's scheduler
    cdcflow replay PIPELINE TOPIC:PARTITION=OFFSET ...          a window from the given offsets
    cdcflow dlq show PIPELINE [--limit N] [--before P:O,...] [--trace]
    cdcflow dlq redrive PIPELINE [--partition P --from O --to O] [--stage S] [--error-class C] [--topic T]
    cdcflow lag PIPELINE | --all                 Burrow-style lag status per partition (reads log ends now)
    cdcflow monitor [PIPELINE] [--interval S] [--count N]   record log-end samples without running windows

The operator commands (status … monitor, cdcflow/cli_control.py) call the same functions
(cdcflow.control) as the REST API and the page; they need Airflow's metadata DB (the same AIRFLOW_HOME
as the api-server).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

from cdcflow import control
from cdcflow.cli_control import (
    cmd_dlq,
    cmd_lag,
    cmd_lifecycle,
    cmd_monitor,
    cmd_replay,
    cmd_schema_changes,
    cmd_status,
    cmd_trigger,
    parse_specs,
    run_conf,
    service,
    who,
)
from cdcflow.config import config_dir, find_pipeline, iter_errors, json_schema, load_all
from cdcflow.errors import CdcflowError, ConfigError, ControlError
from cdcflow.run_params import RUN_PARAMS
from cdcflow.window import clients

DEFAULT_SCHEMA_PATH = Path(__file__).resolve().parent.parent / "config" / "pipeline.schema.json"


def cmd_validate(args: argparse.Namespace) -> int:
    directory = Path(args.dir) if args.dir else config_dir()
    loaded, errors = load_all(directory)
    for item in loaded:
        print(f"ok    {item.path}  (pipeline {item.config.name})")
    for message in iter_errors(errors):
        print(f"error {message}", file=sys.stderr)
    print(f"{len(loaded)} valid, {len(errors)} invalid in {directory}")
    return 1 if errors else 0


def cmd_schema(args: argparse.Namespace) -> int:
    if args.action != "export":
        return cmd_schema_changes(args)
    text = json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from cdcflow import runner  # noqa: PLC0415

    cfg = find_pipeline(args.pipeline)
    conf = run_conf(args)
    run_id = args.run_id or f"cli__{datetime.now(UTC):%Y%m%dT%H%M%S}_{uuid.uuid4().hex[:6]}"
    stats = runner.run_window(cfg, run_id, conf)
    print(json.dumps({"run_id": run_id, **stats}, indent=2, default=str))
    return 0


def _run_param_options(p: argparse.ArgumentParser) -> None:
    """--conf and one option per declared run parameter (cdcflow/run_params.py)."""
    p.add_argument("--conf", help='run parameters as JSON, e.g. {"max_records": 100}; the options below '
                   "override its keys")
    for param in RUN_PARAMS:
        p.add_argument(param.flag, dest=param.name, type=param.cli_value, metavar=param.metavar,
                       help=f"run parameter {param.name} ({param.title}): {param.help}")


def cmd_offsets(args: argparse.Namespace) -> int:

    cfg = find_pipeline(args.pipeline)
    store = clients.offset_store(cfg)
    if args.action == "set":
        if args.to_time:
            if args.specs:
                raise ConfigError("offsets set: give TOPIC:PARTITION=OFFSET specs or --to-time, not both")
            result = service().reset_offsets(cfg.name, "timestamp", who(), control.parse_time(args.to_time))
            print(result["message"])
            for tp, off in (result.get("offsets") or {}).items():
                print(f"  {tp} -> {off}")
            return 0
        offsets = parse_specs(args.specs)
        print(service().alter_offsets(cfg.name, dict(offsets), who())["message"])
        return 0
    if args.action == "reset":
        if not args.to:
            raise ConfigError("offsets reset needs --to earliest|latest|timestamp|forget")
        ts = control.parse_time(args.time) if args.time else None
        result = service().reset_offsets(cfg.name, args.to, who(), ts)
        print(result["message"])
        for tp, off in (result.get("offsets") or {}).items():
            print(f"  {tp} -> {off}")
        return 0
    from connectors.kafka.reader import discover  # noqa: PLC0415

    stored = store.offsets.load(cfg.name)
    print(f"{'topic':40} {'part':>4} {'stored':>10} {'log end':>10} {'lag':>8}")
    for state in discover(clients.consumer_conf(cfg), clients.source_topics(cfg)):
        pos = stored.get((state.topic, state.partition))
        lag = state.end - pos if pos is not None else state.end - state.low
        print(f"{state.topic:40} {state.partition:>4} {pos if pos is not None else '-':>10} {state.end:>10} {lag:>8}")
    return 0


def cmd_documents(args: argparse.Namespace) -> int:
    """A composed index rebuilt whole into a new index behind its alias (docs/composed-documents.md)."""
    from cdcflow.window.compose import rebuild_index  # noqa: PLC0415
    from spark_jobs.session import get_spark  # noqa: PLC0415

    cfg = find_pipeline(args.pipeline)
    resolved = clients.Clients(cfg)
    found = [(es, keeper) for es, keeper in resolved.documents if args.sink in (None, es.config.name)]
    if len(found) != 1:
        names = [es.config.name for es, _k in resolved.documents]
        raise ConfigError(f"pipeline {cfg.name!r}: expected --sink naming one of its composed indices {names}"
                          if names else f"pipeline {cfg.name!r} has no composed index (an Elasticsearch sink with "
                          "document:)")
    es, keeper = found[0]
    out = rebuild_index(cfg.name, es, keeper, resolved.store(), get_spark(cfg.spark, app_name=f"cdcflow-{cfg.name}"),
                        lambda line: print(line, flush=True))
    print(json.dumps(out, indent=2, default=str))
    return 0


def cmd_history(args: argparse.Namespace) -> int:

    cfg = find_pipeline(args.pipeline)
    for w in clients.offset_store(cfg).ledger.history(cfg.name, args.limit):
        ranges = ", ".join(f"{p.topic}[{p.partition}] {p.start}..{p.end if p.end is not None else '?'}"
                           for p in w.partitions)
        print(f"{w.run_id:55} {w.status:9} {w.origin:10} attempts={w.attempt} {ranges}")
        if w.interval:
            print(f"    time range {w.interval[0].isoformat()}Z .. {w.interval[1].isoformat()}Z")
        if w.message:
            print(f"    {w.message}")
        for c in w.stats.get("schema_changes", []):  # the DDL the window ran (or a change it left unapplied)
            print(f"    {'DDL' if c['applied'] else 'not applied'}: {c['ddl'] or c['table'] + '.' + c['column'] + ' ' + c['change']}")
        for t in w.stats.get("truncates", []):
            print(f"    TRUNCATE {t['table']} at version {t['version']}: {t['deleted']} {t.get('unit', 'rows')} deleted")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Every command and its options, in the order of the module's docstring (one flat list: it reads
    better whole than split by command)."""
    parser = argparse.ArgumentParser(prog="cdcflow", description="CDC pipelines as Airflow DAGs on Spark")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("validate", help="validate every pipeline config")
    p.add_argument("--dir")
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("schema", help="export the JSON Schema of pipeline configs; or show, apply or reject the "
                       "schema changes a pipeline waits on (schema_changes: pause)")
    p.add_argument("action", nargs="?", default="export", choices=["export", "show", "apply", "reject"])
    p.add_argument("pipeline", nargs="?")
    p.add_argument("--output", default=str(DEFAULT_SCHEMA_PATH), help="file, or - for stdout")
    p.set_defaults(func=cmd_schema)
    p = sub.add_parser("run", help="run one window in this process")
    p.add_argument("pipeline")
    p.add_argument("--run-id")
    _run_param_options(p)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("documents", help="rebuild a composed index whole into a new index, then move its alias "
                       "there (a mapping change, no downtime; windows go on meanwhile)")
    p.add_argument("action", choices=["rebuild"])
    p.add_argument("pipeline")
    p.add_argument("--sink", help="the composed index's sink (when the pipeline has several)")
    p.set_defaults(func=cmd_documents)
    p = sub.add_parser("offsets", help="show, set or reset stored offsets (set/reset only while STOPPED)")
    p.add_argument("action", choices=["show", "set", "reset"])
    p.add_argument("pipeline")
    p.add_argument("specs", nargs="*", help="TOPIC:PARTITION=OFFSET (for set)")
    p.add_argument("--to-time", help="for set: every partition to its first record at or after this time "
                   "(ISO 8601 with a zone, or epoch ms)")
    p.add_argument("--to", choices=["earliest", "latest", "timestamp", "forget"], help="for reset")
    p.add_argument("--time", help="for reset --to timestamp: ISO 8601 with a zone, or epoch ms")
    p.set_defaults(func=cmd_offsets)
    p = sub.add_parser("status", help="state and last window of one or every pipeline")
    p.add_argument("pipeline", nargs="?")
    p.set_defaults(func=cmd_status)
    for verb, text in (("pause", "pause the pipeline's DAG"), ("resume", "resume a paused or stopped pipeline"),
                       ("stop", "stop: no window runs, offsets may be changed")):
        p = sub.add_parser(verb, help=text)
        p.add_argument("pipeline")
        p.set_defaults(func=cmd_lifecycle)
    p = sub.add_parser("trigger", help="have Airflow run a window now")
    p.add_argument("pipeline")
    _run_param_options(p)
    p.set_defaults(func=cmd_trigger)
    p = sub.add_parser("replay", help="have Airflow run a window from the given offsets")
    p.add_argument("pipeline")
    p.add_argument("specs", nargs="+", help="TOPIC:PARTITION=OFFSET")
    p.set_defaults(func=cmd_replay)
    p = sub.add_parser("lag", help="Burrow-style lag status (exit 3 when a pipeline is in ERR)")
    p.add_argument("pipeline", nargs="?")
    p.add_argument("--all", action="store_true")
    p.set_defaults(func=cmd_lag)
    p = sub.add_parser("monitor", help="sample log end offsets (no window) every --interval seconds")
    p.add_argument("pipeline", nargs="?")
    p.add_argument("--interval", type=float, default=30.0)
    p.add_argument("--count", type=int, default=0, help="stop after N rounds (0 = run until stopped)")
    p.set_defaults(func=cmd_monitor)
    p = sub.add_parser("dlq", help="show or redrive dead letters")
    p.add_argument("action", choices=["show", "redrive"])
    p.add_argument("pipeline")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--before", help="page to older records: P:O,... as printed")
    p.add_argument("--trace", action="store_true", help="print stack traces")
    p.add_argument("--partition", type=int, help="DLQ partition (redrive)")
    p.add_argument("--from", dest="start", type=int, help="first DLQ offset (redrive)")
    p.add_argument("--to", dest="end", type=int, help="last DLQ offset, inclusive (redrive)")
    p.add_argument("--stage", help="only records of this stage (converter, transform, sink)")
    p.add_argument("--error-class", help="only records of this error class")
    p.add_argument("--topic", help="redrive to this topic instead of the original")
    p.set_defaults(func=cmd_dlq)
    p = sub.add_parser("history", help="show the window ledger")
    p.add_argument("pipeline")
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=cmd_history)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose or args.command == "run" else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except CdcflowError as exc:
        print(f"cdcflow: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError | ControlError) else 1


if __name__ == "__main__":
    raise SystemExit(main())
