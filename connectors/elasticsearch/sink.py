"""The Elasticsearch sink: streamed bulk index/delete, idempotent and order-safe.

* Documents are indexed with external versioning (``version_type=external_gte``) from the change's
  version, so re-applying a window changes nothing and an older change never replaces a newer one
  (Elasticsearch answers 409, counted as ``stale``). Before each bulk request one mget reads the
  versions of its documents (and their tombstones): a change the index has passed is not sent
  (``stale``), nor one it holds already, with the same version and source (``unchanged``); an
  equal version with another source (a range re-applied after a transform was fixed) is re-indexed.
* Deletes use the same versioning and also write a tombstone document (index, id, version) to
  ``cdcflow-tombstones``. Elasticsearch forgets a deleted document's version after
  ``index.gc_deletes`` (60 s by default); the tombstone index does not, and an index action whose
  version is not newer than its document's tombstone is skipped, so a replay cannot resurrect a
  deleted document. Deleting a missing document is a success.
* Bulk requests are bounded by actions and bytes; the sink holds at most one request in memory.
* Transport errors, 429 and 5xx are retried with exponential backoff (the request, or the items
  that got them); after the retries the window fails as an infrastructure error, nothing goes to the
  DLQ. Per-document 4xx errors (mapping, parsing) follow ``behavior_on_malformed_documents``; with
  ``fail`` they are returned as failed records (DLQ with tolerance all, else the window fails). A
  rejected delete or tombstone is always a failed record: skipped, it would let a replay bring the
  document back.
* ``delete: soft`` and partial updates (connectors/elasticsearch/documents.py): a soft delete
  indexes the stored document with the delete's time and version; an upsert that keeps some stored
  values indexes the stored document with its fields laid over it, at its version. Both read the
  stored documents in one mget before the bulk request.
* ``truncate: apply`` (:meth:`ElasticsearchSink.truncate`): a TRUNCATE of the source table at version
  V raises the index's TRUNCATE mark (a document of ``cdcflow-tombstones`` whose external version is
  V) and deletes the index's documents older than V by versioned deletes, so a newer document
  stays. Index actions not newer than the mark are skipped, like those of a tombstoned document.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from connectors.base import Change, FailedRecord, SinkStats, newest_per_key
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.elasticsearch.documents import STORED_ANSWER, TOMBSTONES, Item, items_for, resolve, tombstone_id
from connectors.errors import ConfigError, SinkUnavailable
from connectors.partial import PartialRule

log = logging.getLogger(__name__)

__all__ = ["TOMBSTONES", "ElasticsearchSink", "tombstone_id"]  # tombstone_id: the fault campaign reads tombstones
TOMBSTONE_FIELDS = {"index": {"type": "keyword"}, "deleted_at": {"type": "date", "format": "epoch_millis"}}
RETRY_STATUS = frozenset({429, 502, 503, 504})
# Only what the sink reads of a bulk or mget answer: per item its status (and error), per document
# whether it was found and its version. Elasticsearch writes less and the client parses less (a
# 1,000-action bulk's full answer is ~250 KB of JSON: index, id, version, seq_no, shards per item).
BULK_ANSWER = ["items.*.status", "items.*.error"]
MGET_ANSWER = ["docs._index", "docs._id", "docs.found", "docs._version"]  # _index, _id: no doc is left empty
TRUNCATE_ID = "\x00truncate"  # the TRUNCATE mark's tombstone id (a document id never starts with NUL)
SCAN_PAGE = 1_000


class ElasticsearchSink:
    def __init__(self, cfg: ElasticsearchSinkConfig, url: str, auth: tuple[str, str] | None = None,
                 mappings: Mapping[str, dict[str, Any]] | None = None,
                 left_out: Mapping[str, frozenset[str]] | None = None) -> None:
        """``mappings``: the mapping of each index that has its own (a routed sink's indices, from the
        record schema); the others get ``cfg.mapping``. ``left_out``: per index, the fields its
        documents are written without (new fields ``schema_changes`` did not add to its mapping)."""
        self.cfg = cfg
        self._mappings = dict(mappings or {})
        self._left_out = {index: fields for index, fields in (left_out or {}).items() if fields}
        self.name = cfg.name
        self.url = url
        self.auth = auth
        self.stats = SinkStats()
        self.rule = PartialRule.of(cfg, never=cfg.id_fields)  # the values that keep the stored ones
        self._pending: list[Item] = []
        self._pending_bytes = 0
        self._known_indices: set[str] = set()
        self._client: Any = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def open(self) -> None:
        from elasticsearch import Elasticsearch  # noqa: PLC0415

        self._client = Elasticsearch(self.url, basic_auth=self.auth, request_timeout=self.cfg.request_timeout,
                                     max_retries=0, retry_on_timeout=False)
        self._call("checking the cluster", lambda: self._client.info())
        self._ensure_index(TOMBSTONES, {"dynamic": False, "properties": TOMBSTONE_FIELDS}, None)
        # an index created before retention existed lacks deleted_at: add it (adding a field is allowed)
        self._call("mapping the tombstone index", lambda: self._client.indices.put_mapping(
            index=TOMBSTONES, properties=TOMBSTONE_FIELDS))

    def prune_tombstones(self, older_than_s: float) -> int:
        """Delete this sink's tombstone documents written more than ``older_than_s`` ago
        (retention.tombstones). Tombstones written before retention existed have no ``deleted_at``
        and are kept. Returns how many were deleted."""
        from elasticsearch import Elasticsearch  # noqa: PLC0415

        client = Elasticsearch(self.url, basic_auth=self.auth, request_timeout=max(60, self.cfg.request_timeout))
        indices = self.cfg.index.replace("{topic}", "*")
        cutoff = int((time.time() - older_than_s) * 1000)
        try:
            if not self._call("looking for the tombstone index", lambda: client.indices.exists(index=TOMBSTONES)):
                return 0
            resp = self._call("pruning tombstones", lambda: client.delete_by_query(
                index=TOMBSTONES, conflicts="proceed", refresh=True,
                query={"bool": {"filter": [{"wildcard": {"index": {"value": indices}}},
                                           {"range": {"deleted_at": {"lt": cutoff}}}]}}))
            return int(resp.get("deleted", 0))
        finally:
            client.close()

    def write(self, changes: Sequence[Change]) -> list[FailedRecord]:
        failed: list[FailedRecord] = []
        changes, superseded = newest_per_key(changes)
        self.stats.stale += superseded
        for change in changes:
            for item in self._items(change):
                if self._pending and (len(self._pending) >= self.cfg.bulk_max_actions
                                      or self._pending_bytes + len(item.lines) > self.cfg.bulk_max_bytes):
                    failed += self._send()
                self._pending.append(item)
                self._pending_bytes += len(item.lines)
        return failed

    def flush(self) -> list[FailedRecord]:
        return self._send() if self._pending else []

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- building actions --------------------------------------------------------------------------
    def _items(self, change: Change) -> list[Item]:
        return items_for(change, self.cfg, self.rule, self._left_out)

    # -- sending -----------------------------------------------------------------------------------
    def _send(self) -> list[FailedRecord]:
        items, self._pending, self._pending_bytes = self._pending, [], 0
        items, missing = resolve(items, self.cfg, lambda docs: self._call(
            "reading the documents that soft deletes and partial changes keep", lambda: self._client.mget(
                docs=docs, filter_path=STORED_ANSWER))["docs"])
        self.stats.unchanged += missing  # a soft delete of a document the index does not hold
        items = self._drop_held(items)
        # a bulk delete creates a missing index too, with a dynamic mapping: so before deletes as well
        for index in {i.change.key[0] for i in items if i.kind in ("index", "delete")}:
            self._ensure_index(index, self._with_deleted(self._mappings.get(index, self.cfg.mapping)), self.cfg.settings)
        failed: list[FailedRecord] = []
        attempt = 0
        while items:
            body = b"".join(i.lines for i in items)
            response = self._call("sending a bulk request", lambda body=body: self._client.bulk(
                operations=body, filter_path=BULK_ANSWER))
            retry: list[Item] = []
            last_error: dict[str, Any] = {}
            for item, result in zip(items, response["items"], strict=True):
                outcome = next(iter(result.values()))
                status = outcome.get("status", 500)
                if status < 300:
                    if item.kind == "index":
                        self.stats.upserted += 1
                        self.stats.count(item.change.key[0], upserted=1)
                    elif item.kind in ("delete", "soft"):
                        self.stats.deleted += 1
                        self.stats.count(item.change.key[0], deleted=1)
                elif status == 409:
                    self.stats.stale += item.kind != "tombstone"  # a newer version is already there
                elif status == 404 and item.kind == "delete":
                    self.stats.unchanged += 1  # deleting a missing document is a success, and no change
                elif status in RETRY_STATUS or status >= 500:
                    retry.append(item)
                    last_error = outcome.get("error") or {"status": status}
                else:
                    failed += self._malformed(item, outcome.get("error") or {"type": f"http_{status}"})
            if not retry:
                break
            attempt += 1
            if attempt > self.cfg.max_retries:
                raise SinkUnavailable(f"sink {self.name!r}: Elasticsearch at {self.url} kept rejecting {len(retry)} "
                                      f"bulk items after {self.cfg.max_retries} retries (last: {last_error})")
            time.sleep(self.cfg.retry_backoff * 2 ** (attempt - 1))
            items = retry
        return failed

    def _with_deleted(self, mapping: dict[str, Any] | None) -> dict[str, Any] | None:
        """A created index's mapping with the soft delete's field as a date (a dynamic mapping finds it)."""
        if self.cfg.delete != "soft" or mapping is None or self.cfg.deleted_field in mapping.get("properties", {}):
            return mapping
        return {**mapping, "properties": {**mapping.get("properties", {}), self.cfg.deleted_field: {"type": "date"}}}

    def _malformed(self, item: Item, error: dict[str, Any]) -> list[FailedRecord]:
        etype, reason = str(error.get("type", "unknown")), str(error.get("reason", ""))
        caused = error.get("caused_by") or {}
        if caused:
            reason += f" (caused by {caused.get('type')}: {caused.get('reason')})"
        index, doc_id = item.change.key
        message = f"Elasticsearch rejected document {doc_id!r} for index {index!r}: {etype}: {reason}"
        behavior = self.cfg.behavior_on_malformed_documents
        if item.kind != "index":  # a delete, or its tombstone: dropped, a later replay could bring the document back
            message = (f"Elasticsearch rejected the {item.kind} of document {doc_id!r} of index {index!r}: {etype}: "
                       f"{reason} (a delete is never skipped, whatever behavior_on_malformed_documents says)")
            behavior = "fail"
        if behavior == "ignore":
            self.stats.extra["ignored"] = self.stats.extra.get("ignored", 0) + 1
            return []
        if behavior == "warn":
            log.warning("%s (behavior_on_malformed_documents=warn: skipped)", message)
            self.stats.extra["warned"] = self.stats.extra.get("warned", 0) + 1
            return []
        self.stats.failed += 1
        return [item.change.failed("sink", f"elasticsearch:{self.name}", f"elasticsearch.{etype}", message,
                                   extra_headers=(("__cdcflow.errors.es.type", etype.encode()),
                                                  ("__cdcflow.errors.es.reason", reason.encode())))]

    def _drop_held(self, items: list[Item]) -> list[Item]:
        """Skip the index actions (and soft deletes) whose change the index already holds or has passed, counted: stale
        when not newer than their document's tombstone (no resurrection), their index's TRUNCATE mark
        or the document's version; unchanged when the document has their version and the same
        source. One mget for all of it (a second, of the sources, only for equal versions: replays).
        An equal version whose document differs (a range re-applied after a transform was fixed) is
        sent: ``external_gte`` replaces it."""
        if self.cfg.key_ignore:
            return items
        indexed = [i for i in items if i.kind in ("index", "soft")]  # a soft delete indexes the stored document
        if not indexed:
            return items
        tombs = [tombstone_id(*i.change.key) for i in indexed]
        marks = {index: tombstone_id(index, TRUNCATE_ID) for index in {i.change.key[0] for i in indexed}}
        dead_ids = list({*tombs, *marks.values()})
        docs = [{"_index": TOMBSTONES, "_id": t} for t in dead_ids] + [
            {"_index": i.change.key[0], "_id": i.change.key[1]} for i in indexed]
        found = self._call("reading tombstones and document versions", lambda: self._client.mget(
            docs=docs, source=False, filter_path=MGET_ANSWER))["docs"]
        dead = {t: d["_version"] for t, d in zip(dead_ids, found[:len(dead_ids)], strict=True) if d.get("found")}
        held = [d.get("_version") if d.get("found") else None for d in found[len(dead_ids):]]
        floor = {index: dead.get(mark, -1) for index, mark in marks.items()}
        skip: set[int] = set()
        equal: list[Item] = []
        for item, tomb, version in zip(indexed, tombs, held, strict=True):
            v = item.change.version
            # a soft delete's own tombstone has its version: a replay of it meets it, and is compared below
            tombstoned = dead.get(tomb, -1) > v if item.kind == "soft" else dead.get(tomb, -1) >= v
            if tombstoned or floor[item.change.key[0]] >= v or (version is not None and version > v):
                self.stats.stale += 1
                skip.add(id(item))
            elif version == v:
                equal.append(item)
        if equal:
            sources = self._call("reading the documents a replay would re-index", lambda: self._client.mget(
                docs=[{"_index": i.change.key[0], "_id": i.change.key[1]} for i in equal],
                filter_path=["docs._id", "docs._source"]))["docs"]
            for item, doc in zip(equal, sources, strict=True):
                if doc.get("_source") == json.loads(item.lines.split(b"\n", 1)[1]):
                    self.stats.unchanged += 1
                    skip.add(id(item))
        return [i for i in items if id(i) not in skip] if skip else items

    def truncate(self, marks: Mapping[str, int]) -> dict[str, int]:
        """``truncate: apply``, per index: a TRUNCATE of its source table at a version. The index's
        TRUNCATE mark is raised to it first (so the window's older changes, and any replayed later,
        are skipped: :meth:`_drop_held`), then each document older than it is deleted with
        that version (``external_gte`` of version - 1: Elasticsearch refuses the delete of a newer
        document, written by a later window a replay runs after, with a 409). Elasticsearch's
        delete-by-query cannot compare external versions; this scan does, and is idempotent, so a
        retry after a kill runs it again. Run on the driver before any write of the window. Returns
        the documents deleted per index."""
        deleted: dict[str, int] = {}
        for index, version in sorted(marks.items()):
            mark = {"_index": TOMBSTONES, "_id": tombstone_id(index, TRUNCATE_ID), "version": version,
                    "version_type": "external_gte"}
            body = (json.dumps({"index": mark}) + "\n" + json.dumps({"index": index, "truncate": True}) + "\n").encode()
            response = self._call(f"raising the TRUNCATE mark of {index!r}",
                                  lambda body=body: self._client.bulk(operations=body, refresh=True))
            outcome = next(iter(response["items"][0].values()))
            if outcome.get("status", 500) >= 300 and outcome.get("status") != 409:  # 409: a newer mark is there
                raise SinkUnavailable(f"sink {self.name!r}: Elasticsearch at {self.url} refused the TRUNCATE mark "
                                      f"of index {index!r}: {outcome.get('error')}")
            deleted[index] = self._delete_older(index, version)
        return deleted

    def _delete_older(self, index: str, version: int) -> int:
        """Delete the documents of ``index`` older than ``version``, page by page (a point in time)."""
        if not self._call(f"looking for index {index!r}", lambda: self._client.indices.exists(index=index)):
            return 0
        # a point in time sees what is refreshed: the documents written within the refresh interval
        # (1 s by default, or the index's refresh_interval) would survive the truncate without this
        self._call(f"refreshing {index!r}", lambda: self._client.indices.refresh(index=index))
        pit = self._call(f"opening a point in time of {index!r}", lambda: self._client.open_point_in_time(
            index=index, keep_alive="2m"))["id"]
        deleted, after = 0, None
        try:
            while True:
                page = self._call(f"scanning {index!r} for the TRUNCATE", lambda pit=pit, after=after: self._client.search(
                    pit={"id": pit, "keep_alive": "2m"}, size=SCAN_PAGE, source=False, sort=[{"_shard_doc": "asc"}],
                    search_after=after, track_total_hits=False))
                hits = page["hits"]["hits"]
                if not hits:
                    return deleted
                pit, after = page.get("pit_id", pit), hits[-1]["sort"]
                body = b"".join(json.dumps({"delete": {"_index": index, "_id": h["_id"], "version": max(version - 1, 0),
                                                       "version_type": "external_gte"}}).encode() + b"\n"
                                for h in hits)
                response = self._call(f"deleting documents of {index!r} older than the TRUNCATE",
                                      lambda body=body: self._client.bulk(operations=body))
                for result in response["items"]:
                    status = next(iter(result.values())).get("status", 500)
                    if status < 300:
                        deleted += 1
                    elif status not in (404, 409):  # 409: newer than the truncate, kept; 404: gone already
                        raise SinkUnavailable(f"sink {self.name!r}: Elasticsearch at {self.url} refused a delete of "
                                              f"the TRUNCATE of {index!r}: {next(iter(result.values())).get('error')}")
        finally:
            try:  # a failure here must not hide the one that ended the scan; the point in time expires anyway
                self._client.close_point_in_time(id=pit)
            except Exception as exc:  # noqa: BLE001
                log.warning("sink %r: closing the point in time of %r failed: %s", self.name, index, exc)

    def evolve_mappings(self, policy: str, decisions: Mapping[str, str] | None = None,
                        pipeline: str = "PIPELINE") -> list[dict[str, Any]]:
        """The indices that exist get the fields of this window's record schemas they lack
        (``put_mapping``), as the pipeline's ``schema_changes`` says (connectors/mysql/evolution.py):
        a new field is an ``add``; a field whose type differs is a ``retype``, which Elasticsearch
        cannot do to an existing field, so every policy but ignore stops the window, naming it. Run
        once per window on the driver, before any write; returns the changes for the stats."""
        from connectors.mysql import evolution  # noqa: PLC0415 - the policies are the same as for MySQL tables

        recorded: list[dict[str, Any]] = []
        for index, mapping in sorted(self._mappings.items()):
            if not self._call(f"looking for index {index!r}", lambda index=index: self._client.indices.exists(
                    index=index)):
                continue
            got = self._call(f"reading the mapping of {index!r}", lambda index=index: self._client.indices.get_mapping(
                index=index))
            have = next(iter(dict(got).values()), {}).get("mappings", {}).get("properties", {})
            found = []
            for field, prop in mapping.get("properties", {}).items():
                old = have.get(field)
                if old is None:
                    put = f"PUT {index}/_mapping {json.dumps({'properties': {field: prop}})}"
                    found.append(evolution.SchemaChange(index, field, "add", None, prop.get("type", "object"), put,
                                                        "index"))
                elif old.get("type", "object") != prop.get("type", "object"):
                    found.append(evolution.SchemaChange(index, field, "retype", old.get("type", "object"),
                                                        prop.get("type", "object"), None, "index"))
            apply, ignored = evolution.decide(found, policy, decisions, pipeline)
            adds = {c.column: mapping["properties"][c.column] for c in apply if c.kind == "add"}
            if adds:
                self._call(f"adding fields to the mapping of {index!r}",
                           lambda index=index, adds=adds: self._client.indices.put_mapping(index=index, properties=adds))
            recorded += [{**c.as_dict(), "applied": True} for c in apply]
            recorded += [{**c.as_dict(), "applied": False} for c in ignored]
        return recorded

    def _ensure_index(self, index: str, mappings: dict[str, Any] | None, settings: dict[str, Any] | None) -> None:
        if index in self._known_indices:
            return
        from elasticsearch import BadRequestError  # noqa: PLC0415

        def create() -> None:
            if self._client.indices.exists(index=index):
                return
            try:
                self._client.indices.create(index=index, mappings=mappings, settings=settings)
            except BadRequestError as exc:
                if exc.error != "resource_already_exists_exception":
                    raise ConfigError(f"sink {self.name!r}: cannot create index {index!r}: {exc.error}: "
                                      f"{exc.info.get('error', {}).get('reason') if isinstance(exc.info, dict) else exc}") from exc

        self._call(f"creating index {index!r}", create)
        self._known_indices.add(index)

    def _call(self, doing: str, fn: Any) -> Any:
        """Run a request, retrying transport errors, 429 and 5xx with exponential backoff."""
        from elasticsearch import ApiError, TransportError  # noqa: PLC0415

        attempt = 0
        while True:
            try:
                return fn()
            except TransportError as exc:  # connection refused, timeout: ambiguous, never data errors
                error: Exception = exc
            except ApiError as exc:
                if exc.meta.status not in RETRY_STATUS and exc.meta.status < 500:
                    raise SinkUnavailable(f"sink {self.name!r}: Elasticsearch at {self.url} refused {doing}: "
                                          f"{exc.meta.status} {exc.error}") from exc
                error = exc
            attempt += 1
            if attempt > self.cfg.max_retries:
                raise SinkUnavailable(f"sink {self.name!r}: Elasticsearch at {self.url} failed while {doing} "
                                      f"after {self.cfg.max_retries} retries: {error.__class__.__name__}: {error}")
            time.sleep(self.cfg.retry_backoff * 2 ** (attempt - 1))
