"""A sink's optional capabilities are protocols checked with isinstance (connectors/base.py), not
attributes looked up by name: what each sink declares, and a sink without them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cdcflow.config import load_pipeline
from connectors.base import ArrowSink, OffsetSink, PrunableSink, SinkStats
from connectors.elasticsearch.sink import ElasticsearchSink
from connectors.mysql.sink import MySqlSink

CFG = load_pipeline(Path(__file__).resolve().parents[3] / "config/pipelines/demo_orders.yaml")


class RowsOnly:
    """A sink with the base interface only (as a memory sink for a test would be)."""

    name = "rows"
    stats = SinkStats()

    def open(self) -> None: ...
    def write(self, changes: object) -> list[object]: return []
    def flush(self) -> list[object]: return []
    def close(self) -> None: ...


def test_each_sink_declares_its_capabilities() -> None:
    mysql = MySqlSink(CFG.sinks[0], "mysql+pymysql://u:p@127.0.0.1:1/x")  # not opened: no connection
    es = ElasticsearchSink(CFG.sinks[1], "http://127.0.0.1:1", None, {})
    assert (isinstance(mysql, ArrowSink), isinstance(mysql, OffsetSink), isinstance(mysql, PrunableSink)) == (
        True, True, True)
    assert (isinstance(es, ArrowSink), isinstance(es, OffsetSink), isinstance(es, PrunableSink)) == (
        False, False, True)
    assert not any(isinstance(RowsOnly(), cap) for cap in (ArrowSink, OffsetSink, PrunableSink))


def test_the_sink_interface_imports_no_concrete_connector() -> None:
    """connectors/base.py is the interface: importing it loads no Kafka, MySQL or Elasticsearch module."""
    probe = ("import sys, connectors.base; print(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('confluent_kafka', 'pymysql', 'sqlalchemy', 'elasticsearch') or m.startswith('connectors.') "
             "and m != 'connectors.base'))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "[]", out.stdout
