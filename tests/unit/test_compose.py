"""docker-compose.yaml is checked against the pipeline configs (no Docker engine runs here)."""

from __future__ import annotations

import json
import re
import weakref
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from cdcflow.config import load_all

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
AIRFLOW = [n for n in SERVICES if n.startswith("airflow-") and n != "airflow-db"]
CONTAINER_PORTS = {"kafka": 9092, "mysql": 3306, "elasticsearch": 9200, "spark-master": 7077, "spark-connect": 15002}


def _env(service: str) -> dict[str, str]:
    return {k: str(v) for k, v in SERVICES[service].get("environment", {}).items()}


def _conn(env: dict[str, str], conn_id: str) -> dict[str, Any]:
    raw = env.get(f"AIRFLOW_CONN_{conn_id.upper()}")
    assert raw, f"connection {conn_id!r} used by a pipeline is not defined in the Airflow services"
    return json.loads(raw)


def test_the_stack_has_every_component() -> None:
    assert {"kafka", "mysql", "elasticsearch", "airflow-db", "airflow-init", "airflow-apiserver",
            "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer", "spark-master",
            "spark-worker-1", "spark-worker-2", "spark-connect"} <= set(SERVICES)
    assert SERVICES["kafka"]["image"].startswith("apache/kafka:")
    assert SERVICES["elasticsearch"]["image"].endswith(":8.12.2")
    assert SERVICES["mysql"]["image"].startswith("mysql:8")


def test_every_connection_a_pipeline_uses_points_at_a_compose_service() -> None:
    loaded, errors = load_all(ROOT / "config/pipelines")
    assert not errors and loaded
    for service in AIRFLOW:
        env = _env(service)
        for item in loaded:
            cfg = item.config
            kafka = _conn(env, cfg.source.kafka_conn_id)
            host, port = kafka["extra"]["bootstrap.servers"].split(":")
            assert host in SERVICES and int(port) == CONTAINER_PORTS[host]
            for sink in cfg.sinks:
                conn = _conn(env, sink.conn_id)
                assert conn["host"] in SERVICES and conn["port"] == CONTAINER_PORTS[conn["host"]]
                if sink.type == "mysql":
                    mysql_env = _env("mysql")
                    assert conn["login"] == mysql_env["MYSQL_USER"] and conn["schema"] == mysql_env["MYSQL_DATABASE"]
                    assert conn["password"] == "${MYSQL_PASSWORD}"  # never a literal secret
            spark = _conn(env, cfg.spark.conn_id)
            assert urlsplit(spark["host"]).hostname == "spark-master" and spark["port"] == CONTAINER_PORTS["spark-master"]
        store = urlsplit(env["CDCFLOW_OFFSET_STORE_URL"])
        assert store.hostname == "mysql" and store.port == 3306


def test_kafka_advertises_its_service_name_and_airflow_mounts_the_project() -> None:
    kafka = _env("kafka")
    assert kafka["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://kafka:9092"
    for service in AIRFLOW:
        env = _env(service)
        mounts = {m.split(":")[1]: m.split(":")[0] for m in SERVICES[service].get("volumes", [])}
        assert mounts.get(env["AIRFLOW__CORE__DAGS_FOLDER"]) == "./dags"
        assert mounts.get(env["AIRFLOW__CORE__PLUGINS_FOLDER"]) == "./plugins"
        assert env["CDCFLOW_CONFIG_DIR"].startswith(mounts_target(mounts, "./config"))


def mounts_target(mounts: dict[str, str], source: str) -> str:
    return next(target for target, src in mounts.items() if src == source)


def test_no_literal_secrets_and_pinned_images() -> None:
    text = (ROOT / "docker-compose.yaml").read_text()
    for match in re.finditer(r"^\s*[A-Z_]*(PASSWORD|SECRET)[A-Z_]*:\s*(\S+)", text, re.MULTILINE):
        if match.group(0).split(":")[0].strip().endswith("_FILE"):
            continue  # a path to a secrets file, not a secret
        assert match.group(2).startswith("${"), f"literal secret in docker-compose.yaml: {match.group(0)}"
    for name, svc in SERVICES.items():
        image = svc.get("image", "")
        assert ":" in image and not image.endswith(":latest"), f"{name}: image {image!r} is not pinned"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "requirements.lock" in dockerfile  # the image installs the same pins as the tests


def test_prometheus_and_grafana_are_wired_to_the_plugin_and_the_repo_files() -> None:
    prom = SERVICES["prometheus"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in prom["volumes"])
    scrape = yaml.safe_load((ROOT / "config/prometheus/prometheus-compose.yml").read_text())
    assert mounts["./config/prometheus/cdcflow-alerts.yml"] in scrape["rule_files"]
    [job] = scrape["scrape_configs"]
    assert job["metrics_path"] == "/cdcflow/metrics"  # the plugin's mount point
    [target] = job["static_configs"][0]["targets"]
    host, port = target.split(":")
    api = SERVICES[host]
    assert f"--port {port}" in api["command"] and "api-server" in api["command"]
    grafana = SERVICES["grafana"]
    gmounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"])
    source = yaml.safe_load((ROOT / "config/grafana/provisioning-datasources.yml").read_text())["datasources"][0]
    assert source["url"] == "http://prometheus:9090" and "9090:9090" in prom["ports"]
    dashboard = json.loads((ROOT / "config/grafana/cdcflow-dashboard.json").read_text())
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in [p]}
    assert uids == {source["uid"]}
    provider = yaml.safe_load((ROOT / "config/grafana/provisioning-dashboards.yml").read_text())["providers"][0]
    assert gmounts["./config/grafana/cdcflow-dashboard.json"].startswith(provider["options"]["path"])
    for path in [*mounts, *gmounts]:
        assert (ROOT / path).exists(), path


