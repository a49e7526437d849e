"""Which SMT chains the per-partition path serves (spark_jobs/row_transforms.py applies them), and
what a served chain makes of the columns: a field's name before the chain's renames
(:func:`names_before`), the row schema as the chain rewrites it (:func:`described`), and a Java
replacement as Python's ``re`` writes it (:func:`java_replacement`)."""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connectors.debezium.schema_columns import mysql_type
from connectors.debezium.types import FieldSchema
from connectors.mysql.config import MySqlSinkConfig
from spark_jobs import transform_config as cfgs
from spark_jobs.row_timestamps import java_strftime


# the transforms after ExtractNewRecordState that row_transforms.STEPS applies
SERVED_STEPS = frozenset({"Cast", "ReplaceField", "TimestampConverter", "MaskField", "InsertField", "RegexRouter",
                          "Filter", "TombstoneHandler", "Drop", "SetSchemaMetadata", "TimestampRouter",
                          "ExtractTopic", "ValueToKey"})


# -- which chains this path serves ------------------------------------------------------------------
def unserved(job: Any) -> str | None:
    """Why the per-partition path cannot run this pipeline's transforms (None: it can)."""
    chain = list(job.transforms)
    if job.source_format != "debezium" or (job.key_converter, job.value_converter) not in (
            ("json", "json"), ("json", "json_schema"), ("json_schema", "json_schema"), ("json_schema", "json")):
        return "the chain is applied to Debezium records read with the json converters only"
    if not chain or chain[0].type != "ExtractNewRecordState":
        return "the chain does not start with ExtractNewRecordState"
    tables = [t.config for t in job.sinks if isinstance(t.config, MySqlSinkConfig)]  # and indices: any
    for sink in tables:  # prepare.is_static or prepare.is_dynamic
        if sink.pk_mode == "kafka":
            return "a MySQL sink has pk_mode kafka"
        if sink.name == job.offsets_sink and (not sink.columns or "{" in sink.table):
            return "the exactly-once sink has no declared columns"
    if any(not s.columns for s in tables) and job.value_converter != "json_schema":
        # tables from the record schema need the Connect schemas (the older path infers them from JSON)
        return "tables from the record schema need value_converter json_schema"
    for i, cfg in enumerate(chain):
        reason = _unserved_step(cfg, first=i == 0, versioning=job.versioning)
        if isinstance(cfg, cfgs.ValueToKey) and any(not s.columns for s in tables):
            reason = "a table from the record schema takes its key from the Kafka key's schema"
        if reason is not None:
            return f"transforms.{i} ({cfg.type}): {reason}"
    return None


def _unserved_step(cfg: Any, first: bool, versioning: str) -> str | None:
    kind = cfg.type
    if kind == "ExtractNewRecordState":
        if not first:
            return "only as the first transform"
        if cfg.delete_handling == "rewrite":  # a delete without a before image stays a delete: the envelope decides
            return "delete_handling rewrite"
        added = ("table", "db", "source.ts_ms") if versioning == "source_ts_ms" else ("table", "db")
        extra = [f for f in cfg.add_fields if f not in added]
        return f"add_fields {extra} (this path adds {', '.join(added)})" if extra else None
    if kind not in SERVED_STEPS:
        return "not among the transforms of this path"
    if getattr(cfg, "target", "value") != "value" and kind != "SetSchemaMetadata":  # which changes no row
        return "only the value is transformed on this path"
    predicate = getattr(cfg, "predicate", None)
    if isinstance(predicate, cfgs.SqlCondition):
        return "a Sql predicate needs Spark"
    if isinstance(predicate, cfgs.TopicNameMatches) and not _re2(predicate.pattern):
        return f"the pattern {predicate.pattern!r} is not an RE2 expression"
    if isinstance(cfg, cfgs.RegexRouter) and not _re2(cfg.regex):
        return f"the regex {cfg.regex!r} is not an RE2 expression"
    if isinstance(cfg, cfgs.RegexRouter) and java_replacement(cfg.replacement, re.compile(cfg.regex).groups) is None:
        return f"the replacement {cfg.replacement!r} (groups $1-$9 and \\$ only)"
    if isinstance(cfg, cfgs.TimestampConverter) and cfg.format is not None and java_strftime(cfg.format) is None:
        return f"the format {cfg.format!r} uses more than yyyy MM dd HH mm ss SSS"
    if isinstance(cfg, cfgs.TimestampRouter) and java_strftime(cfg.timestamp_format) is None:
        return f"the timestamp_format {cfg.timestamp_format!r} uses more than yyyy MM dd HH mm ss SSS"
    return None


def _re2(pattern: str) -> bool:
    """RE2 compiles it, and it has none of Java's class arithmetic (``[a-z&&[^c]]``), which RE2 reads
    otherwise."""
    if "&&" in pattern:
        return False
    try:
        pc.match_substring_regex(pa.array([""]), f"^(?:{pattern})$")
    except pa.ArrowInvalid:
        return False
    return True


