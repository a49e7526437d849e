"""A pipeline's state, in one SQLAlchemy database (SQLite by default): stored offsets, the window
ledger, writer leases, operator state and lag history. Each has its own small class, named for its
job; :class:`StateStore` opens the one engine they share:

* ``offsets`` (state/offsets.py): the next offset of each partition and a window's plan, read and
  compare-and-set commit; the :class:`OffsetStore` protocol, with an in-memory twin (state/memory.py);
* ``ledger`` (state/ledger.py): windows by run id, their attempts, status and history;
* ``leases`` (state/leases.py): one writer per pipeline;
* ``operator`` (state/operator.py): STOPPED or running, schema-change decisions, redrives;
* ``lag`` (state/lag_history.py): lag over time per partition;
* ``chores`` (state/chores.py): periodic chores and retention;
* ``documents`` (state/documents.py): a composed index's document versions and backlog;
* ``totals`` (state/totals.py): cumulative totals of the metrics, added to when a window commits and
  never pruned.

The tables themselves are in state/tables.py.
"""

from __future__ import annotations

from cdcflow.state.chores import Chores
from cdcflow.state.documents import Documents
from cdcflow.state.lag_history import LagEntry, LagHistory
from cdcflow.state.leases import Leases
from cdcflow.state.ledger import Ledger
from cdcflow.state.memory import MemoryOffsetStore
from cdcflow.state.offsets import SqlOffsetStore
from cdcflow.state.operator import OperatorState, PipelineState, Redrive
from cdcflow.state.protocol import OffsetStore
from cdcflow.state.tables import LagSource, default_store_url, open_engine
from cdcflow.state.totals import Totals
from cdcflow.state.windows import CommitResult, Origin, PartitionWindow, TopicPartition, WindowPlan, WindowStatus

__all__ = [
    "Chores", "CommitResult", "Documents", "LagEntry", "LagHistory", "LagSource", "Leases", "Ledger", "MemoryOffsetStore",
    "OffsetStore", "OperatorState", "Origin", "PartitionWindow", "PipelineState", "Redrive", "SqlOffsetStore",
    "StateStore", "TopicPartition", "Totals", "WindowPlan", "WindowStatus", "default_store_url",
]


class StateStore:
    """The state of the pipelines at one URL, through one engine (one connection pool)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_store_url()
        self.engine = open_engine(self.url)
        self.offsets = SqlOffsetStore(self.engine)
        self.ledger = Ledger(self.engine)
        self.leases = Leases(self.engine)
        self.operator = OperatorState(self.engine)
        self.lag = LagHistory(self.engine)
        self.chores = Chores(self.engine)
        self.documents = Documents(self.engine)
        self.totals = Totals(self.engine)
        self.totals.seed_from_ledger()  # once per database: a ledger older than the totals

    def close(self) -> None:
        self.engine.dispose()