def _confs(command: str) -> dict[str, str]:
    return dict(m.groups() for m in re.finditer(r"--conf\s+([\w.]+)=(\S+)", command))


def test_the_long_lived_spark_runs_as_services_sh_runs_it_on_the_cluster() -> None:
    connect = SERVICES["spark-connect"]["command"]
    master = SERVICES["spark-master"]["command"]
    assert "org.apache.spark.sql.connect.service.SparkConnectServer" in connect
    port = re.search(r"--port (\d+)", master).group(1)  # type: ignore[union-attr]
    assert f"--master spark://spark-master:{port}" in connect
    for name in ("spark-worker-1", "spark-worker-2"):
        assert SERVICES[name]["command"].startswith("spark-class org.apache.spark.deploy.worker.Worker "
                                                    f"spark://spark-master:{port}")
    confs = _confs(connect)
    assert confs["spark.connect.grpc.binding.port"] == str(CONTAINER_PORTS["spark-connect"])
    assert confs["spark.executorEnv.PYTHONPATH"] == "/opt/cdcflow"  # the image's WORKDIR: cdcflow imports
    assert "WORKDIR /opt/cdcflow" in (ROOT / "Dockerfile").read_text()
    # the same Spark settings as the long-lived Spark that scripts/services.sh starts here
    script = (ROOT / "scripts/services.sh").read_text()
    start = script[script.index("start_spark() {"):script.index("# -- prometheus")]
    local = _confs(start.replace("\\\n", " "))
    site = {"spark.connect.grpc.binding.address", "spark.connect.grpc.binding.port", "spark.executorEnv.PYTHONPATH",
            "spark.pyspark.python", "spark.executor.memory", "spark.local.dir", "spark.sql.warehouse.dir",
            "spark.ui.enabled", "spark.ui.retainedTasks"}  # the UI is off here, on in compose (port 4040)
    local = {k: re.sub(r'^"?\$\{\w+:-([^}$]*)\}"?$', r"\1", v) for k, v in local.items()}  # ${VAR:-default}
    assert {k: v for k, v in local.items() if k not in site and "$" not in v} == \
        {k: v for k, v in confs.items() if k not in site}
    # out of heap, the JVM exits (and is restarted) rather than keep its port without a context
    assert '--driver-java-options "-XX:+ExitOnOutOfMemoryError -XX:TieredStopAtLevel=1"' in connect
    assert '--driver-java-options "-XX:+ExitOnOutOfMemoryError ${CDCFLOW_SPARK_JAVA_OPTIONS:--XX:TieredStopAtLevel=1}"' \
        in start
    # the client compiler only (spark_jobs/session.py says why), in-process sessions too
    from spark_jobs.session import DEFAULT_CONF  # noqa: PLC0415

    assert DEFAULT_CONF["spark.driver.extraJavaOptions"].startswith("-XX:TieredStopAtLevel=1")
    # supervised: a health check that runs a job (a context-less server keeps its port), and a restart
    spark = SERVICES["spark-connect"]
    assert spark["restart"] == "unless-stopped"
    check = " ".join(spark["healthcheck"]["test"])
    assert f"-m spark_jobs.health sc://127.0.0.1:{CONTAINER_PORTS['spark-connect']}" in check and "kill 1" in check
    assert (ROOT / "spark_jobs/health.py").exists()
    waiting = [n for n, svc in SERVICES.items() if "spark-connect" in (svc.get("depends_on") or {})]
    assert waiting and all(SERVICES[n]["depends_on"]["spark-connect"] == {"condition": "service_healthy"}
                           for n in waiting)
    for service in AIRFLOW:
        remote = urlsplit(_env(service)["CDCFLOW_SPARK_REMOTE"].replace("sc://", "http://"))
        assert remote.hostname == "spark-connect" and remote.port == CONTAINER_PORTS["spark-connect"]
    loaded, _errors = load_all(ROOT / "config/pipelines")
    assert all(item.config.spark.mode == "connect" and item.config.spark.remote is None for item in loaded)


