"""The ``cdcflow`` command: validate configs, export the JSON Schema, run a window, manage offsets.

    cdcflow validate [--dir DIR]                 check every pipeline file, print every error
    cdcflow schema [--output FILE]               the JSON Schema of a pipeline file (for editors)
    cdcflow run PIPELINE [--run-id ID] [--conf JSON]
                                                 one window (plan, process, commit) in this process
    cdcflow offsets show PIPELINE                stored offsets, log end and lag per partition
    cdcflow offsets set PIPELINE TOPIC:PARTITION=OFFSET ...
    cdcflow history PIPELINE [--limit N]         the window ledger
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

from cdcflow.config import config_dir, find_pipeline, iter_errors, json_schema, load_all
from cdcflow.errors import CdcflowError, ConfigError

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
    try:
        conf = json.loads(args.conf) if args.conf else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--conf is not valid JSON: {exc}") from exc
    run_id = args.run_id or f"cli__{datetime.now(UTC):%Y%m%dT%H%M%S}_{uuid.uuid4().hex[:6]}"
    stats = runner.run_window(cfg, run_id, conf)
    print(json.dumps({"run_id": run_id, **stats}, indent=2, default=str))
    return 0


def cmd_offsets(args: argparse.Namespace) -> int:
    from cdcflow import runner  # noqa: PLC0415

    cfg = find_pipeline(args.pipeline)
    store = runner.offset_store(cfg)
    if args.action == "set":
        offsets: dict[tuple[str, int], int] = {}
        for spec in args.specs:
            try:
                tp, off = spec.rsplit("=", 1)
                topic, part = tp.rsplit(":", 1)
                offsets[(topic, int(part))] = int(off)
            except ValueError:
                raise ConfigError(f"expected TOPIC:PARTITION=OFFSET, got {spec!r}") from None
        store.set_offsets(cfg.name, offsets, run_id=f"manual-reset@{datetime.now(UTC):%Y-%m-%dT%H:%M:%S}")
        print(f"set {len(offsets)} offset(s) of pipeline {cfg.name}")
        return 0
    from connectors.kafka.reader import discover  # noqa: PLC0415

    stored = store.load(cfg.name)
    print(f"{'topic':40} {'part':>4} {'stored':>10} {'log end':>10} {'lag':>8}")
    for state in discover(runner.consumer_conf(cfg), list(cfg.source.topics)):
        pos = stored.get((state.topic, state.partition))
        lag = state.end - pos if pos is not None else state.end - state.low
        print(f"{state.topic:40} {state.partition:>4} {pos if pos is not None else '-':>10} {state.end:>10} {lag:>8}")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from cdcflow import runner  # noqa: PLC0415

    cfg = find_pipeline(args.pipeline)
    for w in runner.offset_store(cfg).history(cfg.name, args.limit):
        ranges = ", ".join(f"{p.topic}[{p.partition}] {p.start}..{p.end if p.end is not None else '?'}"
                           for p in w.partitions)
        print(f"{w.run_id:55} {w.status:9} {w.origin:6} attempts={w.attempt} {ranges}")
        if w.message:
            print(f"    {w.message}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdcflow", description="CDC pipelines as Airflow DAGs on Spark")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("validate", help="validate every pipeline config")
    p.add_argument("--dir")
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("schema", help="export the JSON Schema of pipeline configs")
    p.add_argument("--output", default=str(DEFAULT_SCHEMA_PATH), help="file, or - for stdout")
    p.set_defaults(func=cmd_schema)
    p = sub.add_parser("run", help="run one window in this process")
    p.add_argument("pipeline")
    p.add_argument("--run-id")
    p.add_argument("--conf", help='run parameters as JSON, e.g. {"max_records": 100}')
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("offsets", help="show or set stored offsets")
    p.add_argument("action", choices=["show", "set"])
    p.add_argument("pipeline")
    p.add_argument("specs", nargs="*", help="TOPIC:PARTITION=OFFSET (for set)")
    p.set_defaults(func=cmd_offsets)
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
        return 2 if isinstance(exc, ConfigError) else 1


if __name__ == "__main__":
    raise SystemExit(main())
