"""What a chain of transforms is, which every stage asks (the config load, prepare, the decode, the
projection; so it sits below the stages, as spark_jobs/sink_targets.py for the targets): which SMT
chains the per-partition path serves (spark_jobs/transform/row_transforms.py applies them), and
what a served chain makes of the columns: a field's name before the chain's renames
(:func:`names_before`) and the row schema as the chain rewrites it (:func:`described`). The Java
date patterns, regexes and replacements Kafka Connect accepts are all served; what it refuses is
refused when the config is loaded (spark_jobs/transform/transform_config.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from connectors.debezium.schema_columns import mysql_type
from connectors.debezium.types import FieldSchema
from connectors.registry.config import REGISTRY_CONVERTERS
from spark_jobs.transform import transform_config as cfgs


# the transforms after ExtractNewRecordState that row_transforms.STEPS applies
SERVED_STEPS = frozenset({"Cast", "ReplaceField", "TimestampConverter", "MaskField", "InsertField", "RegexRouter",
                          "Filter", "TombstoneHandler", "Drop", "SetSchemaMetadata", "TimestampRouter",
                          "ExtractTopic", "ValueToKey", "Flatten", "ExtractField", "HoistField"})
NESTED_STEPS = ("Flatten", "ExtractField", "HoistField")  # spark_jobs/transform/row_nested.py: they need nested values whole
SPARK_STEPS = ("SqlExpression", "Python")  # spark_jobs/transform/spark_stage.py: they run in Spark


def sparked(cfg: Any) -> bool:
    """The step runs in Spark, or its predicate does (spark_jobs/transform/spark_stage.py)."""
    return cfg.type in SPARK_STEPS or isinstance(getattr(cfg, "predicate", None), cfgs.SqlCondition)


def staged(chain: Any) -> bool:
    """The chain has a Spark stage."""
    return any(sparked(cfg) for cfg in chain)


def nested(chain: Any) -> bool:
    """The chain takes values apart or wraps them: the decode keeps structs and arrays whole."""
    return any(cfg.type in NESTED_STEPS for cfg in chain)


# -- which chains this path serves ------------------------------------------------------------------
def record_model(chain: Any) -> bool:
    """A chain without ExtractNewRecordState on Debezium's topics reads Kafka Connect's record model:
    each record's value is the row (connectors/debezium/envelope.Decoder ``rows``). With one, anywhere
    in the chain, the decode unwraps Debezium's envelopes (the steps before it act on the record,
    spark_jobs/transform/row_unwrap.py). The other source formats' decoders read each message into
    rows (:func:`format_rows`); their chains have no ExtractNewRecordState (transform_config.format_problems)."""
    chain = list(chain)
    return bool(chain) and all(cfg.type != "ExtractNewRecordState" for cfg in chain)


def format_rows(job: Any) -> bool:
    """The chain applies to the rows the decoder of the pipeline's ``source_format`` reads (GoldenGate,
    Canal, Maxwell: connectors/formats.py), as it applies to Debezium's rows after an
    ExtractNewRecordState; the rows typed as the producer says (connectors/row_types.py)."""
    return job.source_format != "debezium"


def unserved(job: Any) -> str | None:
    """Why the per-partition path cannot run this pipeline's transforms (None: it can)."""
    chain = list(job.transforms)
    # a registry converter's records are transcoded into the JsonConverter's with schemas (connectors/registry)
    schema_converters = {"json_schema", *REGISTRY_CONVERTERS}
    if {job.key_converter, job.value_converter} - {"json", "string", "bytes", *schema_converters}:
        return ("the chain is applied to records read with the json, json_schema, string, bytes and registry "
                "converters (avro, protobuf, json_schema_registry) only")
    if not record_model(chain) and job.value_converter not in ("json", *schema_converters):  # config.py refuses it
        return ("ExtractNewRecordState reads Debezium's envelope: value_converter json, json_schema or a registry "
                "converter")
    if not record_model(chain) and format_rows(job):  # cdcflow/config.py refuses it
        return (f"source.format {job.source_format}: the format's messages are already decoded into rows, and "
                "ExtractNewRecordState unwraps Debezium's envelopes: remove it")
    unwrapped = record_model(chain)  # the steps before an ExtractNewRecordState see the envelope
    for i, cfg in enumerate(chain):
        reason = _unserved_step(cfg, unwrapped)
        unwrapped = unwrapped or cfg.type == "ExtractNewRecordState"
        if reason is not None:
            return f"transforms.{i} ({cfg.type}): {reason}"
    return None


# the steps on the key's fields (spark_jobs/transform/row_keys.py; Drop, ExtractTopic, SetSchemaMetadata act on it whole)
KEY_FIELD_STEPS = ("Cast", "ReplaceField", "MaskField", "InsertField", "TimestampConverter", "Flatten",
                   "ExtractField", "HoistField")


