"""Counters that never go down (issue 40): windows committed for real (broker, MariaDB, the long-lived
Spark), one of them after a failed attempt; /cdcflow/metrics of a real api-server scraped; the ledger
pruned by the retention chore; the api-server restarted; scraped again, and one more window. Every
counter keeps its exact value across the prune and the restart, and the alert rules, evaluated by
``promtool test rules`` over the scraped series, fire nothing. And an exactly-once window killed
between MySQL's transaction and the ledger's commit is counted once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.errors import CdcflowError
from cdcflow.state import StateStore
from tests.airflow_server import AirflowServer, free_port, make_server
from tests.helpers import bootstrap, read_topic, run_cli_window, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.system, pytest.mark.services("kafka", "mysql", "spark")]
ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "config" / "prometheus" / "cdcflow-alerts.yml"
Sample = tuple[str, tuple[tuple[str, str], ...]]  # (name, sorted labels)
COUNTER_SUFFIXES = ("_total", "_bucket", "_count", "_sum")
HOLD = 20  # samples per scrape in the rule test: 20 x 15 s = 5 minutes, longer than every rule's "for"


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AirflowServer]:
    srv = make_server(tmp_path)
    srv.env["AIRFLOW_CONN_CDCFLOW_MYSQL_DOWN"] = json.dumps(
        {"conn_type": "mysql", "host": "127.0.0.1", "port": free_port(), "login": "x", "password": "x", "schema": "x"})
    for key in ("CDCFLOW_CONFIG_DIR", "CDCFLOW_OFFSET_STORE_URL", "AIRFLOW_CONN_CDCFLOW_MYSQL_DOWN"):
        monkeypatch.setenv(key, srv.env[key])
    srv.start()
    yield srv
    srv.stop()


def scrape(server: AirflowServer) -> dict[Sample, float]:
    got = server.request("GET", "/cdcflow/metrics", user=None)
    assert got.status == 200, got.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(got.text) for s in fam.samples}


def counters(samples: dict[Sample, float]) -> dict[Sample, float]:
    return {k: v for k, v in samples.items() if k[0].endswith(COUNTER_SUFFIXES)}


def _of(samples: dict[Sample, float], name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of ``name`` whose labels include ``labels``, by their other labels."""
    return {tuple(kv for kv in key if kv[0] not in labels): v for (n, key), v in samples.items()
            if n == name and all((k, v) in key for k, v in labels.items())}


