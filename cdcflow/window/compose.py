"""The composed indices' stage of a window (docs/composed-documents.md), on the driver, after every
other sink succeeded and before the offsets are committed:

1. the root keys the window's changes affect (``connectors/elasticsearch/compose.affected_roots``
   from the read tasks' seeds, and the documents that hold a changed nested row), joined to the
   backlog that earlier windows carried over;
2. a new document version for the index (``state.documents.next_version``), taken before any table
   is read;
3. up to ``max_documents`` of them rebuilt on Spark (``spark_jobs/compose.rebuild``), the backlog's
   oldest first;
4. the rest carried over, and the rebuilt ones taken off the backlog, in one transaction.

A window that dies anywhere in between is run again, and so finds the same keys again: the rebuilt
documents are rebuilt once more, which changes nothing they show.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cdcflow.state import StateStore
from connectors import faults
from connectors.elasticsearch import compose
from connectors.errors import SinkUnavailable

log = logging.getLogger("cdcflow.runner")

Key = tuple[str, ...]


def composed(target: Any) -> bool:
    return getattr(target.config, "document", None) is not None


def table_facts(keeper: Any, tables: Sequence[str]) -> compose.Tables:
    """What the builder knows of ``tables`` in the keeping MySQL sink's database: which exist (a routed
    sink creates a table with its first change), each one's primary key columns in order, and the
    soft-delete column whose rows count as gone (``delete: soft``)."""
    from connectors.mysql.connection import reader_cursor, where  # noqa: PLC0415

    marks = ", ".join(["%s"] * len(tables))
    try:
        with reader_cursor(keeper.url) as cursor:
            cursor.execute("SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE "
                           f"TABLE_SCHEMA = DATABASE() AND CONSTRAINT_NAME = 'PRIMARY' AND TABLE_NAME IN ({marks}) "
                           "ORDER BY TABLE_NAME, ORDINAL_POSITION", list(tables))
            keys: dict[str, list[str]] = {}
            for table, column in cursor.fetchall():
                keys.setdefault(table, []).append(column)
            cursor.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND "
                           f"TABLE_NAME IN ({marks})", list(tables))
            existing = frozenset(r[0] for r in cursor.fetchall())
    except Exception as exc:
        raise SinkUnavailable(f"reading the primary keys of {list(tables)} from MySQL at {where(keeper.url)} "
                              f"failed: {exc}") from exc
    soft = keeper.config.deleted_column if keeper.config.delete == "soft" else None
    return compose.Tables(keys, soft, existing)


def document_jobs(documents: Iterable[tuple[Any, Any]]) -> tuple[Any, ...]:
    """What the read tasks read of each composed index's tables (``spark_jobs.project.compose.DocumentJob``)."""
    from spark_jobs.project.compose import DocumentJob  # noqa: PLC0415

    out = []
    for es, keeper in documents:
        doc = es.config.document
        root = compose.graph(doc)
        columns = compose.seed_columns(root, doc.root.key, table_facts(keeper, doc.tables()).keys)
        out.append(DocumentJob(es.config.name, keeper.config, tuple((t, tuple(c)) for t, c in columns.items())))
    return tuple(out)


def run_stage(pipeline: str, run_id: str, documents: Iterable[tuple[Any, Any]], seeds: Mapping[str, Any],
              store: StateStore, spark: Callable[[], Any]) -> dict[str, Any]:
    """Each composed index brought up to date with the window (see the module's docstring); its
    figures by sink name."""
    out: dict[str, Any] = {}
    for es, keeper in documents:
        out[es.config.name] = _one(pipeline, run_id, es, keeper, seeds.get(es.config.name, {}), store, spark)
    return out