def _unserved_step(cfg: Any, unwrapped: bool) -> str | None:
    kind = cfg.type
    if kind == "ExtractNewRecordState":
        return "a second one: the first already unwrapped the envelope" if unwrapped else None
    if not unwrapped and cfgs.envelope_problem(cfg) is not None:  # cdcflow/config.py refuses it
        return cfgs.envelope_problem(cfg)
    if sparked(cfg):  # spark_jobs/transform/spark_stage.py: its frame holds the row, or before the unwrap the
        return None   # envelope (spark_jobs/transform/envelope_frame.py)
    if kind not in SERVED_STEPS:
        return "not among the transforms of this path"
    return None  # its Java patterns, regexes and replacements: every one the config validators let through


def names_before(chain: Any, name: str, retyped: bool = False) -> str | None:
    """The field of the record a field after the chain comes from (renames undone), or None where a
    transform makes it (InsertField) or changes its type (Cast, TimestampConverter; ``retyped``: its
    record's field all the same, as a key's values identify a row whatever their type): the decode's
    type hints and key fields are named after the chain."""
    for cfg in reversed(list(chain)):
        if isinstance(cfg, cfgs.ReplaceField):
            back = {new: old for old, new in cfg.renames.items()}
            if name in back:
                name = back[name]
            elif name in cfg.renames:  # renamed away: the field of this name after the step is another's
                return None
        elif name in _made_or_retyped(cfg) and not (retyped and not isinstance(cfg, cfgs.InsertField)):
            return None
    return name


@dataclass(frozen=True)
class ReadPlan:
    """What the decode asks of the chain, in one answer (:func:`read_plan`): which records the chain
    reads (``record_model``: Debezium's values as the rows; ``format_rows``: the rows of a GoldenGate,
    Canal or Maxwell message), whether it keeps structs and arrays whole (``nested``), and the sinks'
    names as the records name them (renames undone): the declared columns' (None where the chain makes
    or retypes the field), the key fields' (a retyped key field keeps its record's name)."""

    record_model: bool
    format_rows: bool
    nested: bool
    columns: tuple[tuple[str | None, str, Any], ...]  # (name as read, declared type, encoding)
    keys: dict[str, str | None]  # a key field after the chain -> as read


def read_plan(job: Any, columns: Any, key_fields: frozenset[str]) -> ReadPlan:
    """The decode's :class:`ReadPlan` for the sinks' declared ``columns`` (objects with ``source_field``,
    ``type``, ``encoding``) and ``key_fields``."""
    chain = job.transforms
    return ReadPlan(record_model(chain), format_rows(job), nested(chain),
                    tuple((names_before(chain, c.source_field), c.type, c.encoding) for c in columns),
                    {f: names_before(chain, f, retyped=format_rows(job)) for f in key_fields})


def _made_or_retyped(cfg: Any) -> tuple[str | None, ...]:
    if isinstance(cfg, cfgs.InsertField):
        return cfg.topic_field, cfg.partition_field, cfg.offset_field, cfg.timestamp_field, cfg.static_field
    if isinstance(cfg, cfgs.Cast):
        return tuple(cfg.spec)
    return (cfg.field,) if isinstance(cfg, cfgs.TimestampConverter) else ()


# -- the row schema (the MySQL table created from the records: connectors/debezium/schema_columns.py) --
_BOUNDED = {"LONGTEXT": "VARCHAR(255)", "JSON": "VARCHAR(255)", "LONGBLOB": "VARBINARY(255)"}


def key_type(kind: str) -> str:
    """A key column's type: a primary key cannot be a TEXT, BLOB or JSON (bounded as Kafka Connect's
    JDBC sink bounds them)."""
    return _BOUNDED.get(kind, kind)
TIME_COLUMNS = {"unix": "BIGINT", "Timestamp": "DATETIME(6)", "Date": "DATE", "Time": "LONGTEXT", "string": "LONGTEXT"}


def keyed(chain: Any) -> bool:
    """The chain has a step on the key's fields: the sinks that key rows by the record key read the key
    it leaves (spark_jobs/transform/row_keys.py), and a table from the record schema takes its fields and types."""
    return any(cfg.type in KEY_FIELD_STEPS and getattr(cfg, "target", "value") == "key" for cfg in chain)


def key_after(chain: Any, key: list[str]) -> list[str]:
    """The fields of a row's key (the Kafka key's, as the table's primary key) after the chain: a
    ValueToKey's fields; in a chain with steps on the key's fields, as those leave them (renamed, left
    out, added: :func:`keyed`), else renamed and left out with the value's fields by ReplaceField (a
    key column is then read from the row image)."""
    columns: dict[str, dict[str, Any] | None] = dict.fromkeys(key)
    on_key = keyed(chain)
    for cfg in chain:
        columns = _key_step(cfg, columns, on_key)
    return list(columns)