def test_no_counter_goes_down_across_a_prune_and_an_api_server_restart(server: AirflowServer, tmp_path: Path) -> None:
    tag = unique("mono")
    path = write_pipeline(server.config_dir, tag, f"t.{tag}", tag)
    cfg = load_pipeline(path)
    topic = cfg.source.topics[0]
    data = yaml.safe_load(path.read_text())
    data["sinks"][0]["conn_id"] = "cdcflow_mysql_down"
    down = tmp_path / "down"
    down.mkdir()
    (down / f"{tag}.yaml").write_text(yaml.safe_dump(data))
    cfg_down = load_pipeline(down / f"{tag}.yaml")  # the same pipeline while its MySQL is unreachable
    store = StateStore(server.store_url)

    first = cdcgen.orders_stream(120, 20, seed=40)  # six poison records: dead letters
    cdcgen.produce(bootstrap(), topic, first.events)
    runner.run_window(cfg, "first", {"max_records": 60}, store)
    runner.run_window(cfg, "second", {}, store)
    later = cdcgen.orders_stream(60, 20, seed=41, broken=False, start_ts=1_767_312_000_000)
    cdcgen.produce(bootstrap(), topic, later.events, create=False)
    with pytest.raises(CdcflowError):
        runner.run_window(cfg_down, "third", {}, store)  # the attempt fails, no offset moves
    runner.run_window(cfg, "third", {}, store)  # its retry, under the same run id, commits
    produced = len(first.events) + len(later.events)
    assert sum(store.offsets.load(cfg.name).values()) == produced

    # what the three windows did, by the ledger (before retention) and by the broker's DLQ
    windows = store.ledger.history(cfg.name)
    assert [(w.run_id, w.status, w.attempt) for w in windows] == [("third", "committed", 2), ("second", "committed", 1),
                                                                  ("first", "committed", 1)]
    outcomes = ("upserted", "deleted", "stale", "unchanged", "failed")
    sinks = {o: float(sum(w.stats["sinks"][cfg.sinks[0].name].get(o, 0) for w in windows)) for o in outcomes}
    dead: dict[tuple[str, str], float] = {}
    for m in read_topic(cfg.errors.dlq_topic or ""):
        h = dict(m.headers())
        key = (h["__connect.errors.stage"].decode(), h["__connect.errors.exception.class.name"].decode())
        dead[key] = dead.get(key, 0) + 1
    assert sum(dead.values()) == len(first.broken) == 6

    before = scrape(server)
    name = (("pipeline", cfg.name),)
    assert _of(before, "cdcflow_windows_total", pipeline=cfg.name) == {(("outcome", "committed"),): 3}
    assert _of(before, "cdcflow_window_attempts_failed_total", pipeline=cfg.name) == {(): 1}
    read = _of(before, "cdcflow_records_read_total", pipeline=cfg.name, topic=topic)
    assert read == {(("partition", str(p)),): float(o) for (_t, p), o in store.offsets.load(cfg.name).items()}
    assert sum(read.values()) == produced
    assert _of(before, "cdcflow_sink_records_total", pipeline=cfg.name, sink=cfg.sinks[0].name) == {
        (("outcome", o),): n for o, n in sinks.items()} and sinks["upserted"] > 0
    assert _of(before, "cdcflow_dead_letters_total", pipeline=cfg.name) == {
        (("error_class", c), ("stage", s)): n for (s, c), n in dead.items()}
    assert _of(before, "cdcflow_window_duration_seconds_count", pipeline=cfg.name) == {(): 3}
    assert before[("cdcflow_ledger_windows", (*name, ("status", "committed")))] == 3
    assert before[("cdcflow_last_window_failed", name)] == 0

    # retention, as the commit step runs it, with everything old enough but the newest window
    pruned = store.chores.prune(cfg.name, older_than_s=0, keep=1)
    assert pruned["windows"] == 2 and [w.run_id for w in store.ledger.history(cfg.name)] == ["third"]
    left = sum(w.total_records for w in store.ledger.history(cfg.name))
    assert left < produced  # what a count from the ledger would now say
    after_prune = scrape(server)
    assert counters(after_prune) == counters(before)
    assert after_prune[("cdcflow_ledger_windows", (*name, ("status", "committed")))] == 1  # a gauge: it may drop

    server.stop()
    server.start()
    restarted = scrape(server)
    assert counters(restarted) == counters(before)

    last = cdcgen.orders_stream(30, 10, seed=42, broken=False, start_ts=1_767_398_400_000)
    cdcgen.produce(bootstrap(), topic, last.events, create=False)
    runner.run_window(cfg, "fourth", {}, store)
    grown = scrape(server)
    assert _of(grown, "cdcflow_windows_total", pipeline=cfg.name) == {(("outcome", "committed"),): 4}
    assert sum(_of(grown, "cdcflow_records_read_total", pipeline=cfg.name).values()) == produced + len(last.events)
    for key, value in counters(before).items():
        assert grown[key] >= value, key  # the newest window only added
    store.close()

    quiet = promtool_rule_test([before, after_prune, restarted, grown], tmp_path / "scraped")
    assert quiet.returncode == 0 and "SUCCESS" in quiet.stdout, quiet.stdout[-4000:] + quiet.stderr[-4000:]
    # the control: the same test over a dead-letter counter that grows by 2 a second does fire its alert
    fast = ("cdcflow_dead_letters_total", (("error_class", "E"), ("pipeline", cfg.name), ("stage", "sink")))
    loud = promtool_rule_test([{fast: 0.0}, {fast: 600.0}, {fast: 1200.0}], tmp_path / "control")
    said = loud.stdout + loud.stderr
    assert loud.returncode == 1 and "alertname: CdcflowDeadLetterRateHigh, time: 14m45s" in said, said


