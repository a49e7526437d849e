"""The window's dead letters, on the driver once the read tasks ended and before any handed-on sink is
written: the tolerance, the bad records to the dead-letter topic (one task: write/dead_letter_rows.reporter)
and the breaker. (A read task that writes its targets itself sent its own first:
write/early_writes.send_first.) A failed DLQ write fails the window.
"""

from __future__ import annotations

from collections.abc import Callable

from spark_jobs.job import Tally, WindowJob, WindowResult, breaker
from spark_jobs.write.dead_letter_rows import tolerance_exceeded


def send_dead_letters(job: WindowJob, result: WindowResult, tally: Tally, examples: Callable[[], str],
                      report: Callable[[], int]) -> None:
    """The window's bad records (the tally's stages): past errors.tolerance none the window fails,
    naming ``examples()``; else ``report()`` sends them to the DLQ, and they are counted by stage.
    Then the breaker (``errors.max_dead_letters``): a poison burst applies nothing."""
    bad_by_stage: dict[str, int] = {}
    for (stage, _t, _p), counted in tally.items():
        if stage is not None:
            bad_by_stage[stage] = bad_by_stage.get(stage, 0) + counted.n
    bad_count = sum(bad_by_stage.values())
    if bad_count:
        if job.tolerance == "none":
            raise tolerance_exceeded(bad_count, examples())
        result.dead_lettered += report()
        for stage, count in bad_by_stage.items():
            key = (stage, "cdcflow.errors.RecordError")
            result.dead_letters[key] = result.dead_letters.get(key, 0) + count
    breaker(job, result)
