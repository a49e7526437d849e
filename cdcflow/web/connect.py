"""Kafka Connect's REST shapes for cdcflow's pipelines: status, info, flat configs, offsets, plugins,
and config validation answered from our pydantic models. Pure functions, no I/O."""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from cdcflow import __version__
from cdcflow.config import PipelineConfig, SinkConfig
from cdcflow.config_errors import expected, user_path
from cdcflow.control import Pipeline, Status
from cdcflow.errors import BadRequest
from cdcflow.state import TopicPartition
from connectors.kafka.config import Converter
from spark_jobs.transform.transform_config import Predicate, TransformConfig

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
            for n in typing.get_args(Converter)]  # every converter source.key_converter/value_converter accepts
    return out


def _strip(ann: Any) -> Any:
    """``Annotated[X, ...]`` → X, ``X | None`` → X (when one member remains)."""
    while True:
        origin = typing.get_origin(ann)
        if origin is typing.Annotated:
            ann = typing.get_args(ann)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(ann) if a is not type(None)]
            if len(members) == 1:
                ann = members[0]
                continue
        return ann


def _is_model(ann: Any) -> bool:
    return isinstance(ann, type) and issubclass(ann, BaseModel)


def _tag(model: Any) -> Any:
    field = model.model_fields.get("type")
    return typing.get_args(field.annotation)[0] if field is not None and typing.get_args(field.annotation) else None


def _path(key: str, flat: Mapping[str, Any]) -> tuple[list[str], Any]:
    """A flat key's path in the nested config, and the type at its end (None when unknown), read from
    the config models: a model's fields and a list's indexes are one part each, a discriminated union
    (sinks, transforms, predicates) takes the member named by the sibling ``type`` key, and in a map of
    plain values (``spark.conf``, ``source.consumer_config``, ``renames``, ``Cast.spec``) the rest of the
    key is one key (``spark.conf.spark.sql.shuffle.partitions`` → ``{"spark.sql.shuffle.partitions": ...}``).
    Free-form maps (an Elasticsearch ``mapping`` or ``settings``) split on every dot."""
    parts = key.split(".")
    out: list[str] = []
    ann: Any = PipelineConfig
    i = 0
    while i < len(parts):
        ann = _strip(ann)
        origin = typing.get_origin(ann)
        if origin in (typing.Union, types.UnionType):
            models = [_strip(m) for m in typing.get_args(ann) if m is not type(None)]
            if not all(_is_model(m) for m in models):
                break
            tag = flat.get(".".join([*out, "type"]))
            ann = next((m for m in models if _tag(m) == tag), None)
            if ann is None:
                break
        elif _is_model(ann):
            field = ann.model_fields.get(parts[i])
            out.append(parts[i])
            i += 1
            if field is None:
                ann = None
                break
            ann = field.annotation
        elif origin is list:
            out.append(parts[i])
            i += 1
            ann = typing.get_args(ann)[0]
        elif origin is dict:
            value = _strip(typing.get_args(ann)[1])
            if value is Any or typing.get_origin(value) in (dict, list) or _is_model(value):
                ann = None
                break
            out.append(".".join(parts[i:]))
            i = len(parts)
            ann = value
        else:
            ann = None
            break
    return [*out, *parts[i:]], ann if i == len(parts) else None


def _is_text(ann: Any) -> bool:
    """Whether a value of this type is a string (then a flat value is taken as it is, never as JSON:
    a table named ``2024`` or a description ``true`` stay strings)."""
    ann = _strip(ann)
    if ann is str:
        return True
    origin = typing.get_origin(ann)
    if origin is typing.Literal:
        return all(isinstance(a, str) for a in typing.get_args(ann))
    if origin in (typing.Union, types.UnionType):
        return all(_is_text(m) for m in typing.get_args(ann) if m is not type(None))
    return False


def _value(raw: Any, ann: Any) -> Any:
    if not isinstance(raw, str) or (ann is not None and _is_text(ann)):
        return raw
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return raw if isinstance(value, str) else value


_UNSET: Any = type("_Unset", (), {"__repr__": lambda self: "<unset>"})()


def _merge(current: Any, value: Any, key: str) -> Any:
    """A key's value where others may already have put keys under it: ``"window": '{"max_records": 5}'``
    and ``"window.stop_on_empty": "false"`` merge; an empty map or list beside keys under it (what
    flat_config writes for an empty one, then edited) is the keys."""
    if current is _UNSET or current == value:
        return value
    if isinstance(current, dict) and isinstance(value, dict):
        merged = dict(value)
        for k, v in current.items():
            merged[k] = _merge(v, merged[k], f"{key}.{k}") if k in merged else v
        return merged
    if isinstance(current, dict | list) and value in ({}, []):
        return current
    if current in ({}, []) and isinstance(value, dict | list):
        return value
    raise BadRequest(f"{key}: given twice with different values ({current!r} and {value!r})")


