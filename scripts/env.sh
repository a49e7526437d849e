# Settings shared by every cdcflow script; source it. Override any variable before sourcing.
# Ports and credentials are configurable; data, logs and PID files live in $CDCFLOW_HOME (gitignored).
CDCFLOW_ROOT="${CDCFLOW_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
export CDCFLOW_ROOT
export CDCFLOW_HOME="${CDCFLOW_HOME:-$CDCFLOW_ROOT/.local}"
export CDCFLOW_VENV="${CDCFLOW_VENV:-$CDCFLOW_ROOT/.venv}"
export CDCFLOW_PYTHON="${CDCFLOW_PYTHON:-python3.11}"

export CDCFLOW_KAFKA_PORT="${CDCFLOW_KAFKA_PORT:-19092}"
export CDCFLOW_MYSQL_PORT="${CDCFLOW_MYSQL_PORT:-13306}"
export CDCFLOW_ES_PORT="${CDCFLOW_ES_PORT:-19200}"
export CDCFLOW_ES_HOME="${CDCFLOW_ES_HOME:-$CDCFLOW_HOME/opt/elasticsearch-8.12.2}"
export CDCFLOW_ES_USER="${CDCFLOW_ES_USER:-cdcflow-es}"
export CDCFLOW_ES_HEAP="${CDCFLOW_ES_HEAP:-512m}"
export CDCFLOW_MYSQL_USER="${CDCFLOW_MYSQL_USER:-cdcflow}"
export CDCFLOW_MYSQL_DATABASE="${CDCFLOW_MYSQL_DATABASE:-cdcflow}"
# The MySQL password is generated once per machine unless given.
if [ -z "${CDCFLOW_MYSQL_PASSWORD:-}" ]; then
  if [ ! -s "$CDCFLOW_HOME/secrets/mysql.password" ]; then
    mkdir -p "$CDCFLOW_HOME/secrets" && chmod 700 "$CDCFLOW_HOME/secrets"
    (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' > "$CDCFLOW_HOME/secrets/mysql.password")
  fi
  CDCFLOW_MYSQL_PASSWORD="$(cat "$CDCFLOW_HOME/secrets/mysql.password")"
fi
export CDCFLOW_MYSQL_PASSWORD

# Airflow: SQLite metadata DB, this repo's dags/ and plugins/.
export AIRFLOW_HOME="${AIRFLOW_HOME:-$CDCFLOW_HOME/airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-$CDCFLOW_ROOT/dags}"
export AIRFLOW__CORE__PLUGINS_FOLDER="$CDCFLOW_ROOT/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES="${AIRFLOW__CORE__LOAD_EXAMPLES:-False}"
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-4}"
# CDCFLOW_AIRFLOW_EXECUTOR=celery: Airflow as it runs on several machines (docs/operating.md): the
# CeleryExecutor, Redis as its broker, PostgreSQL as the metadata DB and the result backend, each run by
# scripts/services.sh on a loopback port of its own, and Celery workers beside the scheduler.
# Unset (local): SQLite and the PreloadingLocalExecutor, below.
export CDCFLOW_AIRFLOW_EXECUTOR="${CDCFLOW_AIRFLOW_EXECUTOR:-local}"
case "$CDCFLOW_AIRFLOW_EXECUTOR" in
  local) ;;
  celery)
    export CDCFLOW_REDIS_PORT="${CDCFLOW_REDIS_PORT:-16379}"
    export CDCFLOW_POSTGRES_PORT="${CDCFLOW_POSTGRES_PORT:-15432}"
    export CDCFLOW_POSTGRES_USER="${CDCFLOW_POSTGRES_USER:-airflow}"
    export CDCFLOW_POSTGRES_DATABASE="${CDCFLOW_POSTGRES_DATABASE:-airflow}"
    for secret in redis postgres; do  # generated once per machine unless given, like MySQL's
      var="CDCFLOW_${secret^^}_PASSWORD"
      if [ -z "${!var:-}" ]; then
        if [ ! -s "$CDCFLOW_HOME/secrets/$secret.password" ]; then
          mkdir -p "$CDCFLOW_HOME/secrets" && chmod 700 "$CDCFLOW_HOME/secrets"
          (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' > "$CDCFLOW_HOME/secrets/$secret.password")
        fi
        export "$var=$(cat "$CDCFLOW_HOME/secrets/$secret.password")"
      fi
    done
    export AIRFLOW__CORE__EXECUTOR=CeleryExecutor  # whatever a shell that sourced this before had set
    # the SQLite setting below, inherited from a shell that sourced this file without the variable
    [ "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS:-}" != cdcflow.airflow.database.SQLITE_CONNECT_ARGS ] ||
      unset AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS
    pg="postgresql+psycopg2://$CDCFLOW_POSTGRES_USER:$CDCFLOW_POSTGRES_PASSWORD@127.0.0.1:$CDCFLOW_POSTGRES_PORT/$CDCFLOW_POSTGRES_DATABASE"
    export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-$pg}"
    export AIRFLOW__CELERY__RESULT_BACKEND="${AIRFLOW__CELERY__RESULT_BACKEND:-db+$pg}"
    export AIRFLOW__CELERY__BROKER_URL="${AIRFLOW__CELERY__BROKER_URL:-redis://:$CDCFLOW_REDIS_PASSWORD@127.0.0.1:$CDCFLOW_REDIS_PORT/0}"
    # cdcflow's own state (offsets, ledger, writer leases: cdcflow/state) in a database of its own on the
    # same PostgreSQL, which every worker, the triggerer and the api-server reach (not an SQLite file)
    export CDCFLOW_STATE_DATABASE="${CDCFLOW_STATE_DATABASE:-cdcflow_state}"
    export CDCFLOW_OFFSET_STORE_URL="${CDCFLOW_OFFSET_STORE_URL:-postgresql+psycopg2://$CDCFLOW_POSTGRES_USER:$CDCFLOW_POSTGRES_PASSWORD@127.0.0.1:$CDCFLOW_POSTGRES_PORT/$CDCFLOW_STATE_DATABASE}"
    # each worker imports cdcflow's task modules before its pool forks (cdcflow/airflow/celery_config.py)
    export AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS="${AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS:-cdcflow.airflow.celery_config.CELERY_CONFIG}"
    export CDCFLOW_AIRFLOW_WORKERS="${CDCFLOW_AIRFLOW_WORKERS:-2}"
    export AIRFLOW__CELERY__WORKER_CONCURRENCY="${AIRFLOW__CELERY__WORKER_CONCURRENCY:-2}"  # tasks at once, per worker
    # Airflow's default, said here (its components warn when it is not): Redis hands a task that no
    # worker acknowledged (its worker died) to another one only after this long
    export AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT="${AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT:-86400}"
    unset pg secret var ;;
  *) echo "scripts/env.sh: CDCFLOW_AIRFLOW_EXECUTOR=$CDCFLOW_AIRFLOW_EXECUTOR: expected local or celery" >&2; return 1 ;;
