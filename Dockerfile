# One image for Airflow (api-server, scheduler, dag-processor, triggerer) and the Spark master and
# workers: executors run cdcflow's Python (confluent-kafka, PyMySQL), and PySpark needs the same
# Python minor version on the driver and the workers.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps curl \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    PYSPARK_PYTHON=python3.11 \
    AIRFLOW_HOME=/opt/airflow
WORKDIR /opt/cdcflow
COPY requirements.lock pyproject.toml README.md ./
RUN pip install --no-cache-dir -r requirements.lock
COPY cdcflow cdcflow
COPY connectors connectors
COPY spark_jobs spark_jobs
RUN pip install --no-cache-dir --no-deps -e .
COPY dags dags
COPY plugins plugins
COPY config config
