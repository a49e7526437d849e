#!/usr/bin/env bash
# Installs everything cdcflow needs on a fresh Debian machine (root, no Docker). Idempotent:
# a second run checks and reuses what is installed.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$CDCFLOW_ROOT"
say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# 1. Debian packages: MariaDB (the MySQL server), Java for Spark.
need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
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

# 3. Airflow metadata DB (SQLite by default).
mkdir -p "$AIRFLOW_HOME"
say "airflow db migrate ($AIRFLOW_HOME)"
airflow db migrate >"$CDCFLOW_HOME/airflow-migrate.log" 2>&1 || { tail -20 "$CDCFLOW_HOME/airflow-migrate.log"; exit 1; }
say "done"
