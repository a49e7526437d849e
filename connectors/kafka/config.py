"""The Kafka source's config model (``source:`` of a pipeline file): topics or a topic pattern, the
records' format and converters, extra librdkafka settings (never secrets, never the ones the offset
guarantees depend on)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from connectors.models import ConnId, StrictModel, TopicName
from connectors.registry.config import REGISTRY_CONVERTERS, SchemaRegistryConfig

# json: Kafka Connect's JsonConverter; the registry converters read Confluent's framing (magic byte,
# schema id) from a Schema Registry: AvroConverter, ProtobufConverter, JsonSchemaConverter
Converter = Literal["json", "json_schema", "string", "bytes", "avro", "protobuf", "json_schema_registry"]
CONVERTER_HELP = ("How the records' bytes are read: json (Kafka Connect's JsonConverter, with or without schemas), "
                  "json_schema, string, bytes (with transforms), or through a Schema Registry (source.schema_registry): "
                  "avro (Confluent's AvroConverter), protobuf (ProtobufConverter), json_schema_registry "
                  "(JsonSchemaConverter).")

# librdkafka settings that carry secrets: they belong in the Airflow connection, not in YAML.
SECRET_KAFKA_KEYS = frozenset(
    {"sasl.password", "sasl.username", "ssl.key.password", "ssl.keystore.password",
     "sasl.oauthbearer.client.secret", "ssl.key.pem", "ssl_key"}
)
# Settings cdcflow owns: letting YAML override them would break the offset guarantees.
RESERVED_KAFKA_KEYS = frozenset(
    {"enable.auto.commit", "enable.auto.offset.store", "group.id", "bootstrap.servers",
     "enable.partition.eof", "auto.offset.reset", "isolation.level"}
)


class SourceConfig(StrictModel):
    """Where the change events come from."""

    topics: list[TopicName] = Field(default_factory=list, description="The topics to read; or topics_regex.")
    format: Literal["debezium", "goldengate", "canal", "maxwell"] = Field(
        default="debezium", description="What the records are: debezium (Debezium change events, with or "
        "without the JsonConverter's schema), goldengate (Oracle GoldenGate for Big Data's JSON formatter, "
        "operation modelled), canal (Canal's flat messages, flatMessage: true) or maxwell (Maxwell's JSON). Each "
        "is decoded into the same changes; docs/formats.md maps their fields.")
    topics_regex: str | None = Field(
        default=None, description="Read every topic whose whole name matches this regex (Kafka Connect's "
        "topics.regex), e.g. 'dbserver1\\.inventory\\..*'; topics that appear later are picked up at the next "
        "window and start from initial_offsets. Topics starting with '__' are never read.")
    kafka_conn_id: ConnId = "cdcflow_kafka"
    group_id: str | None = Field(
        default=None, description="Consumer group the offsets are mirrored to; default cdcflow-<name>."
    )
    key_converter: Converter = Field(default="json", description=CONVERTER_HELP)
    value_converter: Converter = Field(default="json", description=CONVERTER_HELP)
    schema_registry: SchemaRegistryConfig | None = Field(
        default=None, description="The Schema Registry of the avro, protobuf and json_schema_registry converters "
        "(required with them): {conn_id: <Airflow connection>}.")
    consumer_config: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Extra librdkafka settings (no secrets, no offset settings)."
    )
    timestamp: Literal["kafka", "source_ts_ms"] = Field(
        default="kafka", description="The time of a record for time ranges (backfills, start_time/end_time, "
        "window.align, offsets set --to-time): the Kafka record timestamp, or the change's source.ts_ms "
        "(Debezium envelopes, format debezium).")

    @field_validator("topics")
    @classmethod
    def _unique_topics(cls, topics: list[str]) -> list[str]:
        if not topics:
            raise ValueError("expected at least 1 topic (or topics_regex instead of topics)")
        if len(set(topics)) != len(topics):
            raise ValueError("topics must be unique")
        return topics

    @field_validator("topics_regex")
    @classmethod
    def _a_regex(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"expected a regular expression (Python's re, as Java's for these): {exc}") from None
        return pattern

    @model_validator(mode="after")
    def _topics_or_regex(self) -> SourceConfig:
        if bool(self.topics) == bool(self.topics_regex):
            raise ValueError("expected either topics (a list) or topics_regex, not " +
                             ("both" if self.topics else "neither"))
        self._registry_checks()
        if self.format != "debezium" and self.timestamp == "source_ts_ms":
            raise ValueError(f"timestamp source_ts_ms reads Debezium's source.ts_ms; with format {self.format} use "
                             "timestamp: kafka")
        return self

    def _registry_checks(self) -> None:
        """A registry converter needs its registry, reads Debezium records, and the registry is only
        named where a converter uses it."""
        used = [f"{side}_converter {conv}" for side, conv in (("key", self.key_converter), ("value", self.value_converter))
                if conv in REGISTRY_CONVERTERS]
        if used and self.schema_registry is None:
            raise ValueError(f"{' and '.join(used)} {'read' if len(used) > 1 else 'reads'} schemas from a Schema "
                             "Registry: add schema_registry: "
                             "{conn_id: <Airflow connection of the registry>} to source")
        if not used and self.schema_registry is not None:
            raise ValueError("schema_registry is set but no converter reads through it: set key_converter / "
                             "value_converter to avro, protobuf or json_schema_registry, or remove schema_registry")
        if used and self.format != "debezium":
            raise ValueError(f"{' and '.join(used)}: the registry converters read Debezium records (format "
                             f"debezium); format {self.format} is JSON, read with the json converters")
        if used and self.timestamp == "source_ts_ms":
            raise ValueError(f"timestamp source_ts_ms reads source.ts_ms from JSON values; with {' and '.join(used)} "
                             "use timestamp: kafka (the records' Kafka timestamps)")

    def covers(self, topic: str) -> bool:
        """Whether the pipeline reads ``topic``."""
        if self.topics_regex is not None:
            return not topic.startswith("__") and re.fullmatch(self.topics_regex, topic) is not None
        return topic in self.topics

    @property
    def described(self) -> str:
        return ", ".join(self.topics) if self.topics else f"/{self.topics_regex}/"

    @field_validator("consumer_config")
    @classmethod
    def _no_secrets(cls, conf: dict[str, Any]) -> dict[str, Any]:
        secret = sorted(k for k in conf if k in SECRET_KAFKA_KEYS)
        if secret:
            raise ValueError(
                f"{secret}: credentials are not allowed in YAML; put them in the Airflow connection's extra"
            )
        reserved = sorted(k for k in conf if k in RESERVED_KAFKA_KEYS)
        if reserved:
            raise ValueError(f"{reserved}: managed by cdcflow (offset guarantees), cannot be set here")
        return conf
