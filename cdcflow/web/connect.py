"""Kafka Connect's REST shapes for cdcflow's pipelines: status, info, flat configs, offsets, plugins,
and config validation answered from our pydantic models. Pure functions, no I/O."""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from cdcflow import __version__
from cdcflow.config import PipelineConfig, SinkConfig, _expected, _user_path
from cdcflow.control import Pipeline, Status
from cdcflow.errors import BadRequest
from cdcflow.offsets import TopicPartition
from cdcflow.transforms import Predicate, TransformConfig

CONNECTOR_CLASS = "cdcflow.Pipeline"
WORKER_ID = "airflow"


def _union_names(annotated: Any) -> list[str]:
    union = typing.get_args(annotated)[0]
    return [typing.get_args(m.model_fields["type"].annotation)[0] for m in typing.get_args(union)]


def flat_config(cfg: PipelineConfig) -> dict[str, str]:
    """A Connect-style flat string map: dotted paths, non-strings as JSON."""
    out = {"name": cfg.name, "connector.class": CONNECTOR_CLASS, "tasks.max": "1",
           **({"topics": ",".join(cfg.source.topics)} if cfg.source.topics
              else {"topics.regex": cfg.source.topics_regex or ""})}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, v in enumerate(value):
                walk(f"{prefix}.{i}", v)
        elif value is not None:
            out[prefix] = value if isinstance(value, str) else json.dumps(value)

    walk("", cfg.model_dump(mode="json", exclude_none=True))
    return out


def status(st: Status) -> dict[str, Any]:
    connector: dict[str, Any] = {"state": st.state, "worker_id": WORKER_ID}
    if st.trace:
        connector["trace"] = st.trace
    tasks: list[dict[str, Any]] = []
    if st.state != "STOPPED":  # Connect: a stopped connector's tasks are shut down and not listed
        failed = st.last_window is not None and st.last_window.status == "failed"
        task = {"id": 0, "state": "FAILED" if failed else st.state, "worker_id": WORKER_ID}
        trace = st.last_window.message if failed and st.last_window is not None else st.trace
        if trace:
            task["trace"] = trace
        tasks.append(task)
    return {"name": st.name, "connector": connector, "tasks": tasks, "type": "sink"}


def info(p: Pipeline) -> dict[str, Any]:
    config = flat_config(p.config) if p.config is not None else {"name": p.name, "connector.class": CONNECTOR_CLASS}
    return {"name": p.name, "config": config, "tasks": [{"connector": p.name, "task": 0}], "type": "sink"}


