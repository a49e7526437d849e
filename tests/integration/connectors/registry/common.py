"""What the registry converters' integration tests share: the stand-in's credentials and the sinks
(a MySQL table of the fixture's declared columns, or made from the schema, and an index)."""

from __future__ import annotations

from typing import Any

from tests.integration.connectors.debezium.test_types import COLUMNS, ES_MAPPING

LOGIN, PASSWORD = "cdcflow", "s3cret:with/odd chars"
CONN_ID = "cdcflow_registry"


def source(converter: str) -> dict[str, Any]:
    """``source:`` with ``converter`` for keys and values, through the registry's connection."""
    return {"key_converter": converter, "value_converter": converter, "schema_registry": {"conn_id": CONN_ID}}


def sinks(table: str, index: str, columns: bool = True, mapping: dict[str, Any] | None = ES_MAPPING) -> list[dict[str, Any]]:
    mysql: dict[str, Any] = {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": table,
                             "create_table": True}
    if columns:
        mysql.update(primary_key=["id"], columns=COLUMNS)
    return [mysql, {"type": "elasticsearch", "name": "docs", "conn_id": "cdcflow_elasticsearch", "index": index,
                    "id_fields": ["id"], "behavior_on_null_values": "delete", **({"mapping": mapping} if mapping else {})}]