def _filled(node: Any, where: str) -> None:
    """A list given by index must have every index (``sinks.0`` and ``sinks.2`` without ``sinks.1``
    is an error, not an empty sink)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        here = f"{where}.{k}" if where else str(k)
        if v is _UNSET:
            raise BadRequest(f"{here}: missing (the keys of a list are 0, 1, 2, ... without gaps)")
        _filled(v, here)


# Kept whole (about 60 lines): each Connect key's mapping to our config, one after another.
def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Connect's flat map (dotted keys, string values) → our nested config; nested input passes through.
    The inverse of :func:`flat_config`: strings stay strings where the field is a string, other values
    are read as JSON (``"100"`` → 100, ``'["a"]'`` → a list). Connect's ``topics`` (comma-separated)
    and ``topics.regex`` are ``source.topics`` and ``source.topics_regex``; given with those too, they
    must agree."""
    if any(isinstance(v, dict | list) for v in flat.values()) and not any("." in k for k in flat):
        return dict(flat)
    root: dict[str, Any] = {}
    for key, raw in flat.items():
        if key in ("connector.class", "tasks.max", "topics", "topics.regex"):
            continue
        parts, ann = _path(key, flat)
        value = _value(raw, ann)
        node: Any = root
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            here = ".".join(parts[:i + 1])
            if isinstance(node, list):
                if not part.isdigit() or int(part) > 10_000:
                    raise BadRequest(f"{key}: expected a list index at {here!r}, got {part!r}")
                idx = int(part)
                while len(node) <= idx:
                    node.append(_UNSET)
                slot: Any = idx
            else:
                slot = part
                if slot not in node:
                    node[slot] = _UNSET
            current = node[slot]
            if last:
                node[slot] = _merge(current, value, key)
                continue
            empty: Any = [] if parts[i + 1].isdigit() else {}
            if current is _UNSET or current in ([], {}):
                node[slot] = current = empty
            elif not isinstance(current, dict | list):
                raise BadRequest(f"{key}: {here} is given a value ({current!r}) and keys under it; give one of them")
            elif isinstance(current, list) != isinstance(empty, list):
                raise BadRequest(f"{key}: {here} is given as a {'list' if isinstance(current, list) else 'mapping'} "
                                 "and as the other")
            node = current
    _filled(root, "")
    source = root.get("source")
    if isinstance(source, dict) and source.get("topics") == []:
        del source["topics"]  # flat_config writes an empty list beside topics_regex
    aliases = {"topics": ("topics", lambda raw: list(raw) if isinstance(raw, list)
                          else [t.strip() for t in str(raw).split(",") if t.strip()]),
               "topics.regex": ("topics_regex", lambda raw: str(raw))}
    for key, (field, parse) in aliases.items():
        if key not in flat:
            continue
        value = parse(flat[key])
        if key == "topics.regex" and not value:
            continue  # flat_config's "topics.regex": "" beside topics
        source = root.setdefault("source", {}) if isinstance(root.get("source", {}), dict) else None
        if source is None:
            raise BadRequest("source: expected a mapping of source settings")
        if field in source and source[field] != value:
            raise BadRequest(f"{key} ({flat[key]!r}) and source.{field} ({flat.get(f'source.{field}')!r}) disagree: "
                             f"give one of them (Connect's {key} is source.{field})")
        source[field] = value
    return root


def connector_config(name: str, body: Any) -> dict[str, Any]:
    """PUT /connectors/{name}/config body (Connect's flat string map, or a nested config) → the nested
    pipeline config, named by the path. Validation is the config models' (Control.put_config)."""
    if not isinstance(body, dict) or not body:
        raise BadRequest("expected a JSON object of config keys (Connect's flat map, as GET "
                         f"/connectors/{name}/config answers)")
    bad = [k for k in body if not isinstance(k, str)]
    if bad:
        raise BadRequest(f"config keys must be strings, got {bad!r}")
    cls = body.get("connector.class")
    if cls is not None and cls not in (CONNECTOR_CLASS, "cdcflow", "Pipeline"):
        raise BadRequest(f"connector.class: expected {CONNECTOR_CLASS}, got {cls!r}")
    given = body.get("name")
    if given is not None and given != name:
        # Connect's own words for it
        raise BadRequest(f"Connector name configuration ({given}) doesn't match connector name in the URL ({name})")
    data = _unflatten(body)
    data.pop("connector.class", None)
    data.pop("tasks.max", None)
    data["name"] = name
    return {"name": name, **{k: v for k, v in data.items() if k != "name"}}


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
            name = ".".join(user_path(data, tuple(err["loc"]))) or "(config)"
            errors.setdefault(name, []).append(f"expected {expected(err)}")
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
