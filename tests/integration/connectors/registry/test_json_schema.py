"""Debezium's change events as Confluent's JsonSchemaConverter writes them (magic byte, schema id,
JSON; keys too), produced by confluent-kafka's own JSONSerializer (tests/fixtures/debezium/json_schema.py:
the Connect schemas made JSON Schemas as Confluent's JsonSchemaData does) against the tests' registry
stand-in, read into MariaDB and Elasticsearch value by value, as the JsonConverter's are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.state import StateStore
from tests.fixtures.debezium import json_schema as fj
from tests.helpers import bootstrap, make_pipeline, unique
from tests.integration.connectors.debezium.test_types import check
from tests.integration.connectors.registry.common import LOGIN, PASSWORD, sinks, source
from tests.registry_standin import RegistryStandIn

pytestmark = [pytest.mark.integration, pytest.mark.services]

SOURCE = source("json_schema_registry")


@pytest.mark.parametrize("modes", [{}, {"time_precision_mode": "connect", "decimal_mode": "string"}],
                         ids=["defaults", "connect-string"])
def test_every_type_through_json_schema_into_mysql_and_elasticsearch(
        config_dir: Path, store: StateStore, spark: Any, registry: RegistryStandIn,
        modes: dict[str, Any]) -> None:
    table, index = unique("jsr_types"), unique("jsr-types").replace("_", "-")
    cfg = make_pipeline(config_dir, source=SOURCE, sinks=sinks(table, index))
    events = fj.events(registry.url, cfg.source.topics[0], auth=(LOGIN, PASSWORD), **modes)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], [cdcgen.Event(k, v) for k, v in events], partitions=1)
    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)
    check(table, index, stats, modes.get("time_precision_mode", "adaptive_time_microseconds"),
          decimal_mode=modes.get("decimal_mode", "precise"))
