"""cdcflow's own endpoints beside Connect's: a pipeline's partitions and windows, a run now, a replay
(from offsets or of a time range), offset resets, and its dead letters (read and redrive).

The run parameters a run's ``conf`` and a replay's body take are those declared in
cdcflow/run_params.py; their OpenAPI schema is derived from the declaration, and the control service
checks them with :meth:`cdcflow.run_params.RunParams.parse`, as the DAG's tasks do.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body

from cdcflow import control as ctl
from cdcflow.errors import BadRequest
from cdcflow.run_params import REPLAY_PARAMS, RUN_PARAMS, body_schema
from cdcflow.web import connect
from cdcflow.web.deps import SERVICE, USER, authorize
from cdcflow.web.shapes import dead_letter_json, encode_before, parse_before, window_json

router = APIRouter()
REPLAY_EXPECTED = ('expected {"start_offsets": {"topic": {"partition": offset}}} or '
                   '{"start_time": "2026-11-22T10:00:00Z", "end_time": "2026-11-22T14:00:00Z"}')
REDRIVE_FIELDS = ("partition", "start", "end", "stage", "error_class", "target_topic")


def _documented(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI's request body of a route that reads its body itself (for Connect-style error answers)."""
    return {"requestBody": {"content": {"application/json": {"schema": schema}}}}


@router.get("/connectors/{name}/partitions")
def partitions(name: str, user: Any = USER, svc: ctl.Control = SERVICE) -> Any:
    authorize(user, name, "GET")
    return [{"topic": p.topic, "partition": p.partition, "committed": p.committed, "log_start": p.log_start,
             "log_end": p.log_end, "lag": p.lag} for p in svc.offsets(name)]


@router.get("/connectors/{name}/windows")
def windows(name: str, user: Any = USER, svc: ctl.Control = SERVICE, limit: int = 20) -> Any:
    authorize(user, name, "GET")
    return [window_json(*w) for w in svc.windows(name, limit)]


@router.post("/connectors/{name}/run", status_code=202, openapi_extra=_documented(
    {"type": "object", "properties": {"conf": body_schema(RUN_PARAMS, closed=True)}}))
def run(name: str, user: Any = USER, svc: ctl.Control = SERVICE, body: Any = Body(default=None)) -> Any:  # noqa: B008
    """A window now; ``conf`` holds run parameters (cdcflow/run_params.py)."""
    authorize(user, name, "POST", runs=True)
    conf = (body or {}).get("conf") if isinstance(body, dict) else None
    return {"run_id": svc.run_now(name, user.get_name(), conf)}


@router.post("/connectors/{name}/replay", status_code=202, openapi_extra=_documented(body_schema(REPLAY_PARAMS)))
def replay(name: str, user: Any = USER, svc: ctl.Control = SERVICE, body: Any = Body(default=None)) -> Any:  # noqa: B008
    """A time range (start_time, end_time) re-applied, or a window from start_offsets; the fields are
    the run parameters declared ``replay`` (cdcflow/run_params.py), others are ignored."""
    authorize(user, name, "POST", runs=True)
    body = body if isinstance(body, dict) else {}
    given = {p.name: body.get(p.name) for p in REPLAY_PARAMS}
    if given["start_time"] is not None or given["end_time"] is not None:
        times = {k: given[k] for k in ("start_time", "end_time")}
        return {"run_id": svc.run_now(name, user.get_name(), times,
                                      note=f"time-range replay requested by {user.get_name()}")}
    starts = given["start_offsets"]
    if not isinstance(starts, dict):
        raise BadRequest(REPLAY_EXPECTED)
    return {"run_id": svc.replay(name, starts, user.get_name())}


@router.post("/connectors/{name}/offsets/reset")
def reset(name: str, user: Any = USER, svc: ctl.Control = SERVICE, body: Any = Body(default=None)) -> Any:  # noqa: B008
    authorize(user, name, "PUT")
    if not isinstance(body, dict) or "to" not in body:
        raise BadRequest('expected {"to": "earliest" | "latest" | "timestamp" | "forget", "timestamp": ...}')
    ts = ctl.parse_time(body["timestamp"]) if body.get("timestamp") not in (None, "") else None
    return svc.reset_offsets(name, str(body["to"]), user.get_name(), ts)


@router.get("/connectors/{name}/dlq")
def dlq(name: str, user: Any = USER, svc: ctl.Control = SERVICE, limit: int = 20, before: str | None = None) -> Any:
    authorize(user, name, "GET")
    page = svc.dlq(name, limit, parse_before(before))
    return {"topic": page.topic, "total": page.total, "next_before": encode_before(page.next_before),
            "records": [dead_letter_json(d, page.redriven.get((d.partition, d.offset)), trace=False)
                        for d in page.records]}


@router.get("/connectors/{name}/dlq/{partition}/{offset}")
def dlq_record(name: str, partition: int, offset: int, user: Any = USER, svc: ctl.Control = SERVICE) -> Any:
    authorize(user, name, "GET")
    return dead_letter_json(svc.dlq_record(name, partition, offset))


@router.post("/connectors/{name}/dlq/redrive")
def redrive(name: str, user: Any = USER, svc: ctl.Control = SERVICE, body: Any = Body(default=None)) -> Any:  # noqa: B008
    authorize(user, name, "PUT")
    body = body if isinstance(body, dict) else {}
    unknown = set(body) - set(REDRIVE_FIELDS)
    if unknown:
        raise BadRequest(f"unknown fields {sorted(unknown)}: expected {', '.join(REDRIVE_FIELDS)}")
    ints = {k: connect._int(body[k], k) for k in ("partition", "start", "end") if body.get(k) not in (None, "")}
    strs = {k: str(body[k]) for k in ("stage", "error_class", "target_topic") if body.get(k) not in (None, "")}
    result = svc.redrive(name, user.get_name(), **ints, **strs)
    return {"request_id": result.request_id, "matched": result.matched, "redriven": result.redriven,
            "already_redriven": result.already}
