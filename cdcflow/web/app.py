"""The cdcflow plugin's FastAPI app, mounted by Airflow's api-server under ``/cdcflow``:

* a Kafka-Connect-compatible REST API (``/connectors``, ``/connector-plugins``) plus cdcflow's own
  endpoints for windows, run-now, replay, offset resets and dead letters;
* the operator's pages (``/``, ``/pipelines/{name}``), rendered on the server.

Authentication and authorisation are Airflow's: the caller is resolved by Airflow's ``get_user``
(a Bearer token, or the UI's ``_token`` cookie) and every request is checked with the auth manager's
``is_authorized_dag`` for the pipeline's DAG: GET to read, PUT to change, POST on runs to trigger.
Every action calls :class:`cdcflow.control.Control`, as the CLI does.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import yaml
from fastapi import Body, Depends, FastAPI, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from cdcflow import control as ctl
from cdcflow.errors import BadRequest, CdcflowError, ConfigError, ControlError
from cdcflow.lag import burrow_json
from cdcflow.web import charts, connect

log = logging.getLogger("cdcflow.web")
TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                        autoescape=select_autoescape(["html"]))
PREFIX = "/cdcflow"


async def current_user(request: Request) -> Any:
    """The caller, as Airflow's auth manager knows them: a Bearer token or the UI's cookie (Airflow's
    ``get_user``), or HTTP Basic, the way Kafka Connect's ``BasicAuthSecurityRestExtension`` and
    Connect's clients and tools log in: the user name and password are checked by the auth manager's
    own login (Airflow's users and roles, nothing of cdcflow's own)."""
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user  # noqa: PLC0415

    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "basic":
        return await _basic_user(credentials.strip())
    return await get_user(request, None, await bearer_scheme(request))


async def _basic_user(credentials: str) -> Any:
    import base64  # noqa: PLC0415
    import binascii  # noqa: PLC0415

    from airflow.api_fastapi.app import get_auth_manager  # noqa: PLC0415

    try:
        username, sep, password = base64.b64decode(credentials, validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        sep = ""
    if not sep:
        raise HTTPException(401, "Basic credentials must be base64 of USER:PASSWORD")
    manager = get_auth_manager()
    if type(manager).__name__ != "SimpleAuthManager":
        raise HTTPException(401, f"HTTP Basic is checked against Airflow's SimpleAuthManager; with "
                                 f"{type(manager).__name__}, send a Bearer token from POST /auth/token")
    from airflow.api_fastapi.auth.managers.simple.datamodels.login import LoginBody  # noqa: PLC0415
    from airflow.api_fastapi.auth.managers.simple.services.login import SimpleAuthManagerLogin  # noqa: PLC0415

    try:
        token = SimpleAuthManagerLogin.create_token(LoginBody(username=username, password=password), 60)
    except HTTPException as exc:
        raise HTTPException(401, f"user {username!r}: {exc.detail}") from None
    return await manager.get_user_from_token(token)


def _user_dep() -> Any:
    return Depends(current_user)


def authorize(user: Any, name: str, method: str, runs: bool = False) -> None:
    """403 unless Airflow's auth manager lets ``user`` do ``method`` on the pipeline's DAG."""
    from airflow.api_fastapi.app import get_auth_manager  # noqa: PLC0415
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails  # noqa: PLC0415

    allowed = get_auth_manager().is_authorized_dag(
        method=method, access_entity=DagAccessEntity.RUN if runs else None, details=DagDetails(id=name), user=user)
    if not allowed:
        verb = {"GET": "read", "PUT": "change", "POST": "trigger runs of", "DELETE": "delete"}.get(method, method)
        raise HTTPException(403, f"user {user.get_name()!r} may not {verb} pipeline {name!r} (Airflow DAG permissions)")


def _parse_before(before: str | None) -> dict[int, int] | None:
    if not before:
        return None
    try:
        return {int(p): int(o) for p, o in (item.split(":") for item in before.split(","))}
    except ValueError:
        raise BadRequest(f"before: expected PARTITION:OFFSET[,PARTITION:OFFSET...], got {before!r}") from None


def _encode_before(nxt: dict[int, int] | None) -> str | None:
    return ",".join(f"{p}:{o}" for p, o in sorted(nxt.items())) if nxt else None


def _text(data: bytes | None) -> str | None:
    """Bytes as text where they are UTF-8, else as hex (the original bytes stay in the DLQ)."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data[:512].hex() + ("…" if len(data) > 512 else "")


