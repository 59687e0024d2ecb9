"""fuselab benchmarks: every comparison is a ratio measured side by side in one process.

    uv run python tools/bench.py [SUITE ...] [--json PATH] [--report DIR] [--quick]

Suites: core (env_core: fused kernel vs NumPy runtime on the tracking-shaped synthetic task of
env_core's tests, tuning rebuilds, disk-cache start-up, thread scaling), backends (body copy,
physics threads and overhead, MuJoCo Warp, step time vs N), walk and tracking (the G1 tasks:
full step, non-physics share, fused vs NumPy score and observe), training (PPO collector vs the
env alone, the task's physics step vs 100 Hz), fastsac (asynchronous pipeline efficiency) and
distributed (PPO as 2 torchrun ranks x 1 core vs 1 rank x 2 cores, one run after the other:
the only suite not in one process).
Protocol: warmup 10, then 3 repeats of 100 interleaved calls; median per repeat, median of
repeats. Prints a table and writes JSON (schema checked before writing).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path

import numba
import numpy as np
from bench_backends import backends_rows, bench_backends
from bench_distributed import bench_distributed, distributed_rows
from bench_fastsac import bench_fastsac, fastsac_rows
from bench_protocol import cold_then_warm, time_side_by_side
from bench_tracking import bench_tracking, tracking_rows
from bench_training import bench_training, training_rows
from bench_walk import bench_walk, walk_rows

from fuselab_env_core.numpy_runtime import NumpyTerms
from fuselab_env_core.runtime import FusedTerms

log = logging.getLogger("bench")

SCHEMA_VERSION = 1
SYNTHETIC_TASK = Path(__file__).parents[1] / "packages/env_core/tests/env_core_synthetic_task.py"


def _load_synthetic_task():
    """env_core's test helper: a task shaped like G1 motion tracking on random state (its terms
    register on import, once)."""
    name = SYNTHETIC_TASK.stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SYNTHETIC_TASK)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


# -- core ---------------------------------------------------------------------------------------


def bench_core(args) -> dict:
    synthetic = _load_synthetic_task()
    n, warmup, measure, repeats = args.num_envs, args.warmup, args.measure, args.repeats
    rng = np.random.default_rng(0)
    state = synthetic.random_state(n, rng)
    results: dict = {}

    fused = FusedTerms.build(synthetic.task_terms(), state, dt=0.02)
    cores = fused.num_threads  # the default budget: every core Numba may use
    one_thread = FusedTerms.build(synthetic.task_terms(), state, dt=0.02, num_threads=1)
    oracle = NumpyTerms(fused.plan, state)
    ms = time_side_by_side(
        {"fused": fused, "numpy": oracle, "one_thread": one_thread}, warmup, measure, repeats
    )
    fused_ms, numpy_ms, one_thread_ms = ms["fused"], ms["numpy"], ms["one_thread"]
    results["fused_vs_numpy"] = {
        "fused_ms": fused_ms,
        "numpy_ms": numpy_ms,
        "speedup": numpy_ms / fused_ms,
        "goal": 10.0,
    }
    results["thread_scaling"] = {
        "one_thread_ms": one_thread_ms,
        "all_cores_ms": fused_ms,
        "threads": cores,
        "threading_layer": numba.threading_layer(),
        "speedup": one_thread_ms / fused_ms,
        "goal": 1.8,
    }

    every_float = {name: 0.123 + k * 0.01 for k, name in enumerate(synthetic.DEFAULT_FLOATS)}
    started = time.perf_counter()
    tuned = FusedTerms.build(synthetic.task_terms(**every_float), state, dt=0.01)
    results["tuning_rebuild"] = {
        "build_ms": (time.perf_counter() - started) * 1e3,
        "compiles": int(tuned.report.compiled),
        "cache": tuned.report.cache,
        "same_kernel": tuned.kernels is fused.kernels,
        "goal_ms": 5.0,
    }

    results["term_groups"] = _term_groups(state, warmup, measure, repeats)
    results["startup"] = _startup_cold_vs_warm()
    return results


def _term_groups(state: dict, warmup: int, measure: int, repeats: int) -> dict:
    """Fused vs NumPy for each term group of the tracking-shaped plan (each with the preamble)."""
    full = _load_synthetic_task().task_terms()
    groups = {
        "preamble": {"preamble": full["preamble"]},
        "rewards": {"preamble": full["preamble"], "rewards": full["rewards"]},
        "terminations": {"preamble": full["preamble"], "terminations": full["terminations"]},
        "observations": {"preamble": full["preamble"], "observations": full["observations"]},
    }
    results = {}
    for name, cfg in groups.items():
        fused = FusedTerms.build(cfg, state, dt=0.02)
        ms = time_side_by_side(
            {"fused": fused, "numpy": NumpyTerms(fused.plan, state)}, warmup, measure, repeats
        )
        results[name] = {**ms, "speedup": ms["numpy"] / ms["fused"]}
    return results


def _startup_cold_vs_warm() -> dict:
    """Build the tracking-shaped plan in fresh processes: an empty cache, then a warm one."""
    cold, warm = cold_then_warm(__file__, "_build_once")
    return {
        "cold": cold,
        "warm": warm,
        "goal_warm_build_ms": 500.0,
    }


def _build_once() -> None:
    synthetic = _load_synthetic_task()
    state = synthetic.random_state(1024, np.random.default_rng(0))
    started = time.perf_counter()
    fused = FusedTerms.build(synthetic.task_terms(), state, dt=0.02)
    build_ms = (time.perf_counter() - started) * 1e3
    out = {"cache": fused.report.cache, "compiled": fused.report.compiled, "build_ms": build_ms}
    sys.stdout.write(json.dumps(out) + "\n")


def core_rows(r: dict) -> list[tuple[str, str, str]]:
    f, t, tune, st = r["fused_vs_numpy"], r["thread_scaling"], r["tuning_rebuild"], r["startup"]
    return [
        (
            "fused kernel vs NumPy runtime",
            f"{f['fused_ms']:.2f} vs {f['numpy_ms']:.2f} ms",
            f"{f['speedup']:.1f}x (goal >= 10x)",
        ),
        (
            "thread scaling (1 vs all cores)",
            f"{t['one_thread_ms']:.2f} vs {t['all_cores_ms']:.2f} ms",
            f"{t['speedup']:.2f}x on {t['threads']} ({t['threading_layer']}) (goal >= 1.8x)",
        ),
        (
            "tuning variant build",
            f"{tune['build_ms']:.2f} ms, {tune['compiles']} compiles",
            f"{tune['cache']} (goal 0 compiles, < 5 ms)",
        ),
        (
            "fresh-process build, cold cache",
            f"{st['cold']['build_ms']:.0f} ms",
            f"{st['cold']['cache']}, compiled={st['cold']['compiled']}",
        ),
        (
            "fresh-process build, warm disk cache",
            f"{st['warm']['build_ms']:.0f} ms",
            f"{st['warm']['cache']}, compiled={st['warm']['compiled']} (goal < 500 ms)",
        ),
    ]


SUITES = {
    "core": (bench_core, core_rows),
    "backends": (bench_backends, backends_rows),
    "walk": (bench_walk, walk_rows),
    "tracking": (bench_tracking, tracking_rows),
    "training": (bench_training, training_rows),
    "fastsac": (bench_fastsac, fastsac_rows),
    "distributed": (bench_distributed, distributed_rows),
}


# -- report -------------------------------------------------------------------------------------


def check_schema(report: dict) -> None:
    """The JSON every suite writes: fail loudly rather than write a report readers can't use."""
    for key, kind in (("schema", int), ("machine", dict), ("protocol", dict), ("suites", dict)):
        if not isinstance(report.get(key), kind):
            raise ValueError(f"bench report: field {key!r} must be a {kind.__name__}")
    for name, suite in report["suites"].items():
        if name not in SUITES or not isinstance(suite, dict) or not suite:
            raise ValueError(f"bench report: suite {name!r} is unknown or empty")
        for metric, values in suite.items():
            if not all(np.isfinite(list(_numbers(values)))):
                raise ValueError(f"bench report: {name}.{metric} has a non-finite number")


