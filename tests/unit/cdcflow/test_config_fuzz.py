"""Property-based tests of config validation (hypothesis): thousands of generated invalid configs,
each rejected with one ConfigError that names the file and every field that was broken; arbitrary
YAML never escapes as another exception."""

from __future__ import annotations

import copy
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.config import load_pipeline
from cdcflow.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
VALID: dict[str, Any] = yaml.safe_load((ROOT / "config" / "pipelines" / "demo_orders.yaml").read_text())

# Places a config can be broken, with values that are wrong there. Sites are independent: none is
# inside another, so every broken site must be reported.
SITES: dict[str, list[Any]] = {
    "name": ["bad name", "", 5, "x" * 201, "-starts-with-dash"],
    "schedule": [5, ["@hourly"], {"cron": "0 * * * *"}],
    "retries": [-1, 101, "many", 1.5, [3]],
    "retry_delay": ["soon", -5, 0, "10 minutes", 86401],
    "tags": ["demo", 7, {"a": 1}],
    "source.topics": [[], "orders", [""], ["bad topic!"], [1], ["t", "t"]],
    "source.kafka_conn_id": ["bad conn!", "", 3],
    "source.key_converter": ["xml", 1],
    "source.value_converter": ["parquet", None],  # avro is a converter (it needs source.schema_registry)
    "source.timestamp": ["wallclock", 0],
    "source.consumer_config": [{"sasl.password": "x"}, {"group.id": "g"}, "x", {"a": [1]}],
    "window.max_records": [0, -5, "many", 10**12, 2.5],
    "window.max_duration": ["10 minutes", 0, -1, 100_000, "5 parsecs"],
    "window.stop_on_empty": ["maybe", 3, [True]],
    "window.align": ["daily", 1],
    "initial_offsets": ["middle", 0, None],
    "versioning": ["wallclock", 1],
    "errors.tolerance": ["some", True],
    "errors.dlq_topic": ["bad topic!", 5],
    "errors.context_headers": ["perhaps"],
    "spark.mode": ["yarn", 2],
    "offset_store.conn_id": ["no spaces allowed", 1],
    "sinks.0.batch_size": [0, 10_001, "big"],
    "sinks.0.apply": ["merge"],
    "sinks.0.set_rows": [1, "all"],
    "sinks.0.create_table": ["sometimes"],
    "sinks.0.columns.1.type": ["BIGINTEGER", "VARCHAR", 5, "INT; DROP TABLE x"],
    "sinks.0.columns.2.name": ["", "x" * 65, "a\x00b"],
    "sinks.1.bulk_max_actions": [0, "lots"],
    "sinks.1.behavior_on_null_values": ["explode"],
    "sinks.1.behavior_on_malformed_documents": ["shrug"],
}
# unknown keys, at every level: reported under the misspelt name
UNKNOWN = ["tpoics@source", "windw@", "max_recods@window", "tabel@sinks.0", "indx@sinks.1", "tolerence@errors"]


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node: Any = doc
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


@st.composite
def broken_configs(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    doc = copy.deepcopy(VALID)
    doc["schedule"] = "@hourly"  # so that window.align data_interval is otherwise valid
    sites = draw(st.lists(st.sampled_from(sorted(SITES)), min_size=1, max_size=5, unique=True))
    broken = []
    for site in sites:
        _set(doc, site, draw(st.sampled_from(SITES[site])))
        broken.append(site)
    for unknown in draw(st.lists(st.sampled_from(UNKNOWN), max_size=2, unique=True)):
        key, parent = unknown.split("@")
        _set(doc, f"{parent}.{key}" if parent else key, draw(st.sampled_from([1, "x", None, {"a": 1}])))
        broken.append(f"{parent}.{key}" if parent else key)
    return doc, broken


FUZZ_DIR = Path(tempfile.mkdtemp(prefix="cdcflow-fuzz-"))


def _write(doc: Any, text: str | None = None) -> Path:
    path = FUZZ_DIR / "fuzzed.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_configs())
def test_every_broken_field_is_named_in_one_error(case: tuple[dict[str, Any], list[str]]) -> None:
    doc, broken = case
    path = _write(doc)
    try:
        load_pipeline(path)
    except ConfigError as exc:
        msg = str(exc)
    else:
        raise AssertionError(f"accepted a config broken at {broken}")
    assert msg.startswith(f"{path}: "), msg
    for site in broken:  # the field, or a field inside it (consumer_config.a)
        assert re.search(rf"(, |- ){re.escape(site)}[:.]", msg), f"{site} not named in:\n{msg}"


yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=30))
yaml_values = st.recursive(yaml_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=5)), max_leaves=25)


@settings(max_examples=1000, deadline=None)
@given(st.one_of(yaml_values, st.dictionaries(st.sampled_from(sorted({*VALID, "x"})), yaml_values, max_size=8)))
def test_any_yaml_document_is_accepted_or_rejected_with_a_config_error(doc: Any) -> None:
    path = _write(None, yaml.safe_dump(doc))
    try:
        load_pipeline(path)
    except ConfigError as exc:
        assert str(exc).startswith(f"{path}: ") or str(exc).startswith(f"{path}:"), str(exc)


@settings(max_examples=1000, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_accepted_or_rejected_with_a_config_error(text: str) -> None:
    path = _write(None, text)
    try:
        load_pipeline(path)
    except ConfigError as exc:
        assert str(exc).startswith(f"{path}"), str(exc)
