"""Lag: samples of every partition's log end (the monitor's, without a window) and the Burrow-style
evaluation of them (cdcflow/lag.py), for the page, the REST API, the metrics and ``cdcflow lag``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cdcflow.control.base import ControlBase
from cdcflow.control.pipelines import store_for, valid
from cdcflow.window import clients


class Monitoring(ControlBase):
    """Lag samples and their evaluation."""

    def sample(self, name: str) -> dict[tuple[str, int], tuple[int | None, int]]:
        """Read every partition's log end from the broker now (no window) and record it with the
        stored offset: the monitor's sample."""
        from connectors.kafka.reader import discover  # noqa: PLC0415

        cfg = valid(name)
        store = store_for(cfg)
        stored = store.offsets.load(cfg.name)
        rows = {(s.topic, s.partition): (stored.get((s.topic, s.partition)), s.end)
                for s in discover(clients.consumer_conf(cfg), clients.source_topics(cfg), timeout=10)}
        store.lag.record(cfg.name, "sample", rows)
        return rows

    def lag(self, name: str, refresh: bool | None = None, now: datetime | None = None) -> Any:
        """Burrow-style evaluation (cdcflow.lag). ``refresh``: sample the broker first; None = only
        when the newest sample is older than monitor.sample_interval."""
        from cdcflow import lag as lagmod  # noqa: PLC0415

        cfg = valid(name)
        store = store_for(cfg)
        now = now or datetime.now(UTC).replace(tzinfo=None)
        entries = store.lag.entries(cfg.name, per_partition=max(50, 2 * cfg.monitor.window))
        newest = max((e.at for rows in entries.values() for e in rows if e.source in ("sample", "plan")),
                     default=None)
        if refresh or (refresh is None and (newest is None
                                            or (now - newest).total_seconds() > cfg.monitor.sample_interval)):
            self.sample(cfg.name)
            entries = store.lag.entries(cfg.name, per_partition=max(50, 2 * cfg.monitor.window))
        partitions = sorted(set(entries) | set(store.offsets.load(cfg.name)))
        replays = frozenset(store.ledger.run_ids(cfg.name, origin="params"))
        return lagmod.from_entries(cfg.name, cfg.group_id, entries, partitions, replays, now,
                                   cfg.monitor.window, cfg.monitor.stop_after)

    def lag_history(self, name: str, per_partition: int = 50) -> dict[tuple[str, int], list[Any]]:
        """The stored lag entries of each partition, oldest first (``StateStore.lag_entries``): the
        page's lag chart. Reads only; :meth:`lag` samples the broker when its samples are stale."""
        cfg = valid(name)
        return dict(store_for(cfg).lag.entries(cfg.name, per_partition=per_partition))

