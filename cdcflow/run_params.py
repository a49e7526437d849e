"""Run parameters, declared once: the per-run overrides a window takes (Airflow trigger params, the
``conf`` of a run). Every surface is derived from :data:`RUN_PARAMS`:

* the Airflow DAG's ``params`` (cdcflow/airflow/dag_factory.py: one ``Param`` per declaration, its JSON
  Schema from :func:`json_schema`);
* the CLI's options of ``cdcflow run`` and ``cdcflow trigger`` (cdcflow/cli.py: ``flag``, ``cli_value``);
* the REST API's ``POST /connectors/{name}/run`` ``conf`` and ``POST /connectors/{name}/replay`` body
  (cdcflow/web/api_pipelines.py: the fields, :data:`REPLAY_PARAMS`, and :func:`body_schema`);
* the parsing and validation every one of them ends in: :meth:`RunParams.parse` (cdcflow/window/plan.py
  and process.py use it; cdcflow/control/ checks a trigger's conf with it first).

A parameter is added here, with its check; the surfaces pick it up. No Airflow, Spark or Kafka import.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdcflow.config import PipelineConfig, parse_instant
from cdcflow.errors import ConfigError

Problems = list[str]
TIME_EXAMPLE = "2026-11-23T10:00:00Z"


@dataclass(frozen=True)
class RunParam:
    """One run parameter: its name, what it is for, its JSON type and schema, its CLI option and its check."""

    name: str
    title: str
    help: str  # what it does, for any pipeline (the CLI's --help, the REST API's schema)
    json_type: str  # a value's JSON type; null (not given) is always allowed
    check: Callable[[Any, PipelineConfig, Problems], Any]  # raw value -> parsed value (None: not given)
    flag: str  # the CLI option of ``cdcflow run`` and ``cdcflow trigger``
    metavar: str
    cli_value: Callable[[str], Any] = str  # the CLI's text -> the raw value (argparse.ArgumentTypeError if not)
    schema: Mapping[str, Any] = field(default_factory=dict)  # more JSON Schema (format, minimum, ...)
    detail: Callable[[PipelineConfig], str] | None = None  # the description for one pipeline (Airflow's form)
    schema_for: Callable[[PipelineConfig], Mapping[str, Any]] | None = None  # JSON Schema of one pipeline
    replay: bool = False  # accepted by POST /connectors/{name}/replay

    def describe(self, cfg: PipelineConfig | None = None) -> str:
        return self.detail(cfg) if cfg is not None and self.detail is not None else self.help


def json_schema(param: RunParam, cfg: PipelineConfig | None = None) -> dict[str, Any]:
    """The parameter's JSON Schema: Airflow's ``Param`` keywords for ``cfg``'s DAG, or (no ``cfg``) the
    REST API's documented body field."""
    out: dict[str, Any] = {"type": ["null", param.json_type], **param.schema, "title": param.title,
                           "description": param.describe(cfg)}
    if cfg is not None and param.schema_for is not None:
        out.update(param.schema_for(cfg))
    return out


# -- checks: raw value (JSON, or the CLI's) -> parsed value; every problem names the parameter ---------

def _start_offsets(value: Any, cfg: PipelineConfig, problems: Problems) -> dict[str, dict[int, int]] | None:
    if value in (None, {}):
        return None
    if not isinstance(value, Mapping):
        problems.append(f"start_offsets: expected {{topic: {{partition: offset}}}}, got {value!r}")
        return None
    starts: dict[str, dict[int, int]] = {}
    for topic, parts in value.items():
        if not cfg.source.covers(topic):
            problems.append(f"start_offsets.{topic}: not a topic of this pipeline ({cfg.source.described})")
            continue
        if not isinstance(parts, Mapping) or not parts:
            problems.append(f"start_offsets.{topic}: expected {{partition: offset}}, got {parts!r}")
            continue
        starts[topic] = {}
        for part, off in parts.items():
            try:
                p = int(part)
            except (TypeError, ValueError):
                problems.append(f"start_offsets.{topic}: partition {part!r} is not an integer")
                continue
            if isinstance(off, bool) or not isinstance(off, int) or off < 0 or p < 0:
                problems.append(f"start_offsets.{topic}.{part}: expected an offset >= 0, got {off!r}")
                continue
            starts[topic][p] = off
    return starts


def _instant(name: str) -> Callable[[Any, PipelineConfig, Problems], int | None]:
    def check(value: Any, _cfg: PipelineConfig, problems: Problems) -> int | None:
        if value in (None, ""):
            return None
        if not isinstance(value, str):
            problems.append(f"{name}: expected an ISO 8601 time with a zone ({TIME_EXAMPLE}), got {value!r}")
            return None
        try:
            return parse_instant(value)
        except ValueError as exc:
            problems.append(f"{name}: {exc}")
            return None
    return check


def _max_records(value: Any, _cfg: PipelineConfig, problems: Problems) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        problems.append(f"max_records: expected an integer >= 1, got {value!r}")
        return None
    return value


def _max_duration(value: Any, _cfg: PipelineConfig, problems: Problems) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
        problems.append(f"max_duration: expected a number of seconds > 0, got {value!r}")
        return None
    return float(value) if value is not None else None