def _env_sh_default(name: str) -> str:
    """The default scripts/env.sh gives ``name`` (``export NAME="${NAME:-default}"``)."""
    script = (ROOT / "scripts/env.sh").read_text()
    match = re.search(rf'export {name}="\$\{{{name}:-([^}}]*)\}}"', script)
    assert match, f"scripts/env.sh sets no default for {name}"
    return match.group(1)


def test_the_celery_profile_runs_redis_and_two_workers_as_services_sh_does() -> None:
    celery = {name for name, svc in SERVICES.items() if "celery" in svc.get("profiles", [])}
    assert celery == {"redis", "airflow-worker-1", "airflow-worker-2"}
    assert SERVICES["redis"]["image"].startswith("redis:7.0.")  # Debian 12's redis-server is 7.0
    assert SERVICES["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert "ports" not in SERVICES["redis"]  # reachable on the compose network only
    # two workers, each with its own Celery name and host name (the api-server reads a running task's
    # log from the host its task instance names), health-checked by a Celery ping to that name
    names = []
    for worker in ("airflow-worker-1", "airflow-worker-2"):
        svc = SERVICES[worker]
        match = re.fullmatch(r"airflow celery worker --celery-hostname (worker\d)@%h", svc["command"])
        assert match, svc["command"]
        names.append(match.group(1))
        assert svc["hostname"] == worker
        check = " ".join(svc["healthcheck"]["test"])
        assert f"inspect ping -d {match.group(1)}@$${{HOSTNAME}}" in check  # $$: compose's escape for the shell's $
        assert svc["depends_on"]["redis"] == {"condition": "service_healthy"}
        assert svc["depends_on"]["airflow-db"] == {"condition": "service_healthy"}
    assert len(set(names)) == 2
    # services.sh names its workers the same way
    script = (ROOT / "scripts/services.sh").read_text()
    assert '--celery-hostname "worker$1@%h"' in script and _env_sh_default("CDCFLOW_AIRFLOW_WORKERS") == "2"
    # every Airflow component waits for Redis when the profile runs, and starts without it otherwise
    for service in AIRFLOW:
        if service in ("airflow-init", "airflow-worker-1", "airflow-worker-2"):
            continue
        assert SERVICES[service]["depends_on"]["redis"] == {"condition": "service_healthy", "required": False}


def test_every_airflow_component_has_the_celery_settings_of_scripts_env_sh() -> None:
    redis_port = 6379
    for service in AIRFLOW:
        env = _env(service)
        # the executor: the LocalExecutor that preloads, as env.sh's default; CeleryExecutor when asked
        assert env["AIRFLOW__CORE__EXECUTOR"] == "${AIRFLOW_EXECUTOR:-cdcflow.airflow.executor.PreloadingLocalExecutor}"
        broker = urlsplit(env["AIRFLOW__CELERY__BROKER_URL"])
        assert broker.scheme == "redis" and broker.hostname == "redis" and broker.port == redis_port
        # the result backend is the metadata DB (PostgreSQL), through SQLAlchemy, as in env.sh
        backend = env["AIRFLOW__CELERY__RESULT_BACKEND"]
        assert backend.startswith("db+postgresql+psycopg2://")
        db, metadata = (urlsplit(re.sub(r"\$\{[^}]*\}", "secret", url))  # ${AIRFLOW_DB_PASSWORD:?...}
                        for url in (backend.removeprefix("db+"), env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]))
        where = [(url.hostname, url.port, url.path, url.username) for url in (db, metadata)]
        assert where == [("airflow-db", 5432, "/airflow", "airflow")] * 2
        for name in ("AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS",
                     "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT"):
            assert env[name] == _env_sh_default(name), name
    script = (ROOT / "scripts/env.sh").read_text()
    assert 'export AIRFLOW__CORE__EXECUTOR=CeleryExecutor' in script
    assert "db+$pg" in script and "postgresql+psycopg2://" in script
    # the configuration module exists, extends Airflow's, and preloads cdcflow as the LocalExecutor does
    from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG  # noqa: PLC0415
    from celery.signals import import_modules  # noqa: PLC0415

    from cdcflow.airflow import celery_config  # noqa: PLC0415

    module, attr = _env("airflow-scheduler")["AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"].rsplit(".", 1)
    assert module == celery_config.__name__ and getattr(celery_config, attr) == DEFAULT_CELERY_CONFIG
    receivers = [r() if isinstance(r, weakref.ref) else r for _key, r in import_modules.receivers]
    assert celery_config.preload_before_the_pool_forks in receivers
