"""Benchmark suite `walk`: G1WalkFlat on MuJoCo CPU: env-steps/s, the non-physics share of a
step, and the fused update_state kernel against the NumPy oracle on the same states."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from bench_protocol import time_side_by_side

import fuselab_envs
from fuselab_env_core.numpy_runtime import NumpyTerms

# The NumPy twins of the task's terms are test oracles; the benchmark borrows them from there.
sys.path.insert(0, str(Path(__file__).parents[1] / "packages" / "envs" / "tests"))


def bench_walk(args) -> dict:
    import envs_term_twins  # noqa: F401  # pyright: ignore[reportMissingImports] - the twins

    n = args.walk_envs
    env = fuselab_envs.make("g1_walk_flat", num_envs=n, backend="mujoco")
    rng = np.random.default_rng(0)
    actions = rng.uniform(-0.5, 0.5, (n, env.backend.model.nu)).astype(np.float32)
    physics_s = [0.0]
    step_physics = env.backend.step

    def timed_physics(substeps):
        started = time.perf_counter()
        step_physics(substeps)
        physics_s[0] += time.perf_counter() - started

    env.backend.step = timed_physics  # type: ignore[method-assign]
    for _ in range(args.warmup):
        env.step(actions)
    steps = args.walk_steps
    totals, shares = [], []
    for _ in range(args.repeats):
        physics_s[0] = 0.0
        started = time.perf_counter()
        for _ in range(steps):
            env.step(actions)
        total = time.perf_counter() - started
        totals.append(total)
        shares.append(1.0 - physics_s[0] / total)
    env.backend.step = step_physics  # type: ignore[method-assign]

    oracle = NumpyTerms(env.terms.plan, env.terms.state)
    ms = time_side_by_side(
        {"fused": env.terms, "numpy": oracle}, args.warmup, args.measure, args.repeats
    )
    total = float(np.median(totals))
    return {
        "full_step": {
            "num_envs": n,
            "steps": steps,
            "env_steps_per_s": n * steps / total,
            "non_physics_share_pct": float(np.median(shares)) * 100.0,
            "goal_non_physics_pct": 5.0,
        },
        "update_state": {
            "fused_ms": ms["fused"],
            "numpy_ms": ms["numpy"],
            "speedup": ms["numpy"] / ms["fused"],
        },
    }


def walk_rows(results: dict) -> list[tuple[str, str, str]]:
    r = {
        **results["full_step"],
        **{f"update_state_{k}": v for k, v in results["update_state"].items()},
    }
    return [
        (
            f"G1WalkFlat full step, N={r['num_envs']}, MuJoCo CPU",
            f"{r['env_steps_per_s']:.0f} env-steps/s",
            f"non-physics {r['non_physics_share_pct']:.1f}% of the step (goal <= 5%)",
        ),
        (
            "update_state fused vs NumPy oracle",
            f"{r['update_state_fused_ms']:.2f} vs {r['update_state_numpy_ms']:.2f} ms",
            f"{r['update_state_speedup']:.1f}x (report)",
        ),
    ]
