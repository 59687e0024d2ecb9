"""Timing protocol shared by the benchmark suites of tools/bench.py."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
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


def cold_then_warm(script: str, command: str) -> tuple[dict, dict]:
    """``python script command`` twice, each in a fresh process, sharing a new kernel cache:
    the first start compiles (cold), the second loads from disk (warm). The child prints its
    report as JSON on its last line; ``process_ms`` adds the whole process's wall time."""
    with tempfile.TemporaryDirectory(prefix="fuselab-bench-") as cache:
        env = dict(os.environ, FUSELAB_CACHE_DIR=cache)
        env.pop("NUMBA_CACHE_DIR", None)
        cold, warm = (_run_fresh([sys.executable, script, command], env) for _ in range(2))
    return cold, warm


def _run_fresh(argv: list[str], env: dict[str, str]) -> dict:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv[1:])} failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["process_ms"] = (time.perf_counter() - started) * 1e3
    return report