def _selector(key: Sample) -> str:
    name, labels = key
    return name + "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in labels) + "}"


def promtool_rule_test(scrapes: list[dict[Sample, float]], directory: Path) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` over the scrapes, each held for 5 minutes, one after another, as
    Prometheus would have stored them: every alert rule expected quiet at the end of each, and no
    counter ever reset."""
    keys = sorted({k for s in scrapes for k in s})
    series = [{"series": _selector(k),
               "values": " ".join(f"{s[k]!r}x{HOLD - 1}" if k in s else f"_x{HOLD - 1}" for s in scrapes)}
              for k in keys]
    end = f"{len(scrapes) * HOLD * 15 - 15}s"
    alerts = [r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]
    counter_series = sum(1 for k in keys if k[0].endswith("_total"))
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": series,
            "alert_rule_test": [{"eval_time": f"{(i + 1) * HOLD * 15 - 15}s", "alertname": a, "exp_alerts": []}
                                for i in range(len(scrapes)) for a in alerts],
            "promql_expr_test": [  # no counter was ever reset, and the counters are all there
                *({"expr": f"sum(resets({name}[1h]))", "eval_time": end, "exp_samples": [{"labels": "{}", "value": 0}]}
                  for name in sorted({k[0] for k in keys if k[0].endswith(COUNTER_SUFFIXES)})),
                {"expr": 'count({__name__=~"cdcflow_.+_total"})', "eval_time": end,
                 "exp_samples": [{"labels": "{}", "value": counter_series}]},
            ],
        }],
    }
    directory.mkdir()
    path = directory / "counters-test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run(["promtool", "test", "rules", str(path)], check=False, capture_output=True, text=True,
                          timeout=120)


def test_an_exactly_once_window_killed_after_its_sink_transaction_is_counted_once(config_dir: Path) -> None:
    """Exactly-once (offset_store.sink): the window's rows and offsets commit in MySQL's transaction, and
    the ledger learns it when the run's commit step runs. Killed between the two, the window is not
    counted; the next run (which takes the offsets from MySQL) and the killed run's retry are counted,
    each once; a retry of a run counted already adds nothing."""
    tag = unique("eomono")
    path = write_pipeline(config_dir, tag, f"t.{tag}", tag, offset_store={"sink": "orders_mysql"})
    cfg = load_pipeline(path)
    stream = cdcgen.orders_stream(90, 20, seed=43, broken=False)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events)
    store = StateStore(str(os.environ["CDCFLOW_OFFSET_STORE_URL"]))

    def windows() -> float:
        return sum(v for _labels, v in store.totals.read(cfg.name).get("cdcflow_windows", []))

    def records() -> float:
        return sum(v for _labels, v in store.totals.read(cfg.name).get("cdcflow_records_read", []))

    died = run_cli_window(config_dir, cfg.name, "eo-1", "after_sinks")
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    killed = store.ledger.get_window(cfg.name, "eo-1")
    assert killed is not None and killed.status == "applied"  # MySQL holds its rows and offsets; the ledger no commit
    assert (windows(), records()) == (0, 0)

    nxt = run_cli_window(config_dir, cfg.name, "eo-2")  # starts at MySQL's offsets: reads nothing, commits
    assert nxt.returncode == 0, nxt.stderr[-2000:]
    assert (windows(), records()) == (1, 0)

    for _ in range(2):  # the killed run's retry (its window is in MySQL already: nothing written), then again
        retry = run_cli_window(config_dir, cfg.name, "eo-1")
        assert retry.returncode == 0, retry.stderr[-2000:]
        assert '"already": "eo-1"' in retry.stdout
        assert (windows(), records()) == (2, len(stream.events))
    totals = store.totals.read(cfg.name)
    assert {d["outcome"]: v for d, v in totals["cdcflow_sink_records"]} == {  # the retry's counts: none
        "upserted": 0, "deleted": 0, "stale": 0, "unchanged": 0, "failed": 0}
    store.close()
