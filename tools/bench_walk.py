"""Benchmark suite `walk`: G1WalkFlat on MuJoCo CPU: env-steps/s, the non-physics share of a
step, kernel passes per step, and the fused kernels (score + observe, the `update_state` rows)
against the NumPy oracle on the same states."""

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
    actions = rng.uniform(-0.5, 0.5, (n, env.action_dim)).astype(np.float32)
    for _ in range(args.warmup):
        env.step(actions)
    full_step = time_full_steps(env, actions, args.walk_steps, args.repeats)

    oracle = NumpyTerms(env.terms.plan, env.terms.state)
    ms = time_side_by_side(
        {"fused": env.terms, "numpy": oracle}, args.warmup, args.measure, args.repeats
    )
    return {
        **full_step,
        "update_state": {
            "fused_ms": ms["fused"],
            "numpy_ms": ms["numpy"],
            "speedup": ms["numpy"] / ms["fused"],
        },
    }


def time_full_steps(env, actions, steps: int, repeats: int) -> dict:
    """Env-steps/s of ``steps`` full steps (median of ``repeats``), the non-physics share of a
    step, each stage's share (physics, body copy, fused kernels, the Python rest) and the fused
    kernel passes per step (score; observe of every row; observe of the done rows)."""
    stages = {"physics": 0.0, "body copy": 0.0, "fused score": 0.0, "fused observe": 0.0}
    passes = {"score": 0, "observe_all_rows": 0, "observe_done_rows": 0, "done_rows": 0}
    originals = _time_stages(env, stages, passes)
    totals, shares, stage_shares = [], [], []
    for _ in range(repeats):
        stages.update(dict.fromkeys(stages, 0.0))
        started = time.perf_counter()
        for _ in range(steps):
            env.step(actions)
        total = time.perf_counter() - started
        totals.append(total)
        shares.append(1.0 - stages["physics"] / total)
        other = total - sum(stages.values())
        stage_shares.append(
            {**{k: v / total for k, v in stages.items()}, "rest (Python)": other / total}
        )
    for target, name in originals:
        delattr(target, name)  # the instance wrapper; the class's method shows again
    return {
        "full_step": {
            "num_envs": env.num_envs,
            "steps": steps,
            "env_steps_per_s": env.num_envs * steps / float(np.median(totals)),
            "non_physics_share_pct": float(np.median(shares)) * 100.0,
            "goal_non_physics_pct": 2.0,
        },
        "kernel_passes_per_step": {k: v / (steps * repeats) for k, v in passes.items()},
        "stage_share_pct": {
            stage: float(np.median([r[stage] for r in stage_shares])) * 100.0
            for stage in stage_shares[0]
        },
    }


def _time_stages(env, stages: dict, passes: dict) -> list:
    """Wrap the step's stages with timers (instance attributes over the methods) and count the
    kernel passes; returns what to remove."""
    targets = [
        (env.backend, "step", "physics"),
        (env.robot, "update", "body copy"),
        (env.terms, "score", "fused score"),
        (env.terms, "observe", "fused observe"),
    ]
    for target, name, stage in targets:
        original = getattr(target, name)

        def timed(*a, _original=original, _stage=stage, _name=name):
            started = time.perf_counter()
            _original(*a)
            stages[_stage] += time.perf_counter() - started
            if _name == "score":
                passes["score"] += 1
            elif _name == "observe" and (not a or a[0] is None):
                passes["observe_all_rows"] += 1
            elif _name == "observe":
                passes["observe_done_rows"] += 1
                passes["done_rows"] += len(a[0])

        setattr(target, name, timed)
    return [(target, name) for target, name, _ in targets]


def walk_rows(results: dict) -> list[tuple[str, str, str]]:
    r = {
        **results["full_step"],
        **{f"update_state_{k}": v for k, v in results["update_state"].items()},
    }
    return [
        (
            f"G1WalkFlat full step, N={r['num_envs']}, MuJoCo CPU",
            f"{r['env_steps_per_s']:.0f} env-steps/s",
            f"non-physics {r['non_physics_share_pct']:.1f}% of the step (goal <= 2%)",
        ),
        passes_row(results["kernel_passes_per_step"]),
        (
            "score + observe fused vs NumPy oracle",
            f"{r['update_state_fused_ms']:.2f} vs {r['update_state_numpy_ms']:.2f} ms",
            f"{r['update_state_speedup']:.1f}x (report)",
        ),
    ]


def passes_row(p: dict) -> tuple[str, str, str]:
    return (
        "fused kernel passes per step",
        f"score {p['score']:.2f}, observe all rows {p['observe_all_rows']:.2f}",
        f"+ terminal observe of {p['done_rows']:.1f} done rows in {p['observe_done_rows']:.2f}"
        " (goal: 2 full passes)",
    )
