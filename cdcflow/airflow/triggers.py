"""``schedule: on_data``: a trigger in Airflow's triggerer that starts a window when records arrive.

The pipeline's DAG is scheduled on an Asset watched by :class:`NewRecordsTrigger` (Airflow's
``AssetWatcher``). The trigger polls the topics' true ends (read to EOF, as the planner does) and
the pipeline's stored offsets, and fires when ``on_data.min_records`` records wait, or when fewer
have waited ``on_data.max_wait``. Each event becomes one DAG run.

It never commits an offset and never joins or moves a consumer group: it only reads ends, and the
stored offsets stay the authority (the apache-kafka provider's ``AwaitMessageTrigger`` consumes
and commits before it yields; this one does not). It does not fire while a window of the pipeline
is in flight, nor again until the window it started has ended, so a burst queues one run, not one
per poll; nor while the pipeline is STOPPED.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from cdcflow.window import clients

IN_FLIGHT = ("planned", "read", "applied")
REARM_AFTER = 600.0  # seconds: a fired run that never started (a paused DAG) does not block the trigger longer


def watched_asset_uri(pipeline: str) -> str:
    return f"cdcflow://{pipeline}/new-records"


class NewRecordsTrigger(BaseEventTrigger):
    def __init__(self, pipeline: str, min_records: int = 1, max_wait: float = 30.0, poll_interval: float = 5.0,
                 rearm_after: float = REARM_AFTER) -> None:
        super().__init__()
        self.pipeline, self.min_records, self.max_wait = pipeline, min_records, max_wait
        self.poll_interval, self.rearm_after = poll_interval, rearm_after

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.{type(self).__name__}",
                {"pipeline": self.pipeline, "min_records": self.min_records, "max_wait": self.max_wait,
                 "poll_interval": self.poll_interval, "rearm_after": self.rearm_after})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        waiting_since: float | None = None
        fired: tuple[float, str | None] | None = None  # when, and the newest window then
        while True:
            try:
                probe = await asyncio.to_thread(_probe, self.pipeline)
            except Exception as exc:  # noqa: BLE001 - a broker or ledger hiccup: log it, poll again
                self.log.warning("on_data %s: cannot read the topics or the ledger (%s); polling again in %ss",
                                 self.pipeline, exc, self.poll_interval)
                await asyncio.sleep(self.poll_interval)
                continue
            now = time.monotonic()
            if fired is not None and (probe.window_ended_since(fired[1]) or now - fired[0] > self.rearm_after):
                fired = None
            if probe.waiting == 0:
                waiting_since = None
            elif waiting_since is None:
                waiting_since = now
            if (fired is None and not probe.stopped and probe.newest_status not in IN_FLIGHT and probe.waiting
                    and (probe.waiting >= self.min_records or now - (waiting_since or now) >= self.max_wait)):
                waited = round(now - (waiting_since or now), 3)
                self.log.info("on_data %s: %s records wait (%.1fs): starting a window", self.pipeline,
                              probe.waiting, waited)
                fired, waiting_since = (now, probe.newest_run), None
                yield TriggerEvent({"pipeline": self.pipeline, "waiting": probe.waiting, "waited_s": waited,
                                    "at": time.time()})
            await asyncio.sleep(self.poll_interval)


class _Probe:
    def __init__(self, waiting: int, stopped: bool, newest_run: str | None, newest_status: str | None) -> None:
        self.waiting, self.stopped = waiting, stopped
        self.newest_run, self.newest_status = newest_run, newest_status

    def window_ended_since(self, run_before: str | None) -> bool:
        """A window newer than ``run_before`` has ended (committed or failed)."""
        return self.newest_run != run_before and self.newest_status not in IN_FLIGHT


def _probe(pipeline: str) -> _Probe:
    """Records waiting (true end − stored offset, per partition), the pipeline's state and its newest
    window; blocking (the trigger runs it in a thread)."""
    from cdcflow.config import find_pipeline  # noqa: PLC0415
    from cdcflow.control import store_for  # noqa: PLC0415 - one store per URL, not one (and a schema check) per poll

    cfg = find_pipeline(pipeline)
    store = store_for(cfg)
    # the newest window first, then the backlog: a window seen ended has its offsets stored already
    # (read the other way round, a commit in between showed the burst it had just applied as waiting,
    # and the trigger started a second run for it)
    newest = store.ledger.last_window(cfg.name)
    waiting = sum(clients.backlog(cfg, store).values())
    return _Probe(waiting, store.operator.get_state(cfg.name) == "stopped",
                  newest[0].run_id if newest else None, newest[0].status if newest else None)