esac
# SQLite (the default metadata DB): wait up to 60 s for a lock instead of 5 (cdcflow/airflow/database.py)
case "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-sqlite}" in
  sqlite*) export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS:-cdcflow.airflow.database.SQLITE_CONNECT_ARGS}" ;;
esac
# LocalExecutor whose task processes are forked with cdcflow's modules already imported (~1 s less
# per task; cdcflow/airflow/executor.py)
export AIRFLOW__CORE__EXECUTOR="${AIRFLOW__CORE__EXECUTOR:-cdcflow.airflow.executor.PreloadingLocalExecutor}"
export AIRFLOW__CORE__UNIT_TEST_MODE="${AIRFLOW__CORE__UNIT_TEST_MODE:-False}"
# The api-server (Airflow UI, REST API and the cdcflow plugin at /cdcflow), on loopback.
export CDCFLOW_AIRFLOW_PORT="${CDCFLOW_AIRFLOW_PORT:-18080}"
export CDCFLOW_PROMETHEUS_PORT="${CDCFLOW_PROMETHEUS_PORT:-19090}"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="${AIRFLOW__CORE__EXECUTION_API_SERVER_URL:-http://127.0.0.1:$CDCFLOW_AIRFLOW_PORT/execution/}"
# SimpleAuthManager users (user:role): admin may change pipelines, viewer may only look.
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-admin:admin,viewer:viewer}"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:-$CDCFLOW_HOME/secrets/airflow-passwords.json}"
# Passwords and the JWT signing secret are generated once per machine (gitignored .local/secrets).
if [ ! -s "$CDCFLOW_HOME/secrets/jwt.secret" ]; then
  mkdir -p "$CDCFLOW_HOME/secrets" && chmod 700 "$CDCFLOW_HOME/secrets"
  (umask 077; head -c 48 /dev/urandom | base64 | tr -d '\n/+=' > "$CDCFLOW_HOME/secrets/jwt.secret")
fi
if [ ! -s "$AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" ]; then
  mkdir -p "$(dirname "$AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE")"
  (umask 077; printf '{"admin": "%s", "viewer": "%s"}\n' "$(head -c 12 /dev/urandom | base64 | tr -d '/+=')" \
    "$(head -c 12 /dev/urandom | base64 | tr -d '/+=')" > "$AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE")
fi
export AIRFLOW__API_AUTH__JWT_SECRET="${AIRFLOW__API_AUTH__JWT_SECRET:-$(cat "$CDCFLOW_HOME/secrets/jwt.secret")}"

# Connections, by the conn ids the pipeline files use. Set only when not given already (a plain
# ${VAR:-default} cannot hold JSON: the first '}' would end the expansion).
default_env() { [ -n "${!1:-}" ] || export "$1=$2"; }
default_env AIRFLOW_CONN_CDCFLOW_KAFKA "{\"conn_type\": \"kafka\", \"extra\": {\"bootstrap.servers\": \"127.0.0.1:$CDCFLOW_KAFKA_PORT\"}}"
default_env AIRFLOW_CONN_CDCFLOW_MYSQL "{\"conn_type\": \"mysql\", \"host\": \"127.0.0.1\", \"port\": $CDCFLOW_MYSQL_PORT, \"login\": \"$CDCFLOW_MYSQL_USER\", \"password\": \"$CDCFLOW_MYSQL_PASSWORD\", \"schema\": \"$CDCFLOW_MYSQL_DATABASE\"}"
default_env AIRFLOW_CONN_CDCFLOW_ELASTICSEARCH "{\"conn_type\": \"elasticsearch\", \"host\": \"127.0.0.1\", \"port\": $CDCFLOW_ES_PORT, \"schema\": \"http\"}"
default_env AIRFLOW_CONN_SPARK_DEFAULT "{\"conn_type\": \"spark\", \"host\": \"local[2]\"}"

export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
# The long-lived Spark (Spark Connect server, scripts/services.sh start spark) that windows run on.
export CDCFLOW_SPARK_CONNECT_PORT="${CDCFLOW_SPARK_CONNECT_PORT:-15002}"
export CDCFLOW_SPARK_REMOTE="${CDCFLOW_SPARK_REMOTE:-sc://127.0.0.1:$CDCFLOW_SPARK_CONNECT_PORT}"
export CDCFLOW_SPARK_CORES="${CDCFLOW_SPARK_CORES:-2}"
export PYSPARK_PYTHON="$CDCFLOW_VENV/bin/python"
export PATH="$CDCFLOW_VENV/bin:$PATH"