def dead_letter_json(d: Any, redrive: Any = None, trace: bool = True) -> dict[str, Any]:
    out = {"partition": d.partition, "offset": d.offset, "timestamp": d.timestamp,
           "key": _text(d.key), "value": _text(d.value),
           "original": {"topic": d.original_topic, "partition": d.original_partition, "offset": d.original_offset},
           "stage": d.stage, "error_class": d.error_class, "message": d.message,
           "headers": {k: (v.decode("utf-8", "replace") if v is not None else None) for k, v in d.original_headers()},
           "redriven": None if redrive is None else {
               "status": redrive.status, "target_topic": redrive.target_topic, "by": redrive.requested_by,
               "at": redrive.updated_at.isoformat() + "Z"}}
    if trace:
        out["stacktrace"] = d.stacktrace
    return out


def _window_json(w: Any, created: Any, updated: Any) -> dict[str, Any]:
    return {"run_id": w.run_id, "status": w.status, "origin": w.origin, "attempts": w.attempt,
            "message": w.message, "created_at": created.isoformat() + "Z", "updated_at": updated.isoformat() + "Z",
            "records": w.total_records, "stats": w.stats,
            "interval": [t.isoformat() + "Z" for t in w.interval] if w.interval else None,
            "partitions": [{"topic": p.topic, "partition": p.partition, "start": p.start, "end": p.end,
                            "records": p.records} for p in w.partitions]}


