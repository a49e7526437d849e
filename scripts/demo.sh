#!/usr/bin/env bash
# The main job: install (idempotent), start the local services, create the demo topic with
# Debezium change events, run the demo pipeline's DAG with `airflow dags test`, and print what
# landed in MariaDB and in the dead-letter topic; then check and print the cdcflow page in Airflow.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/services.sh start
source scripts/env.sh
echo; echo "== preparing the demo topic =="
python -m cdcflow.demo prepare
echo; echo "== airflow dags test demo_orders (log: $CDCFLOW_HOME/demo-dags-test.log) =="
if ! airflow dags test demo_orders >"$CDCFLOW_HOME/demo-dags-test.log" 2>&1; then
  tail -n 40 "$CDCFLOW_HOME/demo-dags-test.log"; echo "demo: the DAG run failed (log above)"; exit 1
fi
grep -E "planned window|read [0-9]+ records|applied:|committed|DagRun Finished" "$CDCFLOW_HOME/demo-dags-test.log" \
  | sed -E 's/^[0-9T:.Z-]+ \[[a-z ]+\] //; s/ \[[a-z.]+\] loc=.*$//' | cut -c1-220
python -m cdcflow.demo report
python -m cdcflow.demo downstream
airflow dags reserialize >"$CDCFLOW_HOME/demo-reserialize.log" 2>&1  # the page's DAG state, without waiting for the dag-processor
python -m cdcflow.demo page
