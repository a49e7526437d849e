"""The window under ``spark-submit`` (SparkSubmitOperator, ``spark.mode: submit``): process one
planned window of a pipeline, as :func:`cdcflow.runner.process` does in-process.

    python cdcflow/airflow/spark_submit.py --pipeline NAME --run-id ID [--params JSON]

It is the platform's entry point, not the job's: the job (spark_jobs/) never imports the platform.
"""

from __future__ import annotations

import argparse
import json
import os
import traceback

from cdcflow import runner
from cdcflow.config import find_pipeline
from cdcflow.errors import CdcflowError


def main(argv: list[str] | None = None) -> int:
    """Entry point under spark-submit: process one planned window of a pipeline."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--params", default="{}", help="run parameters as JSON (max_duration override)")
    args = parser.parse_args(argv)
    os.environ["CDCFLOW_SPARK_SUBMITTED"] = "1"
    try:
        result = runner.process(find_pipeline(args.pipeline), args.run_id, json.loads(args.params))
    except CdcflowError as exc:
        print(f"cdcflow: window failed: {exc.__class__.__name__}: {exc}")
        traceback.print_exc()
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
