"""The Elasticsearch sink's config model (``sinks: - type: elasticsearch``)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from connectors.models import ConnId, Duration, StrictModel

_INDEX = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


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
        if not self.key_ignore and not self.id_fields:
            raise ValueError("id_fields is required (the fields that form the document id), "
                             "unless key_ignore is true")
        if self.key_ignore and self.id_fields:
            raise ValueError("id_fields and key_ignore: true exclude each other")
        return self
