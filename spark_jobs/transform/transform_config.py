"""Typed configs of the single-message transforms (Kafka Connect's SMT vocabulary) and predicates.

Only configuration lives here (no Spark): the implementations are Spark column expressions in
:mod:`spark_jobs.transforms`, registered there by ``type``. Transforms run in config order on the
record frame (topic, key, value, timestamp, headers) after the converters.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from spark_jobs.transform import java_dates, java_regex

Target = Literal["key", "value"]
ConnectType = Literal["int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _java_regex(value: str, kind: str) -> str:
    """A Java regex (java.util.regex.Pattern's syntax, as Kafka Connect reads it: spark_jobs/transform/java_regex.py)."""
    try:
        java_regex.compiled(value)
    except ValueError as exc:
        raise ValueError(f"{kind}: {exc}") from None
    return value


def _java_date_pattern(value: str | None, kind: str) -> str | None:
    """A SimpleDateFormat pattern, as Kafka Connect reads it (spark_jobs/transform/java_dates.py)."""
    problem = None if value is None else java_dates.problem(value)
    if problem is not None:
        raise ValueError(f"{kind}: {problem}")
    return value


# -- predicates ------------------------------------------------------------------------------------
class TopicNameMatches(_Model):
    type: Literal["TopicNameMatches"]
    pattern: str

    @field_validator("pattern")
    @classmethod
    def _regex(cls, value: str) -> str:
        return _java_regex(value, "TopicNameMatches")


class HasHeaderKey(_Model):
    type: Literal["HasHeaderKey"]
    name: str


class RecordIsTombstone(_Model):
    type: Literal["RecordIsTombstone"]


class SqlCondition(_Model):
    """A Spark SQL boolean expression over the record: ``value.amount > 100 AND topic LIKE 'x%'``."""

    type: Literal["Sql"]
    condition: str = Field(min_length=1)


Predicate = Annotated[TopicNameMatches | HasHeaderKey | RecordIsTombstone | SqlCondition, Field(discriminator="type")]


class _Transform(_Model):
    predicate: Predicate | None = Field(default=None, description="Apply only to records matching this.")
    negate: bool = Field(default=False, description="Apply only to records NOT matching the predicate.")

    # Transforms that keep the record's shape can be applied to part of the records.
    shape_preserving: ClassVar[bool] = False

    @model_validator(mode="after")
    def _predicate_allowed(self) -> _Transform:
        if self.predicate is not None and not self.shape_preserving:
            raise ValueError(
                f"{type(self).__name__} changes the record's shape, so it cannot take a predicate (Spark needs one "
                "schema for all records); put a Filter with the predicate before it, or route those records "
                "through another pipeline")
        if self.negate and self.predicate is None:
            raise ValueError("negate needs a predicate")
        return self


# -- transforms ------------------------------------------------------------------------------------
class ExtractNewRecordState(_Transform):
    """Debezium's unwrap: the value becomes the envelope's ``after`` row image."""

    type: Literal["ExtractNewRecordState"]
    delete_handling: Literal["drop", "rewrite", "none"] = Field(
        default="drop", description="drop deletes; rewrite: 'before' with __deleted=true; none: a null value")
    drop_tombstones: bool = True
    add_fields: list[Literal["op", "table", "db", "source.ts_ms", "ts_ms", "lsn", "connector"]] = Field(
        default_factory=list, description="Envelope fields added as __<name> (dots become _).")


class Cast(_Transform):
    type: Literal["Cast"]
    target: Target = "value"
    spec: dict[str, ConnectType] = Field(min_length=1, description="field -> Connect type")


class Drop(_Transform):
    """Sets the key or the value to null (a value Drop makes a tombstone)."""

    type: Literal["Drop"]
    target: Target = "value"
    shape_preserving: ClassVar[bool] = True


class ExtractField(_Transform):
    type: Literal["ExtractField"]
    target: Target = "value"
    field: str = Field(min_length=1)


class ExtractTopic(_Transform):
    """The topic becomes the value of a field (Confluent's ExtractTopic)."""

    type: Literal["ExtractTopic"]
    target: Target = "value"
    field: str = Field(min_length=1)
    skip_missing_or_null: bool = False
    shape_preserving: ClassVar[bool] = True


class Filter(_Transform):
    """Drops the records that match the predicate (all records without one)."""

    type: Literal["Filter"]
    shape_preserving: ClassVar[bool] = True


class Flatten(_Transform):
    type: Literal["Flatten"]
    target: Target = "value"
    delimiter: str = "."


class HoistField(_Transform):
    type: Literal["HoistField"]
    target: Target = "value"
    field: str = Field(min_length=1)


class InsertField(_Transform):
    type: Literal["InsertField"]
    target: Target = "value"
    topic_field: str | None = None
    partition_field: str | None = None
    offset_field: str | None = None
    timestamp_field: str | None = None
    static_field: str | None = None
    static_value: str | int | float | bool | None = None

    @model_validator(mode="after")
    def _something(self) -> InsertField:
        if not any([self.topic_field, self.partition_field, self.offset_field, self.timestamp_field, self.static_field]):
            raise ValueError("set at least one of topic_field, partition_field, offset_field, timestamp_field, static_field")
        if self.static_field and self.static_value is None:
            raise ValueError("static_field needs a static_value")
        return self


class MaskField(_Transform):
    """Replaces fields with a replacement or their type's empty value (0, '', false)."""

    type: Literal["MaskField"]
    target: Target = "value"
    fields: list[str] = Field(min_length=1)
    replacement: str | None = None
    shape_preserving: ClassVar[bool] = True


class RegexRouter(_Transform):
    """Renames the topic when it fully matches ``regex``; ``replacement`` uses $1, $2 …"""

    type: Literal["RegexRouter"]
    regex: str
    replacement: str
    shape_preserving: ClassVar[bool] = True

    @field_validator("regex")
    @classmethod
    def _regex(cls, value: str) -> str:
        return _java_regex(value, "RegexRouter")

    @field_validator("replacement")
    @classmethod
    def _replacement(cls, value: str, info: ValidationInfo) -> str:
        """Java's Matcher throws on these for every topic the regex matches: refused up front."""
        if "regex" in info.data:  # else the regex's own error is reported
            try:
                java_regex.replacement(value, info.data["regex"])
            except ValueError as exc:
                raise ValueError(f"RegexRouter: {exc}: Kafka Connect's RegexRouter fails every record it renames "
                                 "by it") from None
        return value


class ReplaceField(_Transform):
    type: Literal["ReplaceField"]
    target: Target = "value"
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    renames: dict[str, str] = Field(default_factory=dict)


class SetSchemaMetadata(_Transform):
    """Sets the schema name/version carried with the record (``_value_schema_name`` and
    ``_value_schema_version``, which Sql predicates can test; the json_schema converter fills the name
    from the envelope). Data is unchanged; no sink uses the metadata yet."""

    type: Literal["SetSchemaMetadata"]
    target: Target = "value"
    name: str | None = None
    version: int | None = None
    shape_preserving: ClassVar[bool] = True


class TimestampConverter(_Transform):
    type: Literal["TimestampConverter"]
    target: Target = "value"
    field: str = Field(min_length=1)
    target_type: Literal["string", "unix", "Date", "Time", "Timestamp"]
    format: str | None = Field(default=None, description="Java SimpleDateFormat pattern for string input/output")
    unix_precision: Literal["seconds", "milliseconds", "microseconds"] = "milliseconds"

    @field_validator("format")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        return _java_date_pattern(value, "TimestampConverter")

    @model_validator(mode="after")
    def _format(self) -> TimestampConverter:
        if self.target_type == "string" and not self.format:
            raise ValueError("target_type string needs a format, e.g. yyyy-MM-dd HH:mm:ss")
        return self


class TimestampRouter(_Transform):
    type: Literal["TimestampRouter"]
    topic_format: str = "${topic}-${timestamp}"
    timestamp_format: str = "yyyyMMdd"
    shape_preserving: ClassVar[bool] = True

    @field_validator("timestamp_format")
    @classmethod
    def _pattern(cls, value: str) -> str:
        return _java_date_pattern(value, "TimestampRouter") or value


class TombstoneHandler(_Transform):
    type: Literal["TombstoneHandler"]
    behavior: Literal["ignore", "warn", "fail"] = "warn"
    shape_preserving: ClassVar[bool] = True


class ValueToKey(_Transform):
    type: Literal["ValueToKey"]
    fields: list[str] = Field(min_length=1)


class SqlExpression(_Transform):
    """Custom: value fields set from Spark SQL expressions over the record (``key``, ``value``,
    ``topic``, ``partition``, ``offset``, ``timestamp``)."""

    type: Literal["SqlExpression"]
    fields: dict[str, str] = Field(min_length=1, description="field -> Spark SQL expression")


class PythonTransform(_Transform):
    """Custom: a function ``DataFrame -> DataFrame`` named by dotted path (``package.module.function``)."""

    type: Literal["Python"]
    function: str = Field(pattern=r"^[A-Za-z_][\w.]*\.[A-Za-z_]\w*$")
    options: dict[str, Any] = Field(default_factory=dict)


TransformConfig = Annotated[
    ExtractNewRecordState | Cast | Drop | ExtractField | ExtractTopic | Filter | Flatten | HoistField
    | InsertField | MaskField | RegexRouter | ReplaceField | SetSchemaMetadata | TimestampConverter
    | TimestampRouter | TombstoneHandler | ValueToKey | SqlExpression | PythonTransform,
    Field(discriminator="type"),
]


# -- a chain's order -------------------------------------------------------------------------------
# the steps on the value's fields: before an ExtractNewRecordState they would act on Debezium's envelope
_VALUE_FIELD_STEPS = frozenset({"Cast", "ReplaceField", "TimestampConverter", "MaskField", "InsertField",
                                "ExtractTopic", "ValueToKey", "Flatten", "ExtractField", "HoistField",
                                "SqlExpression"})


def envelope_problem(cfg: Any) -> str | None:
    """Why a step cannot come before the chain's ExtractNewRecordState (None: it can). The steps on
    the record (routers, Filter, TombstoneHandler, SetSchemaMetadata, Drop) and on the key see what
    they would after it; a step on the value's fields would act on the envelope (op, before, after,
    source, ts_ms), whose fields the unwrap then drops but ``after``: a field set, cast or renamed
    there never reaches a sink, and one taken apart leaves the unwrap no ``after``. A SqlExpression
    sets value fields, so it is such a step; a Sql predicate and a Python step may come before it
    (spark_jobs/transform/envelope_frame.py: they see the envelope, typed)."""
    if cfg.type not in _VALUE_FIELD_STEPS or getattr(cfg, "target", "value") != "value":
        return None
    named = {"Cast": lambda: list(cfg.spec), "ReplaceField": lambda: [*cfg.include, *cfg.exclude, *cfg.renames],
             "MaskField": lambda: cfg.fields, "ValueToKey": lambda: cfg.fields,
             "SqlExpression": lambda: list(cfg.fields),
             "InsertField": lambda: [f for f in (cfg.topic_field, cfg.partition_field, cfg.offset_field,
                                                 cfg.timestamp_field, cfg.static_field) if f]}
    fields = named[cfg.type]() if cfg.type in named else [cfg.field] if hasattr(cfg, "field") else None
    what = f"the field{'s' * (len(fields or []) > 1)} {', '.join(map(repr, fields))}" if fields else "every field"
    return (f"before ExtractNewRecordState the value is Debezium's envelope (op, before, after, source, ts_ms), so "
            f"{cfg.type} would act on {what} of the envelope, not of the row, and ExtractNewRecordState keeps "
            "only the envelope's 'after': put it after the ExtractNewRecordState")


def chain_problems(chain: list[Any], value_converter: str = "json",
                   source_format: str = "debezium") -> list[tuple[tuple[str | int, ...], str, Any]]:
    """The steps of a chain in an order that cannot work: a step on the value's fields before the
    ExtractNewRecordState (:func:`envelope_problem`), a second ExtractNewRecordState (the first
    unwrapped the envelope); an ExtractNewRecordState over values that are not Debezium's envelope
    (the ``string`` and ``bytes`` converters' texts; the messages of another ``source_format``, which
    its decoder reads into rows: :func:`format_problems`)."""
    if source_format != "debezium":
        return format_problems(chain, value_converter, source_format)
    unwraps = [i for i, cfg in enumerate(chain) if cfg.type == "ExtractNewRecordState"]
    problems: list[tuple[tuple[str | int, ...], str, Any]] = [
        (("transforms", i, "type"), "a second ExtractNewRecordState: the first one already unwrapped the envelope",
         "ExtractNewRecordState") for i in unwraps[1:]]
    if unwraps and value_converter in ("string", "bytes"):
        problems.append((("transforms", unwraps[0], "type"), (
            f"ExtractNewRecordState unwraps Debezium's envelope, a JSON object, and source.value_converter "
            f"{value_converter} reads each value as a {'text' if value_converter == 'string' else 'byte string'}: "
            "use value_converter json or json_schema"), "ExtractNewRecordState"))
    for i, cfg in enumerate(chain[:unwraps[0]] if unwraps else []):
        problem = envelope_problem(cfg)
        if problem is not None:
            problems.append((("transforms", i, "type"), problem, cfg.type))
    return sorted(problems, key=lambda p: p[0])


def format_problems(chain: list[Any], value_converter: str,
                    source_format: str) -> list[tuple[tuple[str | int, ...], str, Any]]:
    """A chain on GoldenGate's, Canal's or Maxwell's messages: the format's decoder reads each message
    (JSON) into rows, which every step sees as it sees Debezium's rows after an ExtractNewRecordState;
    there is no envelope to unwrap."""
    problems: list[tuple[tuple[str | int, ...], str, Any]] = [
        (("transforms", i, "type"), (
            f"source.format {source_format}: the format's messages are already decoded into rows, and "
            "ExtractNewRecordState unwraps Debezium's envelopes: remove it (the steps apply to the rows)"),
         "ExtractNewRecordState") for i, cfg in enumerate(chain) if cfg.type == "ExtractNewRecordState"]
    if chain and value_converter != "json":
        problems.append((("source", "value_converter"), (
            f"source.format {source_format} decodes each message, a JSON object, before the transforms: use "
            "value_converter json"), value_converter))
    return problems
