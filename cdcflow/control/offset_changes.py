"""Changing a pipeline's stored offsets, as Connect allows it: only while the pipeline is STOPPED and no
run is queued or running. Set (or forget) some partitions, or reset every one to the log's start, its
end, a time, or nothing (the next window starts from initial_offsets)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from cdcflow.control.pipelines import store_for, valid
from cdcflow.control.status import Reading
from cdcflow.errors import BadRequest
from cdcflow.window import clients


class OffsetChanges(Reading):
    """Alter and reset the stored offsets (only while STOPPED)."""

    def alter_offsets(self, name: str, offsets: Mapping[tuple[str, int], int | None], user: str) -> dict[str, Any]:
        """Set (or, with None, forget) the stored offset of the given partitions."""
        cfg = valid(name)
        store = self._require_stopped(cfg)
        if not offsets:
            raise BadRequest("no offsets given")
        parts = {(o.topic, o.partition): o for o in self.offsets(cfg.name)}
        problems = []
        for (topic, partition), off in offsets.items():
            state = parts.get((topic, partition))
            if state is None:
                problems.append(f"{topic}[{partition}] is not a partition of this pipeline's topics "
                                f"({cfg.source.described})")
            elif off is not None and not state.log_start <= off <= state.log_end:
                problems.append(f"{topic}[{partition}]: offset {off} is outside the log "
                                f"[{state.log_start}, {state.log_end}]")
        if problems:
            raise BadRequest("; ".join(problems))
        by = f"offsets-altered-by:{user}@{datetime.now(UTC):%Y-%m-%dT%H:%M:%S}"

        clients.set_offsets(cfg, store, offsets, by)
        return {"message": "The offsets for this connector have been altered successfully"}

    def reset_offsets(self, name: str, to: str, user: str, timestamp_ms: int | None = None) -> dict[str, Any]:
        """Reset every partition to ``earliest``, ``latest`` or the first offset at/after ``timestamp``;
        ``forget`` removes the stored offsets (the next window starts from initial_offsets)."""
        cfg = valid(name)
        if to not in ("earliest", "latest", "timestamp", "forget"):
            raise BadRequest(f"reset to {to!r}: expected earliest, latest, timestamp or forget")
        if to == "timestamp" and timestamp_ms is None:
            raise BadRequest("reset to a timestamp needs the timestamp (ISO 8601 or epoch ms)")
        self._require_stopped(cfg)

        if to == "forget":
            clients.clear_offsets(cfg, store_for(cfg))
            return {"message": "The offsets for this connector have been reset successfully"}
        parts = self.offsets(cfg.name)
        if to == "earliest":
            target = {(p.topic, p.partition): p.log_start for p in parts}
        elif to == "latest":
            target = {(p.topic, p.partition): p.log_end for p in parts}
        else:
            assert timestamp_ms is not None
            from connectors.kafka.time_search import offsets_for_time  # noqa: PLC0415

            target = offsets_for_time(clients.consumer_conf(cfg), [(p.topic, p.partition, p.log_start, p.log_end)
                                                                  for p in parts], timestamp_ms,
                                      source=cfg.source.timestamp)
        self.alter_offsets(cfg.name, dict(target), user)
        return {"message": "The offsets for this connector have been altered successfully",
                "offsets": {f"{t}:{p}": o for (t, p), o in sorted(target.items())}}

