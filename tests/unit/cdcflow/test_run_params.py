"""Run parameters are declared once (cdcflow/run_params.py): every surface lists exactly the declared
parameters, and takes them the way the declaration says."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cli, cli_control
from cdcflow.config import load_pipeline
from cdcflow.run_params import PARAMS, REPLAY_PARAMS, RUN_PARAMS, RunParams, json_schema, offset_specs

ROOT = Path(__file__).resolve().parents[3]
CFG = load_pipeline(ROOT / "config/pipelines/demo_orders.yaml")
DECLARED = ("start_offsets", "start_time", "end_time", "max_records", "max_duration")


def test_the_declaration() -> None:
    assert PARAMS == DECLARED
    assert tuple(p.name for p in REPLAY_PARAMS) == ("start_offsets", "start_time", "end_time")
    assert len({p.flag for p in RUN_PARAMS}) == len(RUN_PARAMS)
    assert set(RunParams.__dataclass_fields__) == set(PARAMS)


def test_airflow_params_are_the_declared_ones() -> None:
    from cdcflow.airflow.dag_factory import params_schema

    params = params_schema(CFG)
    assert tuple(params) == PARAMS
    schema = {name: p.dump() for name, p in params.items()}
    assert schema["start_offsets"]["schema"]["propertyNames"] == {"enum": ["demo.inventory.orders"]}
    assert schema["max_records"]["schema"]["minimum"] == 1
    assert schema["max_records"]["description"] == f"Override window.max_records ({CFG.window.max_records})."
    assert "(record time: " in schema["start_time"]["description"]
    assert all(p.dump()["value"] is None for p in params.values())


def _options(command: str) -> dict[str, argparse.Action]:
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest not in ("help", "conf", "run_id")}


@pytest.mark.parametrize("command", ["run", "trigger"])
def test_cli_options_are_the_declared_ones(command: str) -> None:
    options = _options(command)
    assert tuple(options) == PARAMS
    assert {n: tuple(a.option_strings) for n, a in options.items()} == {p.name: (p.flag,) for p in RUN_PARAMS}


def test_cli_options_become_the_conf() -> None:
    args = cli.build_parser().parse_args([
        "run", "p", "--conf", '{"max_records": 5, "max_duration": 2}', "--max-records", "7",
        "--from", "2026-11-20T10:00:00Z", "--to", "2026-11-20T11:00:00Z"])
    assert cli_control.run_conf(args) == {"max_records": 7, "max_duration": 2, "start_time": "2026-11-20T10:00:00Z",
                               "end_time": "2026-11-20T11:00:00Z"}
    specs = "demo.inventory.orders:0=5,demo.inventory.orders:2=0"
    args = cli.build_parser().parse_args(["trigger", "p", "--start-offsets", specs, "--max-duration", "1.5"])
    conf = cli_control.run_conf(args)
    assert conf == {"start_offsets": {"demo.inventory.orders": {"0": 5, "2": 0}}, "max_duration": 1.5}
    assert RunParams.parse(conf, CFG) == RunParams({"demo.inventory.orders": {0: 5, 2: 0}}, max_duration=1.5)


def test_bad_cli_values_name_what_was_expected(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, expected in ((["--max-records", "many"], "argument --max-records: expected an integer, got 'many'"),
                           (["--start-offsets", "t:0"], "expected TOPIC:PARTITION=OFFSET[,...], got 't:0'")):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(["trigger", "p", *argv])
        assert expected in capsys.readouterr().err
    with pytest.raises(argparse.ArgumentTypeError):
        offset_specs("t:x=1")


def test_rest_bodies_document_the_declared_ones() -> None:
    from cdcflow.web.app import create_app

    paths: dict[str, Any] = create_app(object()).openapi()["paths"]  # type: ignore[arg-type]
    run = paths["/connectors/{name}/run"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert tuple(run["properties"]["conf"]["properties"]) == PARAMS
    assert run["properties"]["conf"]["additionalProperties"] is False  # RunParams.parse refuses others
    replay = paths["/connectors/{name}/replay"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert tuple(replay["properties"]) == tuple(p.name for p in REPLAY_PARAMS)
    assert replay["properties"]["start_time"] == json_schema(RUN_PARAMS[1])
