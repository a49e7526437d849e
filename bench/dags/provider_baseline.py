"""The usual Airflow approach, for the benchmark: the apache-kafka provider's ConsumeFromTopicOperator
with apply_function_batch upserting into MySQL. Run by bench/run.py through `airflow dags test`."""

import os
from datetime import datetime

from airflow.providers.apache.kafka.operators.consume import ConsumeFromTopicOperator
from airflow.sdk import DAG

with DAG("bench_provider_baseline", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    ConsumeFromTopicOperator(
        task_id="consume_and_upsert",
        kafka_config_id="bench_kafka",
        topics=[os.environ.get("BENCH_TOPIC", "bench")],
        apply_function_batch="bench.provider_fns.upsert_batch",
        max_messages=int(os.environ.get("BENCH_MAX_MESSAGES", "1000000")),
        max_batch_size=int(os.environ.get("BENCH_BATCH_SIZE", "500")),
        commit_cadence="end_of_batch",
        poll_timeout=30,
    )
