"""The sinks of a window as targets (a sink's config with its resolved connection), and their kinds:
which the read tasks write themselves (:func:`is_static`), which come from the records
(:func:`is_dynamic`), a history table, an index mapped from the records' schemas. The stages below
them ask these (spark_jobs/project, spark_jobs/write, spark_jobs/window.py); none of them is a stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.mysql.config import TABLE_PLACEHOLDERS, MySqlSinkConfig


@dataclass(frozen=True)
class SinkTarget:
    """A sink config with its resolved connection (resolved on the driver)."""

    config: MySqlSinkConfig | ElasticsearchSinkConfig
    url: str
    auth: tuple[str, str] | None = None
    # Elasticsearch: the mapping (JSON) of each index a routed sink creates, from the record schema
    mappings: tuple[tuple[str, str], ...] = ()
    # Elasticsearch: per index, the new fields schema_changes left out of its mapping (ignore, or a
    # rejected change): the documents are written without them
    left_out: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # MySQL, a table from the record schema prepared before the read (``early.schema_tables``): the
    # record schemas (schema_id) it was prepared for; the read tasks write only their changes
    schema_ids: tuple[str, ...] = ()

    @property
    def component(self) -> str:
        return f"{self.config.type}:{self.config.name}"


def is_routed(cfg: MySqlSinkConfig) -> bool:
    return any(p in cfg.table for p in TABLE_PLACEHOLDERS)


def is_static(target: SinkTarget) -> bool:
    """A target whose columns are known before the window: projected and reduced in the read task."""
    cfg = target.config
    if isinstance(cfg, ElasticsearchSinkConfig):
        return True
    return bool(cfg.columns) and not is_routed(cfg)  # pk_mode kafka too: its coordinates (tables.project_rows)


def is_history(target: SinkTarget) -> bool:
    """A history table (``mode: history``): every version of a key is kept, so the reductions keep one
    change per key and version (spark_jobs/tables.latest_rows), and its changes are written by the
    write tasks, where every change of a key meets in one task (connectors/mysql/history.py)."""
    return isinstance(target.config, MySqlSinkConfig) and target.config.mode == "history"


def is_dynamic(target: SinkTarget) -> bool:
    """A MySQL sink whose tables or columns come from the records (spark_jobs/project/tables.py); the
    exactly-once sink too (its one table, written last with the offsets: window._write_offsets_sink)."""
    cfg = target.config
    return isinstance(cfg, MySqlSinkConfig) and not is_static(target)


def mapped_by_records(target: SinkTarget) -> bool:
    """An index whose mapping the window makes from the row schemas its records carry (on the driver,
    after the read): a read task writes its documents only if their records carry none."""
    return isinstance(target.config, ElasticsearchSinkConfig) and target.config.mapping is None
