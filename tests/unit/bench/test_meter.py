"""CPU over a path's own interval (bench/meter.py): the same counting for cdcflow and every baseline,
start-up left out; each process's ticks interpolated between the samples around the interval's ends."""

from __future__ import annotations

import os
import time

from bench.meter import HARNESS_TOTAL, PeakRss, timed

HZ = os.sysconf("SC_CLK_TCK")


def test_cpu_counts_only_the_interval_interpolating_between_samples() -> None:
    meter = PeakRss()
    # a driver busy all along; a subprocess that starts at t=10 (its start-up: 10-12) and exits after 20
    meter._series = {1: ("harness: driver", [0.0, 10.0, 20.0, 30.0], [0, 10 * HZ, 20 * HZ, 30 * HZ]),
                     2: ("harness: driver and subprocesses", [8.0, 10.0, 20.0], [0, 2 * HZ, 12 * HZ]),
                     3: ("mysql", [0.0, 30.0], [0, 6 * HZ])}
    meter._first_sample, meter._last_sample = 0.0, 30.0
    cpu = meter.cpu(12.0, 22.0)  # the measured interval: after the subprocess's start-up
    assert cpu["harness: driver"] == 10.0
    assert cpu["harness: driver and subprocesses"] == 8.0  # 4 s at 12 (between 2 and 12), 12 s from its exit on
    assert cpu["mysql"] == 2.0 and cpu[HARNESS_TOTAL] == 18.0 and cpu["wall"] == 10.0 and cpu["cores busy"] == 2.0
    whole = meter.cpu()
    assert whole["harness: driver and subprocesses"] == 12.0 and whole[HARNESS_TOTAL] == 42.0


def test_sampling_a_busy_loop_in_this_process() -> None:
    with PeakRss() as meter, timed() as t:
        end = time.perf_counter() + 0.6
        while time.perf_counter() < end:
            pass
    cpu = meter.cpu(t["start"], t["end"])
    assert 0.05 <= cpu["harness: driver"] <= cpu["wall"] + 0.2 and cpu["wall"] >= 0.6  # a loaded machine: some of it
    assert meter.mib()["total"] > 0
