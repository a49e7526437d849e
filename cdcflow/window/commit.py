"""Commit: the stored offsets moved (compare-and-set) only after every sink succeeded, mirrored to
the pipeline's consumer group for lag tools; then, now and then, retention.
"""

from __future__ import annotations

import logging
from typing import Any

from cdcflow.config import PipelineConfig
from cdcflow.state import StateStore
from cdcflow.window.clients import Clients
from connectors import faults

log = logging.getLogger("cdcflow.runner")


RETENTION_EVERY = 600.0  # retention runs after a commit at most every 10 minutes per pipeline


def commit(cfg: PipelineConfig, run_id: str, store: StateStore | None = None,
           clients: Clients | None = None) -> dict[str, Any]:
    clients = clients or Clients(cfg)
    store = store or clients.store()
    result = store.offsets.commit(cfg.name, run_id)
    for tp, reason in result.left.items():
        log.warning("%s[%s]: %s", tp[0], tp[1], reason)
    faults.checkpoint("after_commit")
    if result.advanced:
        from connectors.kafka.groups import mirror_offsets  # noqa: PLC0415

        mirror_offsets({**clients.kafka, "group.id": cfg.group_id}, result.advanced)
    log.info("committed %s", {f"{t}[{p}]": o for (t, p), o in result.advanced.items()})
    pruned = apply_retention(cfg, store, clients) if store.chores.due(cfg.name, "retention", RETENTION_EVERY) else {}
    return {"advanced": {f"{t}:{p}": o for (t, p), o in result.advanced.items()},
            "left": {f"{t}:{p}": r for (t, p), r in result.left.items()}, "pruned": pruned}


def asset_events(cfg: PipelineConfig, run_id: str, store: StateStore | None = None) -> list[Any]:
    """The asset events of a committed window: one per sink target it changed (cdcflow/assets.py)."""
    from cdcflow.assets import window_events  # noqa: PLC0415

    window = (store or Clients(cfg).store()).ledger.get_window(cfg.name, run_id)
    return window_events(cfg, window) if window is not None and window.status == "committed" else []


def apply_retention(cfg: PipelineConfig, store: StateStore, clients: Clients | None = None) -> dict[str, Any]:
    """Forget what retention allows (after a commit): old ledger windows and lag samples, old sink
    tombstones. A failure here is logged, never a failed window: nothing of the window depends on it."""
    clients = clients or Clients(cfg)
    out: dict[str, Any] = {}
    try:
        out["ledger"] = store.chores.prune(cfg.name, cfg.retention.ledger)
    except Exception as exc:  # noqa: BLE001
        log.warning("retention: pruning the ledger of %s failed: %s", cfg.name, exc)
    with clients.held_offsets() as held:
        try:
            if held is not None:
                out["sink_commits"] = held.prune(cfg.name, cfg.retention.ledger)
        except Exception as exc:  # noqa: BLE001
            log.warning("retention: pruning the run records in the MySQL sink of %s failed: %s", cfg.name, exc)
    if cfg.retention.tombstones is not None:
        from connectors.base import PrunableSink  # noqa: PLC0415
        from spark_jobs.write.sinks import SINK_TYPES  # noqa: PLC0415

        for sink, resolved in zip(cfg.sinks, clients.targets, strict=True):
            target = SINK_TYPES[sink.type].open(resolved)
            if not isinstance(target, PrunableSink):
                continue
            try:
                out[f"tombstones:{sink.name}"] = target.prune_tombstones(cfg.retention.tombstones)
            except Exception as exc:  # noqa: BLE001
                log.warning("retention: pruning the tombstones of sink %s failed: %s", sink.name, exc)
    return out