def names_before(chain: Any, name: str) -> str | None:
    """The field of the record a field after the chain comes from (renames undone), or None where a
    transform makes it (InsertField) or changes its type (Cast, TimestampConverter): the decode's
    type hints and key fields are named after the chain."""
    for cfg in reversed(list(chain)):
        if isinstance(cfg, cfgs.ReplaceField):
            back = {new: old for old, new in cfg.renames.items()}
            if name in back:
                name = back[name]
            elif name in cfg.renames:  # renamed away: the field of this name after the step is another's
                return None
        elif name in _made_or_retyped(cfg):
            return None
    return name


def _made_or_retyped(cfg: Any) -> tuple[str | None, ...]:
    if isinstance(cfg, cfgs.InsertField):
        return cfg.topic_field, cfg.partition_field, cfg.offset_field, cfg.timestamp_field, cfg.static_field
    if isinstance(cfg, cfgs.Cast):
        return tuple(cfg.spec)
    return (cfg.field,) if isinstance(cfg, cfgs.TimestampConverter) else ()


# -- the row schema (the MySQL table created from the records: connectors/debezium/schema_columns.py) --
TIME_COLUMNS = {"unix": "BIGINT", "Timestamp": "DATETIME(6)", "Date": "DATE", "Time": "LONGTEXT", "string": "LONGTEXT"}


def described(chain: Any, text: str) -> str:
    """A row schema's table (``{"columns", "key", "properties"}``) after the chain: fields renamed,
    left out, cast and added as the images are. A field whose type a step changes loses its
    Elasticsearch property (dynamic mapping)."""
    table = json.loads(text)
    columns = {c["name"]: c for c in table["columns"]}
    key, properties = list(table["key"]), dict(table.get("properties", {}))

    def typed(name: str, kind: str) -> None:
        columns[name] = {"name": name, "type": kind, "nullable": columns.get(name, {}).get("nullable", True)}
        properties.pop(name, None)

    for cfg in chain:
        if isinstance(cfg, cfgs.ExtractNewRecordState):
            for field in cfg.add_fields:
                typed("__" + field.replace(".", "_"), "BIGINT" if field == "source.ts_ms" else "LONGTEXT")
        elif isinstance(cfg, cfgs.ReplaceField):
            kept = [n for n in columns if (not cfg.include or n in cfg.include) and n not in cfg.exclude]
            columns = {cfg.renames.get(n, n): {**columns[n], "name": cfg.renames.get(n, n)} for n in kept}
            key = [cfg.renames.get(n, n) for n in key if n in kept]
            properties = {cfg.renames.get(n, n): p for n, p in properties.items() if n in kept}
        elif isinstance(cfg, cfgs.Cast):
            for field, kind in cfg.spec.items():
                if field in columns:
                    typed(field, mysql_type(FieldSchema(kind), field in key))  # as a record of that type
        elif isinstance(cfg, cfgs.TimestampConverter) and cfg.field in columns:
            typed(cfg.field, TIME_COLUMNS[cfg.target_type])
        elif isinstance(cfg, cfgs.InsertField):
            for field, kind in ((cfg.topic_field, "LONGTEXT"), (cfg.partition_field, "INT"),
                                (cfg.offset_field, "BIGINT"), (cfg.timestamp_field, "DATETIME(6)")):
                if field:
                    typed(field, kind)
            if cfg.static_field:
                value = cfg.static_value
                typed(cfg.static_field, "TINYINT(1)" if isinstance(value, bool) else "BIGINT" if isinstance(
                    value, int) else "DOUBLE" if isinstance(value, float) else "LONGTEXT")
    return json.dumps({**table, "columns": list(columns.values()), "key": key, "properties": properties})


def java_replacement(java: str, groups: int) -> str | None:
    """A Java replacement ($1, \\$) as RE2's (\\1, $); None for what Java reads otherwise or refuses
    (a group past $9 or past the regex's ``groups``, a $ without a group number)."""
    out, i = [], 0
    while i < len(java):
        c = java[i]
        if c == "\\" and i + 1 < len(java):
            out.append("\\\\" if java[i + 1] == "\\" else java[i + 1])
            i += 2
        elif c == "$":
            if i + 1 >= len(java) or not java[i + 1].isdigit() or int(java[i + 1]) > groups:
                return None
            if i + 2 < len(java) and java[i + 2].isdigit() and int(java[i + 1:i + 3]) <= groups:
                return None  # $10 …: RE2 rewrites up to \\9
            out.append("\\" + java[i + 1])
            i += 2
        elif c == "\\":
            return None  # a trailing backslash: Java refuses it
        else:
            out.append(c)
            i += 1
    return "".join(out)
