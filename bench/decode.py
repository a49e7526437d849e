"""The read task's decode alone, on the bench's real-shaped stream (bench/shapes.py ``debezium``),
per converter: Debezium's JsonConverter with schemas beside the same records through a schema
registry (AvroConverter, JsonSchemaConverter; issue 42), each decoded as a read task decodes them
(spark_jobs/decode.change_decoder's decoder): with the bench's declared columns, with tables from
the record schema, and with Elasticsearch documents too.

    ./scripts/bench.sh --decode [--events 20000] [--repeat 5]

One process, no Kafka, no Spark: the records are in memory, decoded in batches of 5,000 (a read
task's batch). The figure is CPU seconds of this process (best of ``--repeat``), so a busy machine
changes it less than wall time would. Registry records are made by confluent-kafka's own
serializers against the test stand-in registry (tests/registry_standin.py), which this process
serves; their schemas are fetched once, before the timing. Prints a table and writes
bench/results/<timestamp>-decode-<events>.json. Every converter's changes are checked equal to the
JSON ones (images and versions), so a fast wrong decode fails the run (exit code 1).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from bench import realrows, shapes
from bench.meter import ROOT
from connectors.debezium.envelope import hints_from_columns
from connectors.formats import decoder as format_decoder
from connectors.kafka.reader import RAW_SCHEMA
from connectors.registry.client import RegistrySettings
from connectors.registry.decode import registry_decoder

BATCH = 5000
MODES = ("declared", "schema", "schema+documents")


def raw_batch(pairs: list[tuple[bytes, bytes | None]], topic: str) -> pa.RecordBatch:
    n = len(pairs)
    return pa.RecordBatch.from_pydict({
        "topic": [topic] * n, "partition": [0] * n, "offset": list(range(n)), "timestamp": [0] * n,
        "key": [k for k, _v in pairs], "value": [v for _k, v in pairs], "headers": [[] for _ in range(n)]},
        schema=RAW_SCHEMA)


def make_decoder(mode: str, converter: str, registry: RegistrySettings | None) -> Any:
    if mode == "declared":  # the bench sink's columns: only the fields it reads, no documents
        columns = realrows.DECLARED
        hints = hints_from_columns((c.get("field", c["name"]), c["type"], c.get("encoding")) for c in columns)
        inner = format_decoder("debezium", "source_ts_ms", hints, False, frozenset({"id"}),
                               frozenset(c.get("field", c["name"]) for c in columns))
    else:
        inner = format_decoder("debezium", "source_ts_ms", {}, mode == "schema+documents", frozenset(), None)
    return registry_decoder(inner, registry, converter, converter) if converter != "json" else inner


def timed(decoder: Any, batch: pa.RecordBatch, repeat: int) -> tuple[float, pa.Table]:
    decoder.decode_batch(batch.slice(0, min(BATCH, batch.num_rows)))  # compiled readers, fetched schemas
    best, out = float("inf"), None
    for _ in range(repeat):
        started = time.process_time()
        parts = [decoder.decode_batch(batch.slice(s, BATCH)) for s in range(0, batch.num_rows, BATCH)]
        best = min(best, time.process_time() - started)
        out = pa.Table.from_batches(parts)
    assert out is not None
    return best, out


def comparable(decoded: pa.Table) -> list[Any]:
    """What must be equal across converters: each change's kind, version, error and row image."""
    return list(zip(*(decoded.column(c).to_pylist() for c in ("change_op", "version", "error_stage", "image")),
                    strict=True))


def main(argv: list[str] | None = None) -> int:
    from tests.fixtures.debezium import avro as fa
    from tests.fixtures.debezium import json_schema as fj
    from tests.registry_standin import RegistryStandIn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    shape = shapes.make("debezium", args.events, max(args.events // 2, 1), 42)
    messages = list(shape.messages("decode"))
    topic = messages[0][0]
    pairs = [(k, v) for _t, k, v in messages]
    registry = RegistryStandIn().start()
    try:
        print(f"{args.events:,} real-shaped events; serializing them with AvroSerializer and JSONSerializer ...")
        streams = {"json": pairs, "avro": fa.to_avro(pairs, registry.url, topic),
                   "json_schema_registry": fj.to_json_schema(pairs, registry.url, topic)}
        settings = RegistrySettings(registry.url)
        results: dict[str, Any] = {}
        checks: dict[str, bool] = {}
        for mode in MODES:
            want = None
            for converter, stream in streams.items():
                batch = raw_batch(stream, topic)
                seconds, decoded = timed(make_decoder(mode, converter, settings), batch, args.repeat)
                got = comparable(decoded)
                want = got if converter == "json" else want
                checks[f"{mode}/{converter}"] = got == want and decoded.column("error_stage").null_count == len(got)
                mb = sum(len(v or b"") + len(k or b"") for k, v in stream) / 1e6
                results[f"{mode}/{converter}"] = {"events_per_cpu_s": round(args.events / seconds),
                                                  "mb_per_cpu_s": round(mb / seconds, 1), "cpu_s": round(seconds, 3),
                                                  "bytes_per_event": round(mb * 1e6 / args.events)}
    finally:
        registry.stop()
    print(f"\n== decode alone, {args.events:,} real-shaped events, CPU seconds of one process "
          f"(best of {args.repeat}) ==")
    for key, r in results.items():
        print(f"  {key:<40} {r['events_per_cpu_s']:>8,} events/s  {r['mb_per_cpu_s']:>6} MB/s  "
              f"({r['bytes_per_event']:,} bytes/event)")
    print(f"  checks (same changes as JSON): {json.dumps(checks)}")
    out = ROOT / "bench" / "results" / f"{datetime.now(UTC):%Y%m%dT%H%M%S}-decode-{args.events}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": "python -m bench.decode " + " ".join(argv or sys.argv[1:]),
                               "results": results, "checks": checks}, indent=2))
    print(f"recorded in {out.relative_to(ROOT)}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