def offset_specs(text: str) -> dict[str, dict[str, int]]:
    """``TOPIC:PARTITION=OFFSET[,...]`` (the CLI's) -> ``{topic: {"partition": offset}}``, as JSON has it."""
    out: dict[str, dict[str, int]] = {}
    for spec in (s.strip() for s in text.split(",")):
        try:
            tp, off = spec.rsplit("=", 1)
            topic, part = tp.rsplit(":", 1)
            out.setdefault(topic, {})[str(int(part))] = int(off)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected TOPIC:PARTITION=OFFSET[,...], got {spec!r}") from None
    return out


def _cli_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _cli_number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None


def _topic_names(cfg: PipelineConfig) -> dict[str, Any]:
    return {"propertyNames": ({"enum": list(cfg.source.topics)} if cfg.source.topics else
                              {"pattern": f"^(?:{cfg.source.topics_regex})$"})}


START_TIME = ("Replay by time: with End time, the records of [start, end) are re-applied and the stored offsets "
              "do not move; alone, the window starts at the first record at or after it and the pipeline continues "
              "from there. ISO 8601 with a time zone")

RUN_PARAMS: tuple[RunParam, ...] = (
    RunParam(
        "start_offsets", "Start offsets",
        "Replay or rewind: {topic: {partition: offset}}. Only the listed partitions are read; after the run, "
        "their stored offsets continue from the window's end.",
        "object", _start_offsets, "--start-offsets", "TOPIC:PARTITION=OFFSET[,...]", offset_specs,
        schema={"additionalProperties": {"type": "object", "minProperties": 1,
                                         "propertyNames": {"pattern": "^[0-9]+$"},
                                         "additionalProperties": {"type": "integer", "minimum": 0}}},
        schema_for=_topic_names, replay=True),
    RunParam(
        "start_time", "Start time",
        START_TIME + ".", "string", _instant("start_time"), "--from", "TIME", schema={"format": "date-time"},
        detail=lambda cfg: f"{START_TIME} (record time: {cfg.source.timestamp}).",
        replay=True),
    RunParam(
        "end_time", "End time", "End (exclusive) of the time range to replay; needs Start time.",
        "string", _instant("end_time"), "--to", "TIME", schema={"format": "date-time"}, replay=True),
    RunParam(
        "max_records", "Max records", "Override window.max_records for this run.",
        "integer", _max_records, "--max-records", "N", _cli_int, schema={"minimum": 1},
        detail=lambda cfg: f"Override window.max_records ({cfg.window.max_records})."),
    RunParam(
        "max_duration", "Max duration (s)", "Override window.max_duration (seconds) for this run.",
        "number", _max_duration, "--max-duration", "SECONDS", _cli_number, schema={"exclusiveMinimum": 0},
        detail=lambda cfg: f"Override window.max_duration ({cfg.window.max_duration:g}s)."),
)
PARAMS: tuple[str, ...] = tuple(p.name for p in RUN_PARAMS)
REPLAY_PARAMS: tuple[RunParam, ...] = tuple(p for p in RUN_PARAMS if p.replay)


def _rules(raw: Mapping[str, Any], parsed: Mapping[str, Any], problems: Problems) -> None:
    """The rules between parameters."""
    if parsed["start_offsets"] and (raw.get("start_time") or raw.get("end_time")):
        problems.append("give start_offsets or start_time/end_time, not both")
    if raw.get("end_time") and not raw.get("start_time"):
        problems.append("end_time needs start_time: the range [start_time, end_time) is replayed")
    start_time, end_time = parsed["start_time"], parsed["end_time"]
    if start_time is not None and end_time is not None and end_time <= start_time:
        problems.append(f"end_time ({raw.get('end_time')}) must be after start_time ({raw.get('start_time')})")


@dataclass(frozen=True)
class RunParams:
    """Per-run overrides, parsed: from Airflow trigger params / conf, the CLI or the REST API."""

    start_offsets: dict[str, dict[int, int]] | None = None
    max_records: int | None = None
    max_duration: float | None = None
    start_time: int | None = None  # epoch ms
    end_time: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, cfg: PipelineConfig) -> RunParams:
        """Check every declared parameter and the rules between them; ConfigError lists every problem."""
        raw = dict(raw or {})
        problems: Problems = []
        unknown = sorted(set(raw) - set(PARAMS))
        if unknown:
            problems.append(f"unknown parameters {unknown} (expected {', '.join(PARAMS)})")
        parsed = {p.name: p.check(raw.get(p.name), cfg, problems) for p in RUN_PARAMS}
        _rules(raw, parsed, problems)
        if problems:
            raise ConfigError(f"invalid run parameters for pipeline {cfg.name!r}:\n  - " + "\n  - ".join(problems))
        return cls(**parsed)


def body_schema(params: tuple[RunParam, ...], closed: bool = False) -> dict[str, Any]:
    """A JSON object of these parameters: the REST API's documented request body (``closed``: no other
    key is taken)."""
    out: dict[str, Any] = {"type": "object", "properties": {p.name: json_schema(p) for p in params}}
    if closed:
        out["additionalProperties"] = False
    return out