def _one(pipeline: str, run_id: str, es: Any, keeper: Any, seeds: Mapping[str, Any], store: StateStore,
         spark: Callable[[], Any]) -> dict[str, Any]:
    from connectors.mysql.connection import reader_cursor, where  # noqa: PLC0415
    from spark_jobs.project.compose import rebuild  # noqa: PLC0415

    cfg = es.config
    doc = cfg.document
    name = cfg.name
    held = store.documents.backlog(pipeline, name, limit=doc.max_documents)
    if not seeds and not held:
        return {"affected": 0, "rebuilt": 0, "deleted": 0, "carried": 0, "backlog": 0}
    root = compose.graph(doc)
    tables = table_facts(keeper, doc.tables())
    affected: set[Key] = set()
    if seeds:
        try:
            with reader_cursor(keeper.url) as cursor:
                affected = compose.affected_roots(cursor, root, doc.root.key, seeds, tables)
        except Exception as exc:
            raise SinkUnavailable(f"sink {name!r}: finding the documents the window changed, in MySQL at "
                                  f"{where(keeper.url)}, failed: {exc}") from exc
        affected |= _holding(es, compose.member_values(root, seeds, tables.keys), len(doc.root.key))
    taken = set(held)
    fresh = sorted(k for k in affected if k not in taken)
    room = max(0, doc.max_documents - len(held))
    now, rest = list(held) + fresh[:room], fresh[room:]
    version = store.documents.next_version(pipeline, name)  # before the tables are read
    indices = (cfg.index, *building(es))  # a whole-index rebuild under way gets the window's documents too
    stats = rebuild(spark(), es, keeper.url, now, version, tables, faults.active(), indices) if now else {}
    store.documents.carry(pipeline, name, run_id, add=rest, done=now)
    backlog = store.documents.backlog_size(pipeline, name)
    if backlog:
        log.info("composed index %s: %d documents rebuilt, %d carried over to the next windows", cfg.index,
                 len(now), backlog)
    return {"version": version, "affected": len(affected), "rebuilt": len(now), "upserted": stats.get("upserted", 0),
            "deleted": stats.get("deleted", 0), "stale": stats.get("stale", 0), "carried": len(rest),
            "backlog": backlog, **({"indices": list(indices)} if len(indices) > 1 else {}),
            # the rebuild tasks' seconds, summed: reading the rows and building, writing to Elasticsearch
            "read_s": stats.get("read_s", 0.0), "write_s": stats.get("write_s", 0.0)}


def _holding(es: Any, members: list[str], width: int) -> set[Key]:
    """The root keys of the documents that hold any of ``members`` (nested rows the window changed)."""
    if not members:
        return set()
    from elasticsearch import Elasticsearch, NotFoundError, helpers  # noqa: PLC0415

    client = Elasticsearch(es.url, basic_auth=es.auth, request_timeout=es.config.request_timeout)
    out: set[Key] = set()
    try:
        try:
            client.indices.refresh(index=es.config.index)
        except NotFoundError:
            return set()
        for i in range(0, len(members), 10_000):
            query = {"terms": {compose.MEMBERS_FIELD: members[i:i + 10_000]}}
            for hit in helpers.scan(client, index=es.config.index, query={"query": query, "_source": False}):
                parts = tuple(hit["_id"].split("+")) if width > 1 else (hit["_id"],)
                if len(parts) == width:
                    out.add(parts)
                else:
                    log.warning("composed index %s: document id %r does not split into its %d key columns; "
                                "its document is not rebuilt for a moved nested row", es.config.index, hit["_id"],
                                width)
    except Exception as exc:
        raise SinkUnavailable(f"sink {es.config.name!r}: finding the documents that hold the window's changed "
                              f"nested rows, in Elasticsearch at {es.url}, failed: {exc}") from exc
    finally:
        client.close()
    return out


# -- the whole index rebuilt into a new one, behind its alias ------------------------------------------
def rebuilding_alias(index: str) -> str:
    """The alias that marks a whole-index rebuild under way: the windows write into its index too."""
    return f"{index}-rebuilding"


