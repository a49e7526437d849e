"""A chain on Canal's rows (issue 43): the read task decodes the flat messages with Canal's decoder
(spark_jobs/read/decode.change_decoder) and the steps rewrite its rows and the table its ``mysqlType``
describes (chains.described). The messages are tests/fixtures/canal/orders.py's (Canal's
documented flat message, the pages it names)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pydantic import TypeAdapter

from connectors import images
from connectors.canal.decode import CanalDecoder
from connectors.memory import MemorySource, Record
from spark_jobs.job import WindowJob
from spark_jobs.read.decode import change_decoder
from spark_jobs.transform import row_transforms as rt
from spark_jobs.transform import transform_config as cfgs
from spark_jobs.sink_targets import SinkTarget
from tests.fixtures import orders as o
from tests.fixtures.canal import orders as canal

CHAIN = TypeAdapter(list[cfgs.TransformConfig]).validate_python([
    {"type": "ReplaceField", "renames": {"id": "order_id", "customer": "buyer"}, "exclude": ["note"]},
    {"type": "Cast", "spec": {"order_id": "int64"}},
    {"type": "InsertField", "static_field": "src", "static_value": "shop"},
])


def _job() -> WindowJob:
    from cdcflow.config import MySqlSinkConfig

    sink = MySqlSinkConfig(type="mysql", name="m", table="orders", create_table=True)
    return WindowJob(pipeline="p", run_id="r", consumer_conf={}, producer_conf={}, ranges=(),
                     sinks=(SinkTarget(sink, "url"),), versioning="source_ts_ms", tolerance="all", dlq_topic="dlq",
                     context_headers=True, transforms=tuple(CHAIN), source_format="canal")


def _decoded() -> pa.Table:
    decoder = change_decoder(_job())
    assert isinstance(decoder, CanalDecoder)  # the format's decoder, not Kafka Connect's record model
    batch = MemorySource([Record(canal.TOPIC, 0, i, k, v, 1_700_000_000_000 + i, [])
                          for i, (k, v) in enumerate(canal.events())]).batch()
    return pa.Table.from_batches([decoder.decode_batch(batch)])


def test_a_chain_rewrites_canal_rows_and_the_table_mysql_type_describes() -> None:
    out = rt.apply(_decoded(), CHAIN, "source_ts_ms")
    changes = [(op, dict(image)) for op, image in zip(out.column("change_op").to_pylist(),
                                                       images.as_map(out.column("image")).to_pylist(), strict=True)]
    expected: list[tuple[str, dict[str, Any]]] = []
    for statement in o.STATEMENTS:
        for before, after in statement.rows:
            if before is not None and (after is None or before["id"] != after["id"]):
                expected.append(("delete", before))  # a delete, or a key move: the old key's row
            if after is not None:
                expected.append(("upsert", after))
    assert [(op, image["order_id"], image["buyer"], image["amount"], image["src"]) for op, image in changes] == [
        (op, str(r["id"]), r["customer"], canal.text(r["amount"]), "shop") for op, r in expected]
    assert all("id" not in image and "note" not in image for _op, image in changes)  # renamed, excluded
    table = json.loads(next(s for s in out.column("row_schema").to_pylist() if s is not None))
    assert {c["name"]: c["type"] for c in table["columns"]} == {
        "order_id": "BIGINT", "buyer": "VARCHAR(64)", "amount": "DECIMAL(10,2)", "qty": "BIGINT(20) UNSIGNED",
        "created": "DATETIME(6)", "ship_date": "DATE", "paid": "TINYINT(1)", "src": "LONGTEXT"}
    assert table["key"] == ["order_id"]  # Canal's pkNames, renamed


def test_the_decoder_moves_a_row_by_the_sinks_key_named_before_the_chain() -> None:
    """An update whose key changes is a delete and an upsert: the sinks' key (``order_id``, renamed and
    cast by the chain) is the decoder's ``id``, which a message without its own key names (Canal's
    pkNames left out here) does not tell it."""
    from cdcflow.config import MySqlSinkConfig

    sink = MySqlSinkConfig(type="mysql", name="m", table="orders", primary_key=["order_id"],
                           columns=[{"name": "order_id", "type": "BIGINT"}])
    decoder = change_decoder(replace(_job(), sinks=(SinkTarget(sink, "url"),)))
    assert decoder.key_fields == frozenset({"id"})
    moved = canal.message(o.STATEMENTS[2], 3)
    changes = decoder.decode_record(0, None, canal.dumps({**moved, "pkNames": []}), canal.TOPIC)
    assert [(c.change_op, c.image["id"]) for c in changes] == [("delete", "3"), ("upsert", "4"), ("delete", "2"),
                                                               ("upsert", "3")]
