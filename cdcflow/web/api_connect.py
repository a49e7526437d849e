"""Kafka Connect's REST API over cdcflow's pipelines (``/connectors``, ``/connector-plugins``): the
routes; the shapes of their answers and the parsing of their bodies are connect.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Body, Query
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response

from cdcflow import control as ctl
from cdcflow.errors import BadRequest
from cdcflow.web import connect
from cdcflow.web.deps import PREFIX, SERVICE, USER, authorize, may

router = APIRouter()


@router.get("/connectors")
def list_connectors(user: Any = USER, svc: ctl.Control = SERVICE, expand: list[str] = Query(default=[])) -> Any:  # noqa: B008 - FastAPI's way
    names = [p.name for p in ctl.pipelines() if may(user, p.name, "GET")]
    if not expand:
        return names
    out: dict[str, Any] = {}
    for p in ctl.pipelines():
        if p.name not in names:
            continue
        entry: dict[str, Any] = {}
        if "status" in expand:
            entry["status"] = connect.status(svc.status(p.name))
        if "info" in expand:
            entry["info"] = connect.info(p)
        out[p.name] = entry
    return out


@router.get("/connectors/{name}")
def get_connector(name: str, user: Any = USER) -> Any:
    authorize(user, name, "GET")
    return connect.info(ctl.get(name))


@router.get("/connectors/{name}/config")
def get_config(name: str, user: Any = USER) -> Any:
    authorize(user, name, "GET")
    return connect.info(ctl.get(name))["config"]


@router.put("/connectors/{name}/config")
def put_config(name: str, user: Any = USER, svc: ctl.Control = SERVICE, body: Any = Body(default=None)) -> Any:  # noqa: B008
    """Connect's create-or-update: 201 for a new pipeline, 200 for a change. Creating needs what
    changing needs (PUT on the DAG of that name). A new pipeline's DAG appears when Airflow's
    dag-processor re-parses (ctl.DAG_APPEARS); until then its status is UNASSIGNED."""
    ctl.check_name(name)
    authorize(user, name, "PUT")
    cfg, created = svc.put_config(name, connect.connector_config(name, body), user.get_name())
    return JSONResponse(connect.info(ctl.Pipeline(cfg.name, Path(), cfg)), status_code=201 if created else 200,
                        headers={"Location": f"{PREFIX}/connectors/{name}"} if created else None)


@router.delete("/connectors/{name}", status_code=204)
def delete_connector(name: str, user: Any = USER, svc: ctl.Control = SERVICE) -> Response:
    """Only while STOPPED (409 otherwise); the offsets and ledger are kept (ctl.KEPT_ON_DELETE)."""
    ctl.check_name(name)
    authorize(user, name, "DELETE")
    svc.delete(name, user.get_name())
    return Response(status_code=204)


@router.get("/connectors/{name}/status")
def get_status(name: str, user: Any = USER, svc: ctl.Control = SERVICE) -> Any:
    authorize(user, name, "GET")
    return connect.status(svc.status(name))


@router.get("/connectors/{name}/topics")
def get_topics(name: str, user: Any = USER, svc: ctl.Control = SERVICE) -> Any:
    authorize(user, name, "GET")
    source = ctl.valid(name).source
    return {name: {"topics": list(source.topics) if source.topics else
                   [s.topic for s in svc.offsets(name) if s.partition == 0]}}


@router.put("/connectors/{name}/pause", status_code=202)
def pause(name: str, user: Any = USER, svc: ctl.Control = SERVICE) -> Response:
    authorize(user, name, "PUT")
    svc.pause(name, user.get_name())
    return Response(status_code=202)


@router.put("/connectors/{name}/resume", status_code=202)
def resume(name: str, user: Any = USER, svc: ctl.Control = SERVICE) -> Response:
    authorize(user, name, "PUT")
    svc.resume(name, user.get_name())
    return Response(status_code=202)


@router.put("/connectors/{name}/stop", status_code=204)
def stop(name: str, user: Any = USER, svc: ctl.Control = SERVICE) -> Response:
    authorize(user, name, "PUT")
    svc.stop(name, user.get_name())
    return Response(status_code=204)


@router.get("/connectors/{name}/schema")
def schema_changes(name: str, user: Any = USER, svc: ctl.Control = SERVICE) -> Any:
    authorize(user, name, "GET")
    return JSONResponse(jsonable_encoder(svc.schema_changes(name)))


@router.post("/connectors/{name}/schema/{verb}")
def decide_schema(name: str, verb: str, user: Any = USER, svc: ctl.Control = SERVICE) -> Any:
    """schema_changes pause: approve or reject the pending changes (cdcflow schema apply|reject)."""
    authorize(user, name, "PUT")
    decision = {"approve": "approved", "apply": "approved", "reject": "rejected"}.get(verb)
    if decision is None:
        raise BadRequest(f"expected /schema/approve or /schema/reject, got /schema/{verb}")
    decided = svc.decide_schema(name, decision, user.get_name())
    return JSONResponse({"decision": decision, "changes": decided})


@router.post("/connectors/{name}/restart", status_code=202)
def restart(name: str, user: Any = USER, svc: ctl.Control = SERVICE) -> Any:
    authorize(user, name, "POST", runs=True)
    run_id = svc.run_now(name, user.get_name(), note=f"restart requested by {user.get_name()}")
    return JSONResponse({**connect.status(svc.status(name)), "run_id": run_id}, status_code=202)


@router.get("/connectors/{name}/offsets")
def get_offsets(name: str, user: Any = USER, svc: ctl.Control = SERVICE) -> Any:
    authorize(user, name, "GET")
    return connect.offsets(svc.stored_offsets(name))


@router.patch("/connectors/{name}/offsets")
def patch_offsets(name: str, user: Any = USER, svc: ctl.Control = SERVICE, body: Any = Body(default=None)) -> Any:  # noqa: B008
    authorize(user, name, "PUT")
    return svc.alter_offsets(name, connect.parse_offsets(body), user.get_name())


@router.delete("/connectors/{name}/offsets")
def delete_offsets(name: str, user: Any = USER, svc: ctl.Control = SERVICE) -> Any:
    authorize(user, name, "PUT")
    return svc.reset_offsets(name, "forget", user.get_name())


@router.get("/connector-plugins")
def list_plugins(user: Any = USER, connectorsOnly: bool = True) -> Any:  # noqa: N803 - Connect's name
    return connect.plugins(connectorsOnly)


@router.put("/connector-plugins/{plugin}/config/validate")
def validate(plugin: str, user: Any = USER, body: Any = Body(default=None)) -> Any:  # noqa: B008
    return connect.validate(plugin, body)