def offsets(stored: Mapping[TopicPartition, int]) -> dict[str, Any]:
    return {"offsets": [{"partition": {"kafka_topic": t, "kafka_partition": p}, "offset": {"kafka_offset": o}}
                        for (t, p), o in sorted(stored.items())]}


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise BadRequest(f"{what}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)  # Connect's own examples send numbers as strings
    raise BadRequest(f"{what}: expected an integer, got {value!r}")


def parse_offsets(body: Any) -> dict[TopicPartition, int | None]:
    """PATCH /connectors/{name}/offsets body → {(topic, partition): offset or None (reset)}."""
    if not isinstance(body, dict) or not isinstance(body.get("offsets"), list) or not body["offsets"]:
        raise BadRequest('expected {"offsets": [{"partition": {"kafka_topic": ..., "kafka_partition": ...}, '
                         '"offset": {"kafka_offset": ...}}]}')
    out: dict[TopicPartition, int | None] = {}
    for i, item in enumerate(body["offsets"]):
        part = item.get("partition") if isinstance(item, dict) else None
        if not isinstance(part, dict) or "kafka_topic" not in part or "kafka_partition" not in part:
            raise BadRequest(f"offsets[{i}].partition: expected kafka_topic and kafka_partition")
        topic = part["kafka_topic"]
        if not isinstance(topic, str) or not topic:
            raise BadRequest(f"offsets[{i}].partition.kafka_topic: expected a topic name, got {topic!r}")
        partition = _int(part["kafka_partition"], f"offsets[{i}].partition.kafka_partition")
        off = item.get("offset")
        if off is None:
            out[(topic, partition)] = None
            continue
        if not isinstance(off, dict) or "kafka_offset" not in off:
            raise BadRequest(f"offsets[{i}].offset: expected {{\"kafka_offset\": N}} or null")
        value = _int(off["kafka_offset"], f"offsets[{i}].offset.kafka_offset")
        if value < 0:
            raise BadRequest(f"offsets[{i}].offset.kafka_offset: expected >= 0, got {value}")
        out[(topic, partition)] = value
    return out


def plugins(connectors_only: bool) -> list[dict[str, str]]:
    out = [{"class": CONNECTOR_CLASS, "type": "sink", "version": __version__}]
    if connectors_only:
        return out
    out += [{"class": f"cdcflow.sink.{n}", "type": "sink", "version": __version__} for n in _union_names(SinkConfig)]
    out += [{"class": n, "type": "transformation", "version": __version__} for n in _union_names(TransformConfig)]
    out += [{"class": n, "type": "predicate", "version": __version__} for n in _union_names(Predicate)]
    out += [{"class": f"cdcflow.converter.{n}", "type": "converter", "version": __version__}
            for n in ("json", "json_schema", "string", "bytes")]
    return out


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Connect's flat map (dotted keys, string values) → our nested config; nested input passes through."""
    if any(isinstance(v, dict | list) for v in flat.values()) and not any("." in k for k in flat):
        return dict(flat)
    root: dict[str, Any] = {}
    for key, raw in flat.items():
        if key in ("connector.class", "tasks.max"):
            continue
        value: Any = raw
        if isinstance(raw, str):
            try:
                value = json.loads(raw)
                if isinstance(value, str):
                    value = raw
            except ValueError:
                value = raw
        if key == "topics":
            root.setdefault("source", {})["topics"] = [t.strip() for t in str(raw).split(",") if t.strip()]
            continue
        node: Any = root
        parts = key.split(".")
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            nxt_is_index = not last and parts[i + 1].isdigit()
            if isinstance(node, list):
                idx = int(part)
                while len(node) <= idx:
                    node.append({})
                if last:
                    node[idx] = value
                else:
                    if not isinstance(node[idx], dict | list) or (nxt_is_index and not isinstance(node[idx], list)):
                        node[idx] = [] if nxt_is_index else {}
                    node = node[idx]
            else:
                if last:
                    node[part] = value
                else:
                    node = node.setdefault(part, [] if nxt_is_index else {})
    return root


def validate(plugin: str, body: Any) -> dict[str, Any]:
    """PUT /connector-plugins/{plugin}/config/validate: Connect's ConfigInfos shape."""
    if plugin not in (CONNECTOR_CLASS, "cdcflow", "Pipeline"):
        raise BadRequest(f"unknown connector plugin {plugin!r}: expected {CONNECTOR_CLASS}")
    if not isinstance(body, dict):
        raise BadRequest("expected a JSON object of config keys")
    data = _unflatten(body)
    errors: dict[str, list[str]] = {}
    try:
        PipelineConfig.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            name = ".".join(_user_path(data, tuple(err["loc"]))) or "(config)"
            errors.setdefault(name, []).append(f"expected {_expected(err)}")
    keys = list(dict.fromkeys([*body.keys(), *errors.keys()]))
    configs = []
    for order, key in enumerate(keys):
        group = key.split(".", 1)[0] if "." in key else "Common"
        raw = body.get(key)
        configs.append({
            "definition": {"name": key, "type": "STRING", "required": False, "default_value": None,
                           "importance": "MEDIUM", "documentation": "", "group": group, "order": order,
                           "width": "NONE", "display_name": key, "dependents": []},
            "value": {"name": key, "value": raw if raw is None or isinstance(raw, str) else json.dumps(raw),
                      "recommended_values": [], "errors": errors.get(key, []), "visible": True},
        })
    return {"name": CONNECTOR_CLASS, "error_count": sum(len(v) for v in errors.values()),
            "groups": sorted({c["definition"]["group"] for c in configs}), "configs": configs}
