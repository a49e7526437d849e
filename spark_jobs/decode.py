"""Decode: a read batch of Kafka records into changes, by the pipeline's ``source.format``
(connectors/formats.py: Debezium, GoldenGate, Canal, Maxwell), with the sinks' declared columns as
type hints and only the fields the sinks read when those are known; records of a Schema Registry
converter (Avro, Protobuf, JSON Schema) are transcoded first (connectors/registry/decode.py).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from connectors import images
from connectors.debezium.envelope import Decoder as DebeziumDecoder
from connectors.debezium.envelope import hints_from_columns
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.formats import decoder as format_decoder
from connectors.mysql.config import MySqlSinkConfig
from connectors.registry.config import REGISTRY_CONVERTERS
from connectors.registry.decode import registry_decoder
from spark_jobs import row_transforms
from spark_jobs.job import WindowJob


def as_maps(decoded: pa.RecordBatch) -> pa.RecordBatch:
    """A decoded batch for Spark, which has no unions: its images as map<string,string>."""
    for name in ("image", "key_image"):
        i = decoded.schema.get_field_index(name)
        decoded = decoded.set_column(i, name, images.as_map(decoded.column(i)))
    return decoded


def change_decoder(job: WindowJob) -> Any:
    """The decoder of the pipeline's source.format, with the sinks' declared columns as hints."""
    need_json = any(tg.config.type == "elasticsearch" for tg in job.sinks)
    named = ((row_transforms.names_before(job.transforms, c.source_field), c.type, c.encoding) for tg in job.sinks
             if isinstance(tg.config, MySqlSinkConfig) for c in tg.config.columns)  # after the chain's renames
    hints = hints_from_columns((name, kind, encoding) for name, kind, encoding in named if name is not None)
    key_fields = frozenset(f for tg in job.sinks for f in _key_fields(tg.config))
    if row_transforms.record_model(job.transforms):  # the value is the row, whatever the source format
        # a registry converter's values are transcoded into the JsonConverter's with schemas first
        rows = "json_schema" if job.value_converter in REGISTRY_CONVERTERS else job.value_converter
        decoder = DebeziumDecoder(job.versioning, hints, need_json, rows=rows)
    else:
        decoder = format_decoder(job.source_format, job.versioning, hints, need_json, key_fields, _used_fields(job))
    if row_transforms.nested(job.transforms) and hasattr(decoder, "nested"):
        decoder.nested = True  # structs and arrays whole, for the steps that take them apart
    # a chain reads the keys and values again (spark_jobs/row_unwrap.py, row_steps.py): the transcoded ones kept
    decoder = registry_decoder(decoder, job.registry, job.key_converter, job.value_converter,
                               keep_json=bool(job.transforms))
    if job.column_wise_min is not None and hasattr(decoder, "column_wise_min"):
        decoder.column_wise_min = job.column_wise_min
    elif job.transforms and hasattr(decoder, "column_wise_min"):
        # typed images for the chain (spark_jobs/row_transforms.py): what a Cast or a MaskField does
        # depends on a field's type, which the per-record decode's texts do not carry
        decoder.column_wise_min = 1
    return decoder


def _used_fields(job: WindowJob) -> frozenset[str] | None:
    """The row fields the sinks read, when every sink is a MySQL table of declared columns (no
    documents, no columns from the record schema, no table named from the record, no transforms); else None."""
    if job.transforms:
        return None
    fields: set[str] = set()
    for tg in job.sinks:
        cfg = tg.config
        if not isinstance(cfg, MySqlSinkConfig) or not cfg.columns or cfg.pk_mode == "kafka" or any(
                p in cfg.table for p in ("{", "}")):
            return None
        fields.update(c.source_field for c in cfg.columns)
    return frozenset(fields)


def _key_fields(cfg: MySqlSinkConfig | ElasticsearchSinkConfig) -> list[str]:
    """The source fields a sink keys its rows by (an update that changes them moves the row)."""
    if isinstance(cfg, MySqlSinkConfig):
        fields = {c.name: c.source_field for c in cfg.columns}
        return [fields.get(k, k) for k in cfg.primary_key]
    return list(cfg.id_fields)  # Elasticsearch
