"""The demo's downstream DAG: runs when the demo pipeline changed its MySQL table (an Airflow Asset).

It stands for a dbt run or a report; logic in cdcflow.demo (assets: cdcflow/assets.py)."""

from cdcflow.demo import downstream_dag

dag = downstream_dag()
