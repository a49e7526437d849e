"""Which SMT chains the per-partition path serves (spark_jobs/row_transforms.py applies them), and
what a served chain makes of the columns: a field's name before the chain's renames
(:func:`names_before`), the row schema as the chain rewrites it (:func:`described`), and a Java
replacement as the pieces RegexRouter joins (:func:`java_replacement`, the groups
:func:`numbered_groups` names)."""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connectors.debezium.schema_columns import mysql_type
from connectors.debezium.types import FieldSchema
from connectors.registry.config import REGISTRY_CONVERTERS
from spark_jobs import transform_config as cfgs
from spark_jobs.row_patterns import problem


# the transforms after ExtractNewRecordState that row_transforms.STEPS applies
SERVED_STEPS = frozenset({"Cast", "ReplaceField", "TimestampConverter", "MaskField", "InsertField", "RegexRouter",
                          "Filter", "TombstoneHandler", "Drop", "SetSchemaMetadata", "TimestampRouter",
                          "ExtractTopic", "ValueToKey", "Flatten", "ExtractField", "HoistField"})
NESTED_STEPS = ("Flatten", "ExtractField", "HoistField")  # spark_jobs/row_nested.py: they need nested values whole
SPARK_STEPS = ("SqlExpression", "Python")  # spark_jobs/spark_stage.py: they run in Spark


def sparked(cfg: Any) -> bool:
    """The step runs in Spark, or its predicate does (spark_jobs/spark_stage.py)."""
    return cfg.type in SPARK_STEPS or isinstance(getattr(cfg, "predicate", None), cfgs.SqlCondition)


def staged(chain: Any) -> bool:
    """The chain has a Spark stage."""
    return any(sparked(cfg) for cfg in chain)


def nested(chain: Any) -> bool:
    """The chain takes values apart or wraps them: the decode keeps structs and arrays whole."""
    return any(cfg.type in NESTED_STEPS for cfg in chain)


# -- which chains this path serves ------------------------------------------------------------------
def record_model(chain: Any) -> bool:
    """A chain without ExtractNewRecordState reads Kafka Connect's record model: each record's value
    is the row (connectors/debezium/envelope.Decoder ``rows``), whatever the source format. With one,
    anywhere in the chain, the decode unwraps Debezium's envelopes (the steps before it act on the
    record, spark_jobs/row_unwrap.py)."""
    chain = list(chain)
    return bool(chain) and all(cfg.type != "ExtractNewRecordState" for cfg in chain)


def unserved(job: Any) -> str | None:
    """Why the per-partition path cannot run this pipeline's transforms (None: it can)."""
    chain = list(job.transforms)
    # a registry converter's records are transcoded into the JsonConverter's with schemas (connectors/registry)
    schema_converters = {"json_schema", *REGISTRY_CONVERTERS}
    converters = {"json", *schema_converters, *(("string", "bytes") if record_model(chain) else ())}
    if {job.key_converter, job.value_converter} - converters:
        return ("the chain is applied to records read with the json, json_schema and registry converters (avro, "
                "protobuf, json_schema_registry) only (and string or bytes, in a chain without ExtractNewRecordState)")
    if not record_model(chain) and job.source_format != "debezium":
        return "ExtractNewRecordState unwraps Debezium's envelopes (source.format debezium)"
    unwrapped = record_model(chain)  # the steps before an ExtractNewRecordState see the envelope
    for i, cfg in enumerate(chain):
        reason = _unserved_step(cfg, unwrapped)
        unwrapped = unwrapped or cfg.type == "ExtractNewRecordState"
        if reason is not None:
            return f"transforms.{i} ({cfg.type}): {reason}"
    return _unserved_stage(chain) if staged(chain) else None


def _unserved_stage(chain: list[Any]) -> str | None:
    """What a Spark stage (spark_jobs/spark_stage.py) cannot carry across."""
    last = max(i for i, cfg in enumerate(chain) if sparked(cfg))
    for i, cfg in enumerate(chain[:last]):
        if isinstance(cfg, cfgs.ValueToKey) or (isinstance(cfg, cfgs.Drop) and cfg.target == "key"):
            return f"transforms.{i} ({cfg.type}): the key it makes does not cross the Spark step transforms.{last}"
    return None


_KEY_STEPS = ("SetSchemaMetadata", "Drop", "ExtractTopic")  # the steps this path applies to the key too


def _unserved_step(cfg: Any, unwrapped: bool) -> str | None:
    kind = cfg.type
    if kind == "ExtractNewRecordState":
        return "a second one: the first already unwrapped the envelope" if unwrapped else None
    if sparked(cfg):  # spark_jobs/spark_stage.py: its frame holds the row, as after the unwrap
        return None if unwrapped else ("before ExtractNewRecordState a Spark step would see Debezium's envelope, "
                                       "which this path unwraps as it decodes")
    if not unwrapped and cfgs.envelope_problem(cfg) is not None:  # cdcflow/config.py refuses it
        return cfgs.envelope_problem(cfg)
    if kind not in SERVED_STEPS:
        return "not among the transforms of this path"
    if getattr(cfg, "target", "value") != "value" and kind not in _KEY_STEPS:
        return "only the value is transformed on this path (the key by Drop, ExtractTopic, SetSchemaMetadata)"
    predicate = getattr(cfg, "predicate", None)
    if isinstance(predicate, cfgs.TopicNameMatches) and not _re2(predicate.pattern):
        return f"the pattern {predicate.pattern!r} is not an RE2 expression"
    if isinstance(cfg, cfgs.RegexRouter) and not _re2(cfg.regex):
        return f"the regex {cfg.regex!r} is not an RE2 expression"
    if isinstance(cfg, cfgs.RegexRouter) and java_replacement(cfg.replacement, numbered_groups(cfg.regex)[1]) is None:
        return (f"the replacement {cfg.replacement!r} names a group the regex lacks, or has a $ without a group "
                "or a trailing \\ "
                "(Java refuses it)")
    for name in ("format", "timestamp_format"):
        pattern = getattr(cfg, name, None) if kind in ("TimestampConverter", "TimestampRouter") else None
        if pattern is not None and problem(pattern) is not None:
            return f"the {name} {pattern!r}: {problem(pattern)}"
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
_BOUNDED = {"LONGTEXT": "VARCHAR(255)", "JSON": "VARCHAR(255)", "LONGBLOB": "VARBINARY(255)"}


