"""Timing protocol shared by the benchmark suites of tools/bench.py."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def time_side_by_side(
    calls: dict[str, Callable[[], None]], warmup: int, measure: int, repeats: int
) -> dict[str, float]:
    """Median ms per call of each callable, calls interleaved so that they share the noise.

    Each repeat alternates the callables ``measure`` times and takes each one's median; the
    result is the median over repeats. On a shared machine this keeps ratios stable.
    """
    for _ in range(warmup):
        for call in calls.values():
            call()
    per_repeat: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        samples: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(measure):
            for name, call in calls.items():
                started = time.perf_counter()
                call()
                samples[name].append((time.perf_counter() - started) * 1e3)
        for name, values in samples.items():
            per_repeat[name].append(statistics.median(values))
    return {name: statistics.median(values) for name, values in per_repeat.items()}
