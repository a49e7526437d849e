"""Airflow wiring: DAG factory and task callables. Imported by the thin files in dags/."""
