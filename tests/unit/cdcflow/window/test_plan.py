"""Run parameters (trigger conf) and the record budget split."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.config import load_pipeline
from cdcflow.errors import ConfigError
from cdcflow.run_params import RunParams
from cdcflow.window.plan import allocate

ROOT = Path(__file__).resolve().parents[4]
CFG = load_pipeline(ROOT / "config/pipelines/demo_orders.yaml")


def test_valid_params() -> None:
    p = RunParams.parse({"start_offsets": {"demo.inventory.orders": {"0": 5, "2": 0}}, "max_records": 10,
                         "max_duration": 1.5}, CFG)
    assert p.start_offsets == {"demo.inventory.orders": {0: 5, 2: 0}}
    assert (p.max_records, p.max_duration) == (10, 1.5)
    assert RunParams.parse(None, CFG) == RunParams()
    assert RunParams.parse({"start_offsets": None, "max_records": None}, CFG) == RunParams()


def test_invalid_params_are_all_reported() -> None:
    with pytest.raises(ConfigError) as exc:
        RunParams.parse({"start_offsets": {"other.topic": {"0": 1}, "demo.inventory.orders": {"x": 1, "1": -3}},
                         "max_records": 0, "max_duration": "soon", "bogus": 1}, CFG)
    msg = str(exc.value)
    for part in ["unknown parameters ['bogus']", "start_offsets.other.topic: not a topic of this pipeline",
                 "partition 'x' is not an integer", "start_offsets.demo.inventory.orders.1: expected an offset >= 0, got -3",
                 "max_records: expected an integer >= 1, got 0", "max_duration: expected a number of seconds > 0"]:
        assert part in msg, f"{part!r} not in {msg}"


def test_allocate_splits_budget_and_redistributes() -> None:
    a, b, c = ("t", 0), ("t", 1), ("t", 2)
    assert allocate({a: 100, b: 100, c: 100}, 30) == {a: 10, b: 10, c: 10}
    assert allocate({a: 2, b: 100, c: 0}, 30) == {a: 2, b: 28, c: 0}
    assert allocate({a: 5, b: 5}, 100) == {a: 5, b: 5}
    shares = allocate({a: 7, b: 1000, c: 1000}, 1000)
    assert sum(shares.values()) == 1000 and shares[a] == 7


def test_a_lost_spark_connect_server_becomes_a_clear_spark_unavailable() -> None:
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    from cdcflow.errors import SparkUnavailable
    from spark_jobs.spark_failures import spark_unavailable

    grpc_text = ('<_MultiThreadedRendezvous of RPC that terminated with:\n\tstatus = StatusCode.UNAVAILABLE\n\t'
                 'details = "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:15002: '
                 'Failed to connect to remote host: Connection refused"\n')
    err = spark_unavailable(SparkConnectGrpcException(grpc_text))
    assert isinstance(err, SparkUnavailable)
    assert "became unreachable during the window (failed to connect to all addresses;" in str(err)
    assert "scripts/services.sh start spark" in str(err) and "no offset was moved" in str(err)
    assert spark_unavailable(SparkConnectGrpcException("[TABLE_OR_VIEW_NOT_FOUND] no such table")) is None
    assert spark_unavailable(ValueError("UNAVAILABLE")) is None
