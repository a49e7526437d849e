"""cdcflow: change-data-capture pipelines as Airflow DAGs on Spark.

Kafka (Debezium envelopes) -> Spark (PySpark) -> MySQL, in bounded consume windows whose offsets
are committed only when every sink succeeded.
"""

__version__ = "0.1.0"