def key_type(kind: str) -> str:
    """A key column's type: a primary key cannot be a TEXT, BLOB or JSON (bounded as Kafka Connect's
    JDBC sink bounds them)."""
    return _BOUNDED.get(kind, kind)
TIME_COLUMNS = {"unix": "BIGINT", "Timestamp": "DATETIME(6)", "Date": "DATE", "Time": "LONGTEXT", "string": "LONGTEXT"}


def key_after(chain: Any, key: list[str]) -> list[str]:
    """The fields of a row's key (the Kafka key's, as the table's primary key) after the chain: a
    ValueToKey's fields, renamed and left out with the value's fields by ReplaceField (a key column
    is read from the row image)."""
    for cfg in chain:
        if isinstance(cfg, cfgs.ValueToKey):
            key = list(cfg.fields)
        elif isinstance(cfg, cfgs.ReplaceField):
            key = [cfg.renames.get(n, n) for n in key if (not cfg.include or n in cfg.include) and n not in cfg.exclude]
    return key


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
            for field, kind in ((cfg.topic_field, "LONGTEXT"), (cfg.partition_field, "INT"),
                                (cfg.offset_field, "BIGINT"), (cfg.timestamp_field, "DATETIME(6)")):
                if field:
                    typed(field, kind)
            if cfg.static_field:
                value = cfg.static_value
                typed(cfg.static_field, "TINYINT(1)" if isinstance(value, bool) else "BIGINT" if isinstance(
                    value, int) else "DOUBLE" if isinstance(value, float) else "LONGTEXT")
    key = [k for k in key_after(chain, key) if k in columns]
    for name in key:  # a key column is NOT NULL, and bounded (a ValueToKey's field, a key of a text type)
        kind = columns[name]["type"]
        columns[name] = {**columns[name], "type": key_type(kind), "nullable": False}
    return json.dumps({**table, "columns": list(columns.values()), "key": key, "properties": properties})


def numbered_groups(regex: str) -> tuple[str, list[str | None]]:
    """The regex (RE2 syntax) with its capturing groups named ``_g1``, ``_g2`` … in order (what
    Arrow's extract_regex returns), and each group's own name (None: unnamed)."""
    out, names, i, in_class = [], [], 0, False
    while i < len(regex):
        c = regex[i]
        if regex.startswith("\\Q", i):  # quoted text, to \E
            end = regex.find("\\E", i + 2)
            end = len(regex) if end < 0 else end + 2
        elif c == "\\":
            end = i + 2
        elif in_class:
            in_class = c != "]"
            close = regex.find(":]", i) if regex.startswith("[:", i) else -1  # [:alpha:]
            end = close + 2 if close > 0 else i + 1
        elif c == "[":
            in_class = True
            end = i + 1 + len(re.match(r"\^?\]?", regex[i + 1:]).group())  # a ] first in a class is itself
        elif c == "(" and not regex.startswith("(?", i) or re.match(r"\(\?P?<\w+>", regex[i:]):
            named = re.match(r"\(\?P?<(\w+)>", regex[i:])
            names.append(named.group(1) if named else None)
            out.append(f"(?P<_g{len(names)}>")
            i += named.end() if named else 1
            continue
        else:
            end = i + 1
        out.append(regex[i:end])
        i = end
    return "".join(out), names


def java_replacement(java: str, names: list[str | None]) -> list[str | int] | None:
    """A Java replacement (Matcher.appendReplacement) over a regex of these groups, as text pieces
    and group numbers (0: the whole match): ``$n`` takes the most digits that still name a group
    (``$10`` is group 10 of a regex of ten or more, else group 1 and a 0), ``${name}`` a named group,
    ``\\x`` the character x. None where Java refuses it (a group the regex lacks, a lone ``$`` or
    trailing backslash)."""
    pieces: list[str | int] = []
    text: list[str] = []
    i = 0
    while i < len(java):
        c = java[i]
        if c == "\\":
            if i + 1 == len(java):
                return None
            text.append(java[i + 1])
            i += 2
            continue
        if c != "$":
            text.append(c)
            i += 1
            continue
        named = re.match(r"\{([A-Za-z][A-Za-z0-9]*)\}", java[i + 1:])
        if named:
            if named.group(1) not in names:
                return None
            group = names.index(named.group(1)) + 1
            i += 1 + named.end()
        else:
            if i + 1 == len(java) or java[i + 1] not in "0123456789":
                return None
            group, i = int(java[i + 1]), i + 2
            while i < len(java) and java[i] in "0123456789" and group * 10 + int(java[i]) <= len(names):
                group, i = group * 10 + int(java[i]), i + 1
            if group > len(names):
                return None
        pieces += ["".join(text), group]
        text = []
    return [p for p in [*pieces, "".join(text)] if p != ""]
