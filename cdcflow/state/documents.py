"""A composed index's state (cdcflow/window/compose.py): its document versions and its backlog.

* **Versions**: each rebuild takes the next version of its index *before* it reads the tables, and
  writes its documents with it as their external version. A rebuild that read later holds a newer
  version, so an older read never replaces a newer document, whichever finishes first: a replay, a
  retry, the whole-index rebuild beside the windows (docs/composed-documents.md).
* **Backlog**: the root keys found affected past ``max_documents``, carried over to the next windows,
  oldest first. A key leaves it only after its document was rebuilt; a window that dies between the
  two rebuilds it again, which changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from cdcflow.state.tables import document_backlog_table, document_versions_table, now

BATCH = 500

Key = tuple[str, ...]


def _hash(key: Sequence[str]) -> str:
    return hashlib.sha1(json.dumps(list(key)).encode()).hexdigest()


class Documents:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def next_version(self, pipeline: str, sink: str) -> int:
        """A version newer than every one handed out before for this index."""
        t = document_versions_table
        where = (t.c.pipeline == pipeline) & (t.c.sink == sink)
        for _ in range(3):
            with self.engine.begin() as conn:
                if conn.execute(sa.update(t).where(where).values(version=t.c.version + 1)).rowcount:
                    return int(conn.execute(sa.select(t.c.version).where(where)).scalar_one())
            try:
                with self.engine.begin() as conn:
                    conn.execute(sa.insert(t).values(pipeline=pipeline, sink=sink, version=1))
                return 1
            except IntegrityError:  # another process made the row just now: take the next one
                continue
        raise RuntimeError(f"could not take a document version for {pipeline}/{sink}")

    def version(self, pipeline: str, sink: str) -> int:
        t = document_versions_table
        with self.engine.connect() as conn:
            got = conn.execute(sa.select(t.c.version).where((t.c.pipeline == pipeline) & (t.c.sink == sink))).scalar()
        return int(got or 0)

    def backlog(self, pipeline: str, sink: str, limit: int | None = None) -> list[Key]:
        """The carried-over root keys, oldest first (at most ``limit``)."""
        t = document_backlog_table
        q = sa.select(t.c.root_key).where((t.c.pipeline == pipeline) & (t.c.sink == sink)).order_by(
            t.c.added_at, t.c.key_hash)
        if limit is not None:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            return [tuple(json.loads(k)) for k in conn.execute(q).scalars()]

    def backlog_size(self, pipeline: str, sink: str) -> int:
        t = document_backlog_table
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(t).where(
                (t.c.pipeline == pipeline) & (t.c.sink == sink))).scalar_one())

    def carry(self, pipeline: str, sink: str, run_id: str, add: Iterable[Key], done: Iterable[Key]) -> None:
        """In one transaction: ``add`` joins the backlog (a key there already keeps its place) and
        ``done`` (rebuilt) leaves it."""
        t = document_backlog_table
        at = now()
        new = {_hash(k): k for k in add}
        gone = [_hash(k) for k in done]
        mine = (t.c.pipeline == pipeline) & (t.c.sink == sink)
        with self.engine.begin() as conn:
            for i in range(0, len(gone), BATCH):
                conn.execute(sa.delete(t).where(mine & t.c.key_hash.in_(gone[i:i + BATCH])))
            hashes = list(new)
            held: set[str] = set()
            for i in range(0, len(hashes), BATCH):
                held.update(conn.execute(sa.select(t.c.key_hash).where(
                    mine & t.c.key_hash.in_(hashes[i:i + BATCH]))).scalars())
            rows = [{"pipeline": pipeline, "sink": sink, "key_hash": h, "root_key": json.dumps(list(k)),
                     "run_id": run_id, "added_at": at} for h, k in new.items() if h not in held]
            for i in range(0, len(rows), BATCH * 10):
                conn.execute(sa.insert(t), rows[i:i + BATCH * 10])