def _numbers(values: dict):
    """The numbers of a metric's fields, those of nested fields (per env, per clip set) too."""
    for value in values.values():
        if isinstance(value, dict):
            yield from _numbers(value)
        elif isinstance(value, (int, float)):
            yield value


def print_table(name: str, rows: list[tuple[str, str, str]]) -> None:
    width = max(len(r[0]) for r in rows)
    middle = max(len(r[1]) for r in rows)
    print(f"\n== {name} ==")
    for label, value, verdict in rows:
        print(f"{label:<{width}}  {value:<{middle}}  {verdict}")


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["_build_once"]:
        _build_once()
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "suites", nargs="*", default=list(SUITES), help=f"any of {', '.join(SUITES)}"
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--report", type=Path, help="write report.md and PNG plots to this folder")
    parser.add_argument("--num-envs", type=int, default=8192)
    parser.add_argument("--physics-envs", type=int, default=8192, help="N of physics throughput")
    parser.add_argument("--warp-envs", type=int, default=256, help="N of MuJoCo Warp throughput")
    parser.add_argument(
        "--warp-sweep",
        type=int,
        nargs="+",
        default=[8, 32, 128],
        help="N of the MuJoCo Warp step-time sweep (on a GPU: thousands)",
    )
    parser.add_argument("--walk-envs", type=int, default=8192, help="N of the walk suite")
    parser.add_argument("--walk-steps", type=int, default=100, help="env steps per walk repeat")
    parser.add_argument("--tracking-envs", type=int, default=8192, help="N of the tracking suite")
    parser.add_argument("--tracking-steps", type=int, default=100, help="steps per tracking repeat")
    parser.add_argument("--training-envs", type=int, default=1024, help="N of the training suite")
    parser.add_argument("--training-iterations", type=int, default=5, help="PPO iterations timed")
    parser.add_argument(
        "--fastsac-envs", nargs="+", default=["g1_walk_flat:1024", "cartpole:64"], help="task:N"
    )
    parser.add_argument("--fastsac-seconds", type=float, default=10.0, help="training window")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--measure", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, for CI (minutes: mostly first compiles)"
    )
    args = parser.parse_args(argv)
    for suite in args.suites:
        if suite not in SUITES:
            parser.error(f"unknown suite {suite!r}; choose from {', '.join(SUITES)}")
    args.quick = bool(args.quick)
    if args.quick:
        args.num_envs, args.warmup, args.measure, args.repeats = 512, 2, 10, 1
        args.physics_envs, args.warp_envs, args.warp_sweep = 64, 8, [4, 8]
        args.walk_envs, args.walk_steps = 64, 10
        args.tracking_envs, args.tracking_steps = 64, 10
        args.training_envs, args.training_iterations = 64, 2
        args.fastsac_envs, args.fastsac_seconds = ["cartpole:16"], 2.0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    report = {
        "schema": SCHEMA_VERSION,
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "numba": numba.__version__,
            "numpy": np.__version__,
        },
        "protocol": {
            "num_envs": args.num_envs,
            "physics_envs": args.physics_envs,
            "warp_envs": args.warp_envs,
            "warp_sweep": " ".join(map(str, args.warp_sweep)),
            "walk_envs": args.walk_envs,
            "walk_steps": args.walk_steps,
            "tracking_envs": args.tracking_envs,
            "tracking_steps": args.tracking_steps,
            "training_envs": args.training_envs,
            "training_iterations": args.training_iterations,
            "fastsac_envs": " ".join(args.fastsac_envs),
            "fastsac_seconds": args.fastsac_seconds,
            "warmup": args.warmup,
            "measure": args.measure,
            "repeats": args.repeats,
            "timing": "interleaved, median per repeat, median of repeats",
        },
        "suites": {},
    }
    for suite in args.suites:
        run, rows = SUITES[suite]
        log.info(
            "suite %s: N=%d, warmup %d, measure %d", suite, args.num_envs, args.warmup, args.measure
        )
        report["suites"][suite] = run(args)
        print_table(suite, rows(report["suites"][suite]))
    check_schema(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"\nwrote {args.json}")
    if args.report:
        from bench_report import write_report

        rows = {name: suite_rows for name, (_, suite_rows) in SUITES.items()}
        print(f"wrote {write_report(report, rows, args.report)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
