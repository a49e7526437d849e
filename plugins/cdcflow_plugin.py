"""cdcflow's Airflow plugin (logic: cdcflow.web). Airflow loads this folder as its plugins folder."""

from cdcflow.web.plugin import CdcflowPlugin

__all__ = ["CdcflowPlugin"]