def create_app(service: ctl.Control | None = None) -> FastAPI:
    app = FastAPI(title="cdcflow", description="cdcflow's control plane: Kafka Connect's REST API for "
                  "cdcflow pipelines, their windows and dead letters", version="1")
    svc = service or ctl.Control()
    user_dep = _user_dep()

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 401 and _wants_html(request):
            from airflow.api_fastapi.app import get_auth_manager  # noqa: PLC0415

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
        return JSONResponse({"error_code": exc.status_code, "message": str(exc.detail)}, status_code=exc.status_code)

    @app.exception_handler(CdcflowError)
    async def cdcflow_error(_request: Request, exc: CdcflowError) -> Response:
        code = exc.status if isinstance(exc, ControlError) else 400 if isinstance(exc, ConfigError) else 500
        return JSONResponse({"error_code": code, "message": str(exc)}, status_code=code)

    # -- Kafka Connect's API ---------------------------------------------------------------------
    @app.get("/connectors")
    def list_connectors(user: Any = user_dep, expand: list[str] = Query(default=[])) -> Any:
        names = [p.name for p in ctl.pipelines() if _may(user, p.name, "GET")]
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

    @app.get("/connectors/{name}")
    def get_connector(name: str, user: Any = user_dep) -> Any:
        authorize(user, name, "GET")
        return connect.info(ctl.get(name))

    @app.get("/connectors/{name}/config")
    def get_config(name: str, user: Any = user_dep) -> Any:
        authorize(user, name, "GET")
        return connect.info(ctl.get(name))["config"]

    @app.put("/connectors/{name}/config")
    def put_config(name: str, user: Any = user_dep, body: Any = Body(default=None)) -> Any:
        """Connect's create-or-update: 201 for a new pipeline, 200 for a change. Creating needs what
        changing needs (PUT on the DAG of that name). A new pipeline's DAG appears when Airflow's
        dag-processor re-parses (ctl.DAG_APPEARS); until then its status is UNASSIGNED."""
        ctl.check_name(name)
        authorize(user, name, "PUT")
        cfg, created = svc.put_config(name, connect.connector_config(name, body), user.get_name())
        return JSONResponse(connect.info(ctl.Pipeline(cfg.name, Path(), cfg)), status_code=201 if created else 200,
                            headers={"Location": f"{PREFIX}/connectors/{name}"} if created else None)

    @app.delete("/connectors/{name}", status_code=204)
    def delete_connector(name: str, user: Any = user_dep) -> Response:
        """Only while STOPPED (409 otherwise); the offsets and ledger are kept (ctl.KEPT_ON_DELETE)."""
        ctl.check_name(name)
        authorize(user, name, "DELETE")
        svc.delete(name, user.get_name())
        return Response(status_code=204)

    @app.get("/connectors/{name}/status")
    def get_status(name: str, user: Any = user_dep) -> Any:
        authorize(user, name, "GET")
        return connect.status(svc.status(name))

    @app.get("/connectors/{name}/topics")
    def get_topics(name: str, user: Any = user_dep) -> Any:
        authorize(user, name, "GET")
        source = ctl.valid(name).source
        return {name: {"topics": list(source.topics) if source.topics else
                       [s.topic for s in ctl.offsets(name) if s.partition == 0]}}

    @app.put("/connectors/{name}/pause", status_code=202)
    def pause(name: str, user: Any = user_dep) -> Response:
        authorize(user, name, "PUT")
        svc.pause(name, user.get_name())
        return Response(status_code=202)

    @app.put("/connectors/{name}/resume", status_code=202)
    def resume(name: str, user: Any = user_dep) -> Response:
        authorize(user, name, "PUT")
        svc.resume(name, user.get_name())
        return Response(status_code=202)

    @app.put("/connectors/{name}/stop", status_code=204)
    def stop(name: str, user: Any = user_dep) -> Response:
        authorize(user, name, "PUT")
        svc.stop(name, user.get_name())
        return Response(status_code=204)

    @app.get("/connectors/{name}/schema")
    def schema_changes(name: str, user: Any = user_dep) -> Any:
        authorize(user, name, "GET")
        return JSONResponse(jsonable_encoder(svc.schema_changes(name)))

    @app.post("/connectors/{name}/schema/{verb}")
    def decide_schema(name: str, verb: str, user: Any = user_dep) -> Any:
        """schema_changes pause: approve or reject the pending changes (cdcflow schema apply|reject)."""
        authorize(user, name, "PUT")
        decision = {"approve": "approved", "apply": "approved", "reject": "rejected"}.get(verb)
        if decision is None:
            raise BadRequest(f"expected /schema/approve or /schema/reject, got /schema/{verb}")
        decided = svc.decide_schema(name, decision, user.get_name())
        return JSONResponse({"decision": decision, "changes": decided})

    @app.post("/connectors/{name}/restart", status_code=202)
    def restart(name: str, user: Any = user_dep) -> Any:
        authorize(user, name, "POST", runs=True)
        run_id = svc.run_now(name, user.get_name(), note=f"restart requested by {user.get_name()}")
        return JSONResponse({**connect.status(svc.status(name)), "run_id": run_id}, status_code=202)

    @app.get("/connectors/{name}/offsets")
    def get_offsets(name: str, user: Any = user_dep) -> Any:
        authorize(user, name, "GET")
        return connect.offsets(svc.stored_offsets(name))

    @app.patch("/connectors/{name}/offsets")
    def patch_offsets(name: str, user: Any = user_dep, body: Any = Body(default=None)) -> Any:
        authorize(user, name, "PUT")
        return svc.alter_offsets(name, connect.parse_offsets(body), user.get_name())

    @app.delete("/connectors/{name}/offsets")
    def delete_offsets(name: str, user: Any = user_dep) -> Any:
        authorize(user, name, "PUT")
        return svc.reset_offsets(name, "forget", user.get_name())

    @app.get("/connector-plugins")
    def list_plugins(user: Any = user_dep, connectorsOnly: bool = True) -> Any:  # noqa: N803 - Connect's name
        return connect.plugins(connectorsOnly)

    @app.put("/connector-plugins/{plugin}/config/validate")
    def validate(plugin: str, user: Any = user_dep, body: Any = Body(default=None)) -> Any:
        return connect.validate(plugin, body)

    # -- cdcflow's own -----------------------------------------------------------------------------
    @app.get("/connectors/{name}/partitions")
    def partitions(name: str, user: Any = user_dep) -> Any:
        authorize(user, name, "GET")
        return [{"topic": p.topic, "partition": p.partition, "committed": p.committed, "log_start": p.log_start,
                 "log_end": p.log_end, "lag": p.lag} for p in svc.offsets(name)]

    @app.get("/connectors/{name}/windows")
    def windows(name: str, user: Any = user_dep, limit: int = 20) -> Any:
        authorize(user, name, "GET")
        return [_window_json(*w) for w in svc.windows(name, limit)]

    @app.post("/connectors/{name}/run", status_code=202)
    def run(name: str, user: Any = user_dep, body: Any = Body(default=None)) -> Any:
        authorize(user, name, "POST", runs=True)
        conf = (body or {}).get("conf") if isinstance(body, dict) else None
        return {"run_id": svc.run_now(name, user.get_name(), conf)}

    @app.post("/connectors/{name}/replay", status_code=202)
    def replay(name: str, user: Any = user_dep, body: Any = Body(default=None)) -> Any:
        authorize(user, name, "POST", runs=True)
        body = body if isinstance(body, dict) else {}
        if body.get("start_time") is not None or body.get("end_time") is not None:
            times = {k: body.get(k) for k in ("start_time", "end_time")}
            return {"run_id": svc.run_now(name, user.get_name(), times,
                                          note=f"time-range replay requested by {user.get_name()}")}
        starts = body.get("start_offsets")
        if not isinstance(starts, dict):
            raise BadRequest('expected {"start_offsets": {"topic": {"partition": offset}}} or '
                             '{"start_time": "2026-11-22T10:00:00Z", "end_time": "2026-11-22T14:00:00Z"}')
        return {"run_id": svc.replay(name, starts, user.get_name())}

    @app.post("/connectors/{name}/offsets/reset")
    def reset(name: str, user: Any = user_dep, body: Any = Body(default=None)) -> Any:
        authorize(user, name, "PUT")
        if not isinstance(body, dict) or "to" not in body:
            raise BadRequest('expected {"to": "earliest" | "latest" | "timestamp" | "forget", "timestamp": ...}')
        ts = ctl.parse_time(body["timestamp"]) if body.get("timestamp") not in (None, "") else None
        return svc.reset_offsets(name, str(body["to"]), user.get_name(), ts)

    @app.get("/connectors/{name}/dlq")
    def dlq(name: str, user: Any = user_dep, limit: int = 20, before: str | None = None) -> Any:
        authorize(user, name, "GET")
        page = svc.dlq(name, limit, _parse_before(before))
        return {"topic": page.topic, "total": page.total, "next_before": _encode_before(page.next_before),
                "records": [dead_letter_json(d, page.redriven.get((d.partition, d.offset)), trace=False)
                            for d in page.records]}

    @app.get("/connectors/{name}/dlq/{partition}/{offset}")
    def dlq_record(name: str, partition: int, offset: int, user: Any = user_dep) -> Any:
        authorize(user, name, "GET")
        return dead_letter_json(svc.dlq_record(name, partition, offset))

    @app.post("/connectors/{name}/dlq/redrive")
    def redrive(name: str, user: Any = user_dep, body: Any = Body(default=None)) -> Any:
        authorize(user, name, "PUT")
        body = body if isinstance(body, dict) else {}
        unknown = set(body) - {"partition", "start", "end", "stage", "error_class", "target_topic"}
        if unknown:
            raise BadRequest(f"unknown fields {sorted(unknown)}: expected partition, start, end, stage, "
                             "error_class, target_topic")
        ints = {k: connect._int(body[k], k) for k in ("partition", "start", "end") if body.get(k) not in (None, "")}
        strs = {k: str(body[k]) for k in ("stage", "error_class", "target_topic") if body.get(k) not in (None, "")}
        result = svc.redrive(name, user.get_name(), **ints, **strs)
        return {"request_id": result.request_id, "matched": result.matched, "redriven": result.redriven,
                "already_redriven": result.already}

    # -- lag and metrics ---------------------------------------------------------------------------
    @app.get("/connectors/{name}/lag")
    def lag(name: str, user: Any = user_dep, refresh: bool = False) -> Any:
        authorize(user, name, "GET")
        cfg = ctl.valid(name)
        return burrow_json(svc.lag(name, refresh=refresh or None), cfg.source.kafka_conn_id,
                           f"/v3/kafka/{cfg.source.kafka_conn_id}/consumer/{cfg.group_id}/lag")

    @app.get("/v3/kafka/{cluster}/consumer/{group}/lag")
    def burrow_lag(cluster: str, group: str, request: Request, user: Any = user_dep) -> Any:
        """Burrow's endpoint: the group is the pipeline's consumer group (cdcflow-<name>) or its name;
        the cluster is the pipeline's Kafka connection id."""
        for p in ctl.pipelines():
            cfg = p.config
            if cfg is not None and group in (cfg.group_id, cfg.name) and cluster == cfg.source.kafka_conn_id:
                authorize(user, cfg.name, "GET")
                return burrow_json(svc.lag(cfg.name), cluster, request.url.path.removeprefix(PREFIX))
        raise HTTPException(404, f"cluster or consumer group not found: no pipeline with consumer group {group!r} "
                                 f"on Kafka connection {cluster!r}")

    @app.get("/metrics")
    def metrics(request: Request) -> Response:
        """Prometheus metrics of every pipeline. Open by default (the figures name pipelines, topics and
        tables, nothing more); with CDCFLOW_METRICS_TOKEN_FILE (or CDCFLOW_METRICS_TOKEN) set, a Bearer
        token equal to it is required: Prometheus's ``authorization: {credentials_file: …}`` sends it."""
        import hmac  # noqa: PLC0415

        from cdcflow.metrics import render  # noqa: PLC0415

        token = _metrics_token()
        if token and not hmac.compare_digest(request.headers.get("authorization", "").encode(),
                                             f"Bearer {token}".encode()):
            raise HTTPException(401, "metrics need the Bearer token of CDCFLOW_METRICS_TOKEN_FILE "
                                     "(Prometheus: authorization.credentials_file)")
        body, content_type = render(svc)
        return Response(body, media_type=content_type)

    @app.get("/health")
    def health() -> Response:
        """KIP-1017's health check: 200 ``healthy`` when requests can be served (the offset store
        answers), else 503 ``unhealthy`` with why. Open, as a liveness probe needs it."""
        why = svc.health()
        if why is not None:
            return JSONResponse({"status": "unhealthy", "message": why}, status_code=503)
        return JSONResponse({"status": "healthy", "message": "cdcflow is ready to handle requests"})

    # -- pages -------------------------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse)
    def index(request: Request, user: Any = user_dep) -> Any:
        if "text/html" not in request.headers.get("accept", ""):  # Connect's root: a client asking what it talks to
            return JSONResponse(svc.cluster_info())
        rows = []
        for p in ctl.pipelines():
            if not _may(user, p.name, "GET"):
                continue
            rows.append({"p": p, "status": _safe(lambda p=p: svc.status(p.name))})
        from cdcflow.metrics import spark_states  # noqa: PLC0415 - one probe per 30 s, shared with the metrics

        return _render("index.html", request, user=user, rows=rows, sparks=spark_states([r["p"] for r in rows]))

    @app.get("/pipelines/{name}", response_class=HTMLResponse)
    def page(request: Request, name: str, user: Any = user_dep, before: str | None = None) -> Any:
        authorize(user, name, "GET")
        p = ctl.get(name)
        ctx: dict[str, Any] = {"p": p, "user": user, "before": before, "status": _safe(lambda: svc.status(name)),
                               "can_edit": _may(user, name, "PUT"), "can_run": _may(user, name, "POST", runs=True)}
        if p.config is not None:
            ctx["offsets"] = _safe(lambda: svc.offsets(name))
            ctx["lag"] = _safe(lambda: svc.lag(name))  # samples the broker first when its samples are stale
            ctx["lag_chart"] = _safe(lambda: charts.lag_chart(svc.lag_history(name, charts.LAG_SAMPLES)))
            ctx["windows"] = _safe(lambda: svc.windows(name, charts.WINDOWS))  # the table shows the newest 15
            ctx["window_charts"] = (ctx["windows"] if isinstance(ctx["windows"], Failed)
                                    else _safe(lambda: charts.window_charts(ctx["windows"])))
            ctx["dlq"] = _safe(lambda: svc.dlq(name, 20, _parse_before(before))) if p.config.errors.dlq_topic else None
            ctx["schema_changes"] = _safe(lambda: svc.schema_changes(name)) if p.config.schema_changes == "pause" else []
            ctx["config_yaml"] = yaml.safe_dump(p.config.model_dump(mode="json", exclude_none=True), sort_keys=False)
        return _render("pipeline.html", request, **ctx)

    return app


