"""The job: one consume window on Spark (spark_jobs/window.py names its stages)."""
