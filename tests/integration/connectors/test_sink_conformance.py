"""The sink conformance suite (tests/sink_conformance.py) for the real sinks on the services: MySQL
on both apply paths (set-based from Arrow, and row by row) and Elasticsearch, each read back from
its own system. tests/unit/connectors/test_sink_conformance.py runs the same suite for the memory sink."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cdcflow.connections import get_connection
from connectors.base import ArrowSink, FailedRecord, Sink
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.elasticsearch.sink import ElasticsearchSink
from connectors.mysql import sink as mysql_sink
from connectors.mysql.sink import MySqlSink
from spark_jobs.write.sinks import SINK_TYPES
from tests.helpers import es_client, es_docs, mysql_engine, unique
from tests.sink_conformance import (
    FIRST,
    MAPPING,
    NAMES,
    Change,
    SinkConformance,
    Subject,
    document_frame,
    frame,
    from_document,
    table_config,
    values,
)

pytestmark = [pytest.mark.integration, pytest.mark.services("mysql", "elasticsearch")]


def mysql_subject(apply: str) -> Subject:
    cfg = table_config(unique("conf"), apply=apply, batch_size=7)
    url = get_connection("cdcflow_mysql").sqlalchemy_url()

    def feed(sink: Sink, rows: list[Change]) -> list[FailedRecord]:
        assert isinstance(sink, ArrowSink)
        return sink.write_arrow(frame(rows))  # apply rows: the sink converts the batch to Changes

    def read() -> dict[int, dict[str, Any]]:
        with mysql_engine().connect() as conn:
            rows = conn.exec_driver_sql(f"SELECT {', '.join(f'`{n}`' for n in NAMES)} FROM `{cfg.table}`").all()
        return {r[0]: dict(zip(NAMES, r, strict=True)) for r in rows}

    return Subject(make=lambda: MySqlSink(cfg, url), feed=feed, read=read)


def es_subject() -> Subject:
    index = unique("conf")
    cfg = ElasticsearchSinkConfig(type="elasticsearch", name="conformance", index=index, id_fields=["id"],
                                  mapping=MAPPING, bulk_max_actions=3, max_retries=2, retry_backoff=0.1)
    url = get_connection("cdcflow_elasticsearch").http_url()

    def feed(sink: Sink, rows: list[Change]) -> list[FailedRecord]:
        return sink.write(SINK_TYPES["elasticsearch"].to_changes(document_frame(index, rows), cfg))

    def read() -> dict[int, dict[str, Any]]:
        if not es_client().indices.exists(index=index):
            return {}
        return {int(doc_id): from_document(doc) for doc_id, doc in es_docs(index).items()}

    return Subject(make=lambda: ElasticsearchSink(cfg, url, None, {}), feed=feed, read=read)


class TestRealSinks(SinkConformance):
    @pytest.fixture(params=["mysql-set", "mysql-rows", "elasticsearch"])
    def subject(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Subject]:
        if request.param == "mysql-set":  # the suite's sets are small: make them take the set path
            monkeypatch.setattr(mysql_sink, "ROW_PATH_MAX", 0)
        subject = (mysql_subject(request.param.removeprefix("mysql-")) if request.param.startswith("mysql")
                   else es_subject())
        yield subject
        subject.close_all()
        if request.param == "mysql-set":
            assert any(isinstance(s, MySqlSink) and s.stats.extra.get("set_batches") for s in subject.opened)


def test_an_index_whose_first_bulk_only_deletes_gets_its_mapping() -> None:
    """A bulk delete creates a missing index itself, with a dynamic mapping: the sink creates the
    index with its mapping first (a window whose first write task held only deletes left the
    index dynamically mapped, and the documents after it typed by their first values)."""
    subject = es_subject()
    subject.apply([("delete", 20, 99, None, None, None, None, None)])
    subject.apply([FIRST])
    [(index, got)] = es_client().indices.get_mapping(index=subject.opened[0].cfg.index).items()  # type: ignore[attr-defined]
    assert got["mappings"]["properties"]["amount"] == MAPPING["properties"]["amount"], index
    assert subject.read() == {1: values(FIRST)}
    subject.close_all()