def _metrics_token() -> str | None:
    import os  # noqa: PLC0415

    path = os.environ.get("CDCFLOW_METRICS_TOKEN_FILE")
    if path:
        try:
            return Path(path).read_text(encoding="utf-8").strip() or None
        except OSError as exc:  # refuse rather than serve openly what was meant to be closed
            raise HTTPException(503, f"CDCFLOW_METRICS_TOKEN_FILE {path} cannot be read: {exc.strerror}") from None
    return os.environ.get("CDCFLOW_METRICS_TOKEN") or None


class Failed:
    """A section of a page that could not be loaded (the rest of the page still renders)."""

    def __init__(self, error: Exception) -> None:
        self.error = f"{error.__class__.__name__}: {error}"


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except CdcflowError as exc:
        return Failed(exc)
    except Exception as exc:  # a page shows what failed instead of a 500
        log.exception("page section failed")
        return Failed(exc)


def _may(user: Any, name: str, method: str, runs: bool = False) -> bool:
    try:
        authorize(user, name, method, runs)
        return True
    except HTTPException:
        return False


def _wants_html(request: Request) -> bool:
    path = request.url.path.removeprefix(PREFIX)
    return (path in ("", "/") or path.startswith("/pipelines")) and "text/html" in request.headers.get("accept", "")


def _render(template: str, request: Request, **ctx: Any) -> HTMLResponse:
    root = str(request.scope.get("root_path", "")).rstrip("/") or PREFIX
    html = TEMPLATES.get_template(template).render(root=root, Failed=Failed, json=json,
                                                   dead_letter_json=dead_letter_json, **ctx)
    return HTMLResponse(html)
