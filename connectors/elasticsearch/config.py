"""The Elasticsearch sink's config model (``sinks: - type: elasticsearch``)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from connectors.elasticsearch.compose_config import DocumentConfig
from connectors.models import ConnId, Duration, StrictModel, field_errors
from connectors.partial import DEBEZIUM_UNAVAILABLE, checked_placeholder

_INDEX = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
METADATA_FIELDS = frozenset({"_id", "_index", "_source", "_routing", "_version", "_seq_no", "_primary_term", "_ignored",
                             "_field_names", "_doc_count", "_tier", "_meta", "_data_stream_timestamp"})


class ElasticsearchSinkConfig(StrictModel):
    """Bulk-indexes c/r/u changes and deletes d changes (and tombstones) in Elasticsearch 8."""

    type: Literal["elasticsearch"]
    name: str = "elasticsearch"
    conn_id: ConnId = "cdcflow_elasticsearch"
    index: str = Field(description="Index name, or a template routing per topic, e.g. 'cdc-{topic}' "
                                   "(the topic is lowercased).")
    id_fields: list[str] = Field(default_factory=list,
                                 description="Fields of the row image that form the document id.")
    key_ignore: bool = Field(default=False, description="Document id = topic+partition+offset "
                             "(Kafka Connect's key.ignore); every change becomes its own document.")
    mapping: dict[str, Any] | None = Field(default=None, description="Mappings for indices created by cdcflow.")
    settings: dict[str, Any] | None = Field(default=None, description="Settings for indices created by cdcflow.")
    behavior_on_null_values: Literal["ignore", "delete", "fail"] = "delete"
    behavior_on_malformed_documents: Literal["ignore", "warn", "fail"] = "fail"
    bulk_max_actions: int = Field(default=1000, ge=1, le=100_000)
    bulk_max_bytes: int = Field(default=5_000_000, ge=1024, le=100_000_000)
    max_retries: int = Field(default=5, ge=0, le=20)
    retry_backoff: Duration = 0.5
    request_timeout: Duration = 30.0
    delete: Literal["hard", "soft"] = Field(
        default="hard", description="hard: a delete removes the document; soft: the document stays and "
        "deleted_field is set to the delete's source time (ISO 8601, UTC); a newer change of the key clears it "
        "(docs/soft-deletes.md).")
    deleted_field: str = Field(default="__deleted_at", min_length=1, max_length=255,
                               description="delete: soft: the document field that holds the delete's source time.")
    unavailable_value: str | None = Field(
        default=DEBEZIUM_UNAVAILABLE, min_length=1, description="A value that stands for one the source did not send "
        "(Debezium's unavailable.value.placeholder for unchanged TOASTed PostgreSQL columns): such a field keeps "
        "the value the stored document holds. Default for Debezium sources; null: every value is written as it is.")
    document: DocumentConfig | None = Field(
        default=None, description="A composed index: a document per row of a root table with lookups and nested "
        "arrays from other tables, rebuilt from the MySQL tables this pipeline keeps whenever a window changes any "
        "of its rows (docs/composed-documents.md). Takes no records of its own: id_fields, key_ignore, delete and "
        "ignore_null_updates do not apply.")
    ignore_null_updates: list[str] = Field(
        default_factory=list, description="Document fields where a null keeps the value the stored document holds "
        "(an update of binlog_row_image=MINIMAL, whose after image has only the key and the changed columns).")

    @field_validator("unavailable_value")
    @classmethod
    def _placeholder(cls, value: str | None) -> str | None:
        return checked_placeholder(value)

    @field_validator("deleted_field")
    @classmethod
    def _deleted_field(cls, value: str) -> str:
        if "." in value or not value.strip() or value in METADATA_FIELDS:
            raise ValueError("expected a top-level document field name (no '.', not one of Elasticsearch's metadata "
                             f"fields {', '.join(sorted(METADATA_FIELDS))}); got {value!r}")
        return value

    @field_validator("index")
    @classmethod
    def _index_name(cls, value: str) -> str:
        rendered = value.replace("{topic}", "t")
        if "{" in rendered or "}" in rendered:
            raise ValueError(f"the only placeholder allowed in index is {{topic}}; got {value!r}")
        if not _INDEX.match(rendered) or len(rendered) > 255:
            raise ValueError("expected a lowercase Elasticsearch index name (a-z, 0-9, '.', '_', '-', not "
                             f"starting with '.', '_' or '-'), optionally with {{topic}}; got {value!r}")
        return value

    @model_validator(mode="after")
    def _ids(self) -> ElasticsearchSinkConfig:
        if self.document is not None:
            return self._composed()
        if not self.key_ignore and not self.id_fields:
            raise ValueError("id_fields is required (the fields that form the document id), "
                             "unless key_ignore is true")
        if self.key_ignore and self.id_fields:
            raise ValueError("id_fields and key_ignore: true exclude each other")
        listed = self.ignore_null_updates
        problems: list[tuple[tuple[str | int, ...], str, Any]] = []
        repeated = sorted({f for f in listed if listed.count(f) > 1})
        if repeated:
            problems.append((("ignore_null_updates",), f"each field once, repeated: {repeated}", listed))
        ids = [f for f in listed if f in self.id_fields]
        if ids:
            problems.append((("ignore_null_updates",), f"{ids} form the document id, which always has a value", listed))
        if self.delete == "soft" and self.key_ignore:
            problems.append((("delete",), ("delete: soft needs documents keyed by the record (key_ignore: true appends "
                                           "every change as a document of its own: there is no document to mark "
                                           "deleted)"), self.delete))
        if self.delete == "soft" and self.deleted_field in self.id_fields:
            problems.append((("deleted_field",), "expected a field that is not part of the document id",
                             self.deleted_field))
        if problems:
            raise field_errors("ElasticsearchSinkConfig", problems)
        return self

    def _composed(self) -> ElasticsearchSinkConfig:
        """A composed index's documents come from its tables, not from records: the settings of a
        record's document do not apply, and its index is one name (an alias, for a rebuild)."""
        problems: list[tuple[tuple[str | int, ...], str, Any]] = []
        why = "a composed index (document:) builds its documents from its tables"
        if self.id_fields:
            problems.append((("id_fields",), f"not allowed: {why}; its id is document.root.key", self.id_fields))
        if self.key_ignore:
            problems.append((("key_ignore",), f"not allowed: {why}, one per root row", self.key_ignore))
        if "{topic}" in self.index:
            problems.append((("index",), f"one index name (no {{topic}}): {why}", self.index))
        if self.delete != "hard":
            problems.append((("delete",), f"only hard: {why}; a deleted root row deletes its document", self.delete))
        if self.ignore_null_updates:
            problems.append((("ignore_null_updates",), f"not allowed: {why}, whole", self.ignore_null_updates))
        if problems:
            raise field_errors("ElasticsearchSinkConfig", problems)
        return self
