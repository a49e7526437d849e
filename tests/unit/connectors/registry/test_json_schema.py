"""JSON Schema -> the JsonConverter's record (connectors/registry/json_schema.py), on records written by
confluent-kafka's JSONSerializer: the Debezium fixture of every MySQL type with its Connect schemas made
JSON Schemas as Confluent's JsonSchemaData makes them (tests/fixtures/debezium/json_schema.py) must come
back as the exact JsonConverter record the JSON fixture holds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from connectors.registry import json_schema
from connectors.registry.client import RegistrySettings
from connectors.registry.connect import UnsupportedSchema
from connectors.registry.decode import Transcoders
from tests.fixtures.debezium import json_schema as fj
from tests.fixtures.debezium import mysql_all_types as fx
from tests.registry_standin import RegistryStandIn
from tests.unit.connectors.registry.test_avro import MODES


@pytest.fixture
def registry() -> Iterator[RegistryStandIn]:
    standin = RegistryStandIn().start()
    yield standin
    standin.stop()


@pytest.mark.parametrize("modes", MODES, ids=lambda m: ",".join(f"{k}={v}" for k, v in m.items()) or "defaults")
def test_every_type_comes_back_as_the_jsonconverters_record(registry: RegistryStandIn, modes: dict[str, Any]) -> None:
    coders = Transcoders("json_schema_registry", RegistrySettings(registry.url))
    for (key, value), (json_key, json_value) in zip(fj.events(registry.url, **modes), fx.events(**modes), strict=True):
        assert json.loads(coders.transcode(key, "key")) == json.loads(json_key)
        if json_value is None:
            assert value is None
            continue
        assert value is not None
        assert json.loads(coders.transcode(value, "value")) == json.loads(json_value)


@pytest.mark.parametrize(("schema", "value", "connect", "json_value"), [
    ({"type": "integer"}, 5, {"type": "int64", "optional": False}, 5),
    ({"type": "number"}, 0.5, {"type": "double", "optional": False}, 0.5),
    ({"type": "number", "connect.type": "float32"}, 1.1, {"type": "float", "optional": False}, 1.1),
    ({"type": ["null", "string"]}, "x", {"type": "string", "optional": True}, "x"),
    ({"enum": ["a", "b"]}, "b", {"type": "string", "optional": False}, "b"),
    ({"type": "number", "connect.type": "bytes", "title": "org.apache.kafka.connect.data.Decimal",
      "connect.parameters": {"scale": "2"}}, -1.5,
     {"type": "bytes", "optional": False, "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}},
     "/2o="),
    ({"type": "object", "connect.type": "map", "additionalProperties": {"type": "integer", "connect.type": "int16"}},
     {"k": 1}, {"type": "map", "keys": {"type": "string", "optional": False},
                "values": {"type": "int16", "optional": False}, "optional": False}, {"k": 1}),
    ({"$ref": "#/definitions/Id", "definitions": {"Id": {"type": "integer", "connect.type": "int32", "title": "Id"}}},
     7, {"type": "int32", "optional": False, "name": "Id"}, 7),
])
def test_json_schema_maps_to_connect_as_jsonschemadata_reads_it(schema: dict[str, Any], value: Any,
                                                                connect: dict[str, Any], json_value: Any) -> None:
    root = {"type": "object", "properties": {"f": {k: v for k, v in schema.items() if k != "definitions"}},
            **({"definitions": schema["definitions"]} if "definitions" in schema else {})}
    coder = json_schema.transcoder(json.dumps(root))
    doc = json.loads(coder.envelope(memoryview(json.dumps({"f": value}).encode())))
    field = doc["schema"]["fields"][0]
    del field["field"]
    assert (field, doc["payload"]["f"]) == (connect, json_value)


def test_properties_follow_their_connect_index() -> None:
    schema = {"type": "object", "properties": {"b": {"type": "string", "connect.index": 1},
                                               "a": {"oneOf": [{"type": "null"}, {"type": "string"}], "connect.index": 0}}}
    assert [f["field"] for f in json_schema.connect_schema(schema)["fields"]] == ["a", "b"]


def test_a_oneof_of_several_schemas_is_refused() -> None:
    with pytest.raises(UnsupportedSchema, match="a JSON Schema oneOf of 2 schemas: only null and one schema"):
        json_schema.connect_schema({"oneOf": [{"type": "string"}, {"type": "integer"}]})
