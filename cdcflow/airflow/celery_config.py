"""Celery settings for cdcflow's Airflow workers (the CeleryExecutor): Airflow's own, and cdcflow's
task modules imported in each worker before its pool forks.

    AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS=cdcflow.airflow.celery_config.CELERY_CONFIG

A Celery worker runs each task in a process of its prefork pool, which runs it in a process of its
own again (Airflow's task supervisor forks the task). As with the PreloadingLocalExecutor
(cdcflow/airflow/executor.py), the modules a window's tasks import are imported once, in the
worker's main process before the pool is forked, so that every pool process and every task
process inherits them. Celery's ``import_modules`` signal is sent there, before the pool starts;
Airflow's own preload answers it too, and freezes the garbage collector's view of what is loaded by
then (copy-on-write stays shared). This receiver is connected when Airflow loads this configuration,
which is before Airflow connects its own: the receivers run in that order. The scheduler loads the
configuration too, to send tasks; it never sends the signal, and so imports nothing more.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG
from airflow.utils.net import getfqdn
from celery.signals import import_modules

from cdcflow.airflow.executor import preload

# Airflow's defaults, from its [celery] settings (broker, result backend, concurrency, acks late, ...)
CELERY_CONFIG: dict[str, Any] = dict(DEFAULT_CELERY_CONFIG)


@import_modules.connect
def preload_before_the_pool_forks(sender: Any = None, **_: Any) -> None:
    preload()


def worker_hostname() -> str:
    """The name a task instance records as its hostname, for workers that share a machine.

    Airflow records ``[core] hostname_callable``'s answer (the machine's name by default) on each task
    instance; two workers on one machine would record the same. scripts/services.sh sets
    ``CDCFLOW_AIRFLOW_WORKER`` (worker1, worker2) and points this callable at each worker's processes,
    so a task instance names its worker as Celery does (``worker1@host``). On machines of their own,
    workers keep Airflow's default (without the variable, this answers the same).
    """
    name = os.environ.get("CDCFLOW_AIRFLOW_WORKER")
    return f"{name}@{socket.gethostname()}" if name else getfqdn()