def _key_step(cfg: Any, key: dict[str, Any], on_key: bool) -> dict[str, Any]:
    """The key's fields (each with its column, None: the value's) after one step (:func:`key_after`)."""
    if isinstance(cfg, cfgs.ValueToKey):
        return {f: None for f in cfg.fields}
    if getattr(cfg, "target", "value") != ("key" if on_key else "value"):
        return key
    if isinstance(cfg, cfgs.ReplaceField):
        return {cfg.renames.get(n, n): c and {**c, "name": cfg.renames.get(n, n)} for n, c in key.items()
                if (not cfg.include or n in cfg.include) and n not in cfg.exclude}
    if not on_key:
        return key
    typed = {f: mysql_type(FieldSchema(kind), True) for f, kind in cfg.spec.items()} if isinstance(
        cfg, cfgs.Cast) else {cfg.field: TIME_COLUMNS[cfg.target_type]} if isinstance(
        cfg, cfgs.TimestampConverter) else dict(_inserted(cfg)) if isinstance(cfg, cfgs.InsertField) else {}
    if isinstance(cfg, cfgs.HoistField):
        return {cfg.field: None}
    if isinstance(cfg, cfgs.ExtractField):  # a struct's fields are not known here, a value's are none
        return {}
    added = {f: {"name": f, "type": t, "nullable": False} for f, t in typed.items()
             if f in key or isinstance(cfg, cfgs.InsertField)}
    return {**key, **added}


def _inserted(cfg: cfgs.InsertField) -> list[tuple[str, str]]:
    """The fields an InsertField sets, with their MySQL types."""
    fields = [(f, kind) for f, kind in ((cfg.topic_field, "LONGTEXT"), (cfg.partition_field, "INT"),
                                        (cfg.offset_field, "BIGINT"), (cfg.timestamp_field, "DATETIME(6)")) if f]
    if cfg.static_field:
        value = cfg.static_value
        fields.append((cfg.static_field, "TINYINT(1)" if isinstance(value, bool) else "BIGINT" if isinstance(
            value, int) else "DOUBLE" if isinstance(value, float) else "LONGTEXT"))
    return fields


def described(chain: Any, text: str) -> str:
    """A row schema's table (``{"columns", "key", "properties"}``) after the chain: fields renamed,
    left out, cast and added as the images are. A field whose type a step changes loses its
    Elasticsearch property (dynamic mapping). In a chain with steps on the key's fields, the key
    columns are the key's as those leave them (:func:`key_after`), of the key's types: a key column
    the value lacks is added (Kafka Connect's JDBC sink reads key columns from the key)."""
    table = json.loads(text)
    columns = {c["name"]: c for c in table["columns"]}
    properties = dict(table.get("properties", {}))
    key: dict[str, Any] = {k: columns.get(k) for k in table["key"]}
    on_key = keyed(chain)

    def typed(name: str, kind: str) -> None:
        columns[name] = {"name": name, "type": kind, "nullable": columns.get(name, {}).get("nullable", True)}
        properties.pop(name, None)

    for cfg in chain:
        key = _key_step(cfg, key, on_key)
        if getattr(cfg, "target", "value") == "key":
            continue
        if isinstance(cfg, cfgs.ExtractNewRecordState):
            if cfg.delete_handling == "rewrite":
                typed("__deleted", "LONGTEXT")
            for field in cfg.add_fields:  # Debezium's int64 fields, and texts
                typed("__" + field.replace(".", "_"), "BIGINT" if field in ("source.ts_ms", "ts_ms", "lsn")
                      else "LONGTEXT")
        elif isinstance(cfg, cfgs.ReplaceField):
            kept = [n for n in columns if (not cfg.include or n in cfg.include) and n not in cfg.exclude]
            columns = {cfg.renames.get(n, n): {**columns[n], "name": cfg.renames.get(n, n)} for n in kept}
            properties = {cfg.renames.get(n, n): p for n, p in properties.items() if n in kept}
        elif isinstance(cfg, cfgs.Cast):
            for field, kind in cfg.spec.items():
                if field in columns:
                    typed(field, mysql_type(FieldSchema(kind), field in key))  # as a record of that type
        elif isinstance(cfg, cfgs.TimestampConverter) and cfg.field in columns:
            typed(cfg.field, TIME_COLUMNS[cfg.target_type])
        elif isinstance(cfg, cfgs.InsertField):
            for field, kind in _inserted(cfg):
                typed(field, kind)
    if on_key:  # the key's columns, of the key's types
        for name, column in key.items():
            if column is not None:
                columns[name] = {**column, "name": name}
                properties.pop(name, None)
    names = [k for k in key if k in columns]
    for name in names:  # a key column is NOT NULL, and bounded (a ValueToKey's field, a key of a text type)
        kind = columns[name]["type"]
        columns[name] = {**columns[name], "type": key_type(kind), "nullable": False}
    return json.dumps({**table, "columns": list(columns.values()), "key": names, "properties": properties})