def building(es: Any) -> tuple[str, ...]:
    """The index a whole-index rebuild is filling, if one is under way."""
    from elasticsearch import Elasticsearch, NotFoundError  # noqa: PLC0415

    client = Elasticsearch(es.url, basic_auth=es.auth, request_timeout=es.config.request_timeout)
    try:
        return tuple(sorted(client.indices.get_alias(name=rebuilding_alias(es.config.index))))
    except NotFoundError:
        return ()
    except Exception as exc:
        raise SinkUnavailable(f"sink {es.config.name!r}: asking Elasticsearch at {es.url} whether index "
                              f"{es.config.index!r} is being rebuilt failed: {exc}") from exc
    finally:
        client.close()


def rebuild_index(pipeline: str, es: Any, keeper: Any, store: StateStore, spark: Any,
                  log_to: Callable[[str], None] = log.info) -> dict[str, Any]:
    """Every document of a composed index rebuilt into a new index, which then takes the index's name
    as an alias, atomically: for a mapping change, with no downtime (docs/composed-documents.md).

    1. A new index ``<index>-<time>`` with the sink's mapping and settings, and the alias
       ``<index>-rebuilding`` on it: from now on every window writes its documents there too.
    2. A version V, taken after the alias exists: a window that takes a later one writes a newer
       read, which the rebuild's older one never replaces.
    3. Every root key read from MySQL, and its document rebuilt with V into the new index.
    4. One alias action: ``<index>`` moves to the new index (the old one removed, also when ``<index>``
       was the index itself), and ``<index>-rebuilding`` goes. The old index is deleted."""
    from elasticsearch import Elasticsearch  # noqa: PLC0415

    from connectors.mysql.connection import reader_cursor  # noqa: PLC0415
    from spark_jobs.project.compose import rebuild  # noqa: PLC0415

    cfg = es.config
    doc = cfg.document
    alias, marker = cfg.index, rebuilding_alias(cfg.index)
    client = Elasticsearch(es.url, basic_auth=es.auth, request_timeout=max(60.0, cfg.request_timeout))
    try:
        if client.indices.exists_alias(name=marker):
            raise SinkUnavailable(f"index {alias!r} is being rebuilt already (alias {marker!r} exists); if that "
                                  f"rebuild died, remove the alias and its index, then start again")
        new = f"{alias}-{time.strftime('%Y%m%d%H%M%S')}"
        client.indices.create(index=new, mappings=compose.mapping(cfg.mapping), settings=cfg.settings,
                              aliases={marker: {}})
        log_to(f"created {new} with the alias {marker}: windows write into it from now on")
        version = store.documents.next_version(pipeline, cfg.name)
        tables = table_facts(keeper, doc.tables())
        key_columns = ", ".join(compose.quote(k) for k in doc.root.key)
        with reader_cursor(keeper.url) as cursor:
            cursor.execute(f"SELECT {key_columns} FROM {compose.quote(doc.root.table)} WHERE 1 = 1{tables.alive()} "
                           f"ORDER BY {key_columns}")
            keys = [tuple(compose.text(v) for v in row) for row in cursor.fetchall()]
        log_to(f"rebuilding {len(keys)} documents into {new} at version {version}")
        stats = rebuild(spark, es, keeper.url, keys, version, tables, faults.active(), (new,))
        old = sorted(client.indices.get_alias(name=alias)) if client.indices.exists_alias(name=alias) else []
        actions: list[dict[str, Any]] = [{"remove": {"index": i, "alias": alias}} for i in old]
        if not old and client.indices.exists(index=alias):
            actions.append({"remove_index": {"index": alias}})  # the index itself gives its name to the alias
        actions += [{"add": {"index": new, "alias": alias}}, {"remove": {"index": new, "alias": marker}}]
        client.indices.update_aliases(actions=actions)
        for index in old:
            client.indices.delete(index=index)
        log_to(f"{alias} now points at {new}; removed {old or [alias]}")
        return {"index": new, "alias": alias, "version": version, "documents": len(keys), **stats}
    finally:
        client.close()
