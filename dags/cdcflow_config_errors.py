"""Reports invalid pipeline configs as an Airflow DAG import error (file, field, what was expected).

Kept apart from cdcflow_pipelines.py so that one broken file never hides the other pipelines' DAGs.
This file defines no DAG.
"""

from cdcflow.airflow.dag_factory import raise_config_errors

raise_config_errors()
