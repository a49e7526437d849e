"""The usual Airflow approach, for the benchmark: the apache-kafka provider's ConsumeFromTopicOperator
with an apply_function_batch upserting into MySQL (bench/provider_fns.py: the provider's defaults or
the careful loop). Run by bench/baselines.py through `airflow dags test`; BENCH_TOPIC may be a
``^regex`` (the consumer subscribes to every topic it matches)."""

import os
from datetime import datetime

from airflow.providers.apache.kafka.operators.consume import ConsumeFromTopicOperator
from airflow.sdk import DAG

from bench.provider_fns import operator_started

with DAG("bench_provider_baseline", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    ConsumeFromTopicOperator(
        task_id="consume_and_upsert",
        kafka_config_id="bench_kafka",
        topics=[os.environ.get("BENCH_TOPIC", "bench")],
        apply_function_batch=os.environ.get("BENCH_APPLY_FUNCTION", "bench.provider_fns.provider_defaults"),
        max_messages=int(os.environ.get("BENCH_MAX_MESSAGES", "1000000")),
        max_batch_size=int(os.environ.get("BENCH_BATCH_SIZE", "500")),
        commit_cadence="end_of_batch",
        poll_timeout=30,
        on_execute_callback=operator_started,  # marks the operator's start for the harness
    )
