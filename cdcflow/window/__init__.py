"""A consume window's steps on the platform's side: plan, process, commit (cdcflow/runner.py runs them).

* plan.py      fixes the window in the ledger before any record is read;
* process.py   runs it on Spark (spark_jobs/window.py) under the pipeline's writer lease (lease.py);
* commit.py    moves the stored offsets once every sink succeeded, then retention;
* clients.py   what a pipeline's config resolves to: its state store, Kafka settings, sink targets,
               and the stored offsets read through them.
"""
