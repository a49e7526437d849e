"""Settings for Airflow's metadata database when it is the embedded SQLite.

SQLite lets one writer in at a time; a writer that finds the database locked waits ``timeout``
seconds (pysqlite's default: 5) and then fails with "database is locked". The scheduler, the
dag-processor, the api-server, task processes and CLI commands such as ``airflow backfill create``
all write to it, and on a busy two-core machine 5 s is not always enough. scripts/env.sh points
``AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS`` here when the metadata DB is SQLite.
"""

SQLITE_CONNECT_ARGS = {"timeout": 60}
