"""The JSON shapes of cdcflow's own endpoints (windows, dead letters and their paging), shared by the
pipeline API (api_pipelines.py) and the pipeline page (pages.py). Kafka Connect's shapes are in
connect.py. Pure functions, no I/O."""

from __future__ import annotations

from typing import Any

from cdcflow.errors import BadRequest


def parse_before(before: str | None) -> dict[int, int] | None:
    """The ``before`` paging cursor of the DLQ (``PARTITION:OFFSET,...``)."""
    if not before:
        return None
    try:
        return {int(p): int(o) for p, o in (item.split(":") for item in before.split(","))}
    except ValueError:
        raise BadRequest(f"before: expected PARTITION:OFFSET[,PARTITION:OFFSET...], got {before!r}") from None


def encode_before(nxt: dict[int, int] | None) -> str | None:
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


def window_json(w: Any, created: Any, updated: Any) -> dict[str, Any]:
    return {"run_id": w.run_id, "status": w.status, "origin": w.origin, "attempts": w.attempt,
            "message": w.message, "created_at": created.isoformat() + "Z", "updated_at": updated.isoformat() + "Z",
            "records": w.total_records, "stats": w.stats,
            "interval": [t.isoformat() + "Z" for t in w.interval] if w.interval else None,
            "partitions": [{"topic": p.topic, "partition": p.partition, "start": p.start, "end": p.end,
                            "records": p.records} for p in w.partitions]}
