"""One window step in this (fresh) process, as an Airflow task runs it; prints its figures as JSON.

    python -m bench.window_once PIPELINE RUN_ID [all|plan|process|commit]
    python -m bench.window_once --fork PIPELINE RUN_ID [...]

``--fork`` runs the window as Airflow's PreloadingLocalExecutor does (cdcflow/airflow/executor.py):
this process imports the task modules first, then forks the task process; the figure printed last
is the forked process's time, from the fork to its exit.

Used by bench/fixed_cost.py. Run as a module, not with ``python -c``: PySpark's Connect client
imports its test utilities when ``__main__`` has no file, which an Airflow task never pays.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time

T0 = time.perf_counter()


def main() -> None:
    from cdcflow import runner  # noqa: PLC0415
    from cdcflow.config import find_pipeline  # noqa: PLC0415

    name, run_id = sys.argv[1], sys.argv[2]
    step = sys.argv[3] if len(sys.argv) > 3 else "all"
    cfg = find_pipeline(name)
    records = 0
    if step == "all":
        records = runner.run_window(cfg, run_id)["records"]
    elif step == "plan":
        runner.plan(cfg, run_id)
    elif step == "process":
        records = runner.process(cfg, run_id)["records"]
    elif step == "commit":
        runner.commit(cfg, run_id)
    else:
        raise SystemExit(f"unknown step {step!r} (expected all, plan, process or commit)")
    print(json.dumps({"records": records, "inside": time.perf_counter() - T0}), flush=True)
    # end as an Airflow task process ends (airflow.sdk.execution_time.supervisor._fork_main): exit
    # handlers, then os._exit, without the interpreter's teardown (~0.35 s with pandas, gRPC, Spark)
    atexit._run_exitfuncs()
    os._exit(0)


def forked() -> None:
    from cdcflow.airflow.executor import preload  # noqa: PLC0415

    preload()
    del sys.argv[1]
    global T0
    start = T0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        main()
    _pid, status = os.waitpid(pid, 0)
    print(json.dumps({"forked_wall": time.perf_counter() - start, "status": status}), flush=True)
    sys.exit(0 if status == 0 else 1)


if __name__ == "__main__":
    forked() if sys.argv[1:2] == ["--fork"] else main()
