"""Decode: a read batch of Kafka records into changes, by the pipeline's ``source.format``
(connectors/formats.py: Debezium, GoldenGate, Canal, Maxwell), with the sinks' declared columns as
type hints and only the fields the sinks read when those are known; records of a Schema Registry
converter (Avro, Protobuf, JSON Schema) are transcoded first (connectors/registry/decode.py).
"""

from __future__ import annotations

import base64
from typing import Any

from connectors.changes import RecordError
from connectors.debezium.envelope import Decoder as DebeziumDecoder
from connectors.debezium.envelope import hints_from_columns
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.formats import decoder as format_decoder
from connectors.mysql.config import MySqlSinkConfig
from connectors.registry.config import REGISTRY_CONVERTERS
from connectors.registry.decode import registry_decoder
from spark_jobs.job import WindowJob
from spark_jobs import chains


def change_decoder(job: WindowJob) -> Any:
    """The decoder of the pipeline's source.format, with the sinks' declared columns as hints."""
    need_json = any(tg.config.type == "elasticsearch" for tg in job.sinks)
    key_fields = frozenset(f for tg in job.sinks for f in _key_fields(tg.config))
    columns = [c for tg in job.sinks if isinstance(tg.config, MySqlSinkConfig) for c in tg.config.columns]
    plan = chains.read_plan(job, columns, key_fields)  # the sinks' names as the records name them, …
    hints = hints_from_columns(column for column in plan.columns if column[0] is not None)
    if plan.format_rows:  # GoldenGate, Canal, Maxwell: the chain applies to the rows each message holds
        decoder = format_decoder(job.source_format, job.versioning, hints, need_json,
                                 frozenset(f for f in plan.keys.values() if f is not None), _used_fields(job))
        # a chain reads the rows typed as the producer says (connectors/row_types.py); without one the sinks
        # read the texts only, which typing would not change: left as they are
        decoder.typed = bool(job.transforms)
    elif plan.record_model:  # Debezium's topics: the value is the row
        # a registry converter's values are transcoded into the JsonConverter's with schemas first
        rows = "json_schema" if job.value_converter in REGISTRY_CONVERTERS else job.value_converter
        decoder = DebeziumDecoder(job.versioning, hints, need_json, rows=rows)
    elif job.key_converter in ("string", "bytes"):
        decoder = TextKeyDecoder(job.versioning, hints, need_json, _used_fields(job))
        decoder.converter, decoder.field = job.key_converter, _one_key_field(job, plan.keys)
    else:
        decoder = format_decoder("debezium", job.versioning, hints, need_json, key_fields, _used_fields(job))
    if plan.nested and hasattr(decoder, "nested"):
        decoder.nested = True  # structs and arrays whole, for the steps that take them apart
    # a chain reads the keys and values again (transform/row_unwrap.py, row_keys.py): the transcoded ones kept
    decoder = registry_decoder(decoder, job.registry, job.key_converter, job.value_converter,
                               keep_json=bool(job.transforms))
    if job.column_wise_min is not None and hasattr(decoder, "column_wise_min"):
        decoder.column_wise_min = job.column_wise_min
    elif job.transforms and hasattr(decoder, "column_wise_min"):
        # typed images for the chain (spark_jobs/transform/row_transforms.py): what a Cast or a MaskField does
        # depends on a field's type, which the per-record decode's texts do not carry
        decoder.column_wise_min = 1
    return decoder


class TextKeyDecoder(DebeziumDecoder):
    """Debezium's envelopes under a key of the ``string`` or ``bytes`` converter (a text, not the key
    struct): a delete event finds its row by its ``before`` image as always; a tombstone (or a delete
    without one) by its key, as the one column of the sinks' primary key (``field``, in the record's
    names: a transform may rename it after). The key's text is the string converter's; the bytes
    converter's bytes are read as base64, as a row image holds binary values (a binary column gets the
    bytes back)."""

    converter = "string"
    field: str | None = None

    def key_image(self, key: bytes | None) -> dict[str, str | None] | None:
        if key is None:
            return None
        if self.field is None:
            raise RecordError("converter", "a delete without a 'before' image deletes by its key, a text "
                                           f"(key_converter {self.converter}): that needs sinks keyed by one field, "
                                           "the same in every sink (a declared primary_key or id_fields of one field)")
        if self.converter == "bytes":
            return {self.field: base64.b64encode(key).decode("ascii")}
        try:
            return {self.field: key.decode("utf-8")}
        except UnicodeDecodeError:
            raise RecordError("converter", "key is not valid UTF-8 (key_converter string)") from None


def _one_key_field(job: WindowJob, keys: dict[str, str | None]) -> str | None:
    """The one field every sink keys its rows by, named as the record names it (``keys``: before the
    chain's renames); None where the sinks key by more fields, or declare none (a table from the record schema)."""
    declared = [_key_fields(tg.config) for tg in job.sinks]
    if len(keys) != 1 or any(len(fields) != 1 for fields in declared):
        return None
    return next(iter(keys.values()))


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
