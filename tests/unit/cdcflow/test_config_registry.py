"""The registry converters' config (source.key_converter / value_converter avro, protobuf,
json_schema_registry, source.schema_registry): every mistake named with file, line, field and what
to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.config import load_pipeline
from cdcflow.errors import ConfigError

PIPELINE = """\
name: p
source:
  topics: [dbserver1.inventory.orders]
{source}
{extra}sinks:
  - {{type: mysql, table: t, create_table: true}}
errors: {{tolerance: all, dlq_topic: p.dlq}}
"""


def _load(tmp_path: Path, source: str, extra: str = "") -> object:
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(source=source, extra=extra))
    return load_pipeline(path)


@pytest.mark.parametrize("converters", [
    "  key_converter: avro\n  value_converter: avro", "  value_converter: protobuf",
    "  key_converter: json\n  value_converter: json_schema_registry"])
@pytest.mark.parametrize("transforms", [
    "", "transforms: [{type: ExtractNewRecordState}, {type: Cast, spec: {id: int64}}]\n",
    "versioning: kafka_offset\ntransforms: [{type: Flatten}]\n"], ids=["none", "unwrap", "record-model"])
def test_registry_converters_are_read_with_and_without_transforms(tmp_path: Path, converters: str,
                                                                  transforms: str) -> None:
    """The registry's records are transcoded into the JsonConverter's with schemas, which every chain reads."""
    cfg = _load(tmp_path, converters + "\n  schema_registry: {conn_id: cdcflow_registry}", transforms)
    assert cfg.source.schema_registry.conn_id == "cdcflow_registry"  # type: ignore[attr-defined]
    assert len(cfg.transforms) == transforms.count("type:")  # type: ignore[attr-defined]


@pytest.mark.parametrize(("source", "extra", "line", "said"), [
    ("  value_converter: avro", "", "line 2, source",
     "value_converter avro reads schemas from a Schema Registry: add schema_registry: {conn_id: <Airflow connection "
     "of the registry>} to source"),
    ("  key_converter: avro\n  value_converter: protobuf", "", "line 2, source",
     "key_converter avro and value_converter protobuf read schemas from a Schema Registry"),
    ("  schema_registry: {conn_id: reg}", "", "line 2, source",
     "schema_registry is set but no converter reads through it: set key_converter / value_converter to avro, "
     "protobuf or json_schema_registry, or remove schema_registry"),
    ("  value_converter: avro\n  schema_registry: {conn_id: reg}\n  timestamp: source_ts_ms", "", "line 2, source",
     "timestamp source_ts_ms reads source.ts_ms from JSON values; with value_converter avro use timestamp: kafka"),
    ("  value_converter: avro\n  format: canal\n  schema_registry: {conn_id: reg}", "", "line 2, source",
     "value_converter avro: the registry converters read Debezium records (format debezium)"),
    ("  value_converter: avro\n  schema_registry: {url: 'http://sr:8081'}", "", "line 5, source.schema_registry.url",
     "expected no such field (unknown keys are rejected; check the spelling); got 'http://sr:8081'"),
    ("  value_converter: avrò", "", "line 4, source.value_converter",
     "'json', 'json_schema', 'string', 'bytes', 'avro', 'protobuf' or 'json_schema_registry'"),
])
def test_a_bad_registry_config_names_the_file_field_and_what_was_expected(tmp_path: Path, source: str, extra: str,
                                                                          line: str, said: str) -> None:
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, source, extra)
    message = str(exc.value)
    assert message.startswith(f"{tmp_path / 'p.yaml'}: "), message
    assert said in message, message
    assert line in message, message
