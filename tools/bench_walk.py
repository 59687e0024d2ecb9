"""Benchmark suite `walk`: G1WalkFlat on MuJoCo CPU: env-steps/s, the non-physics share of a
step, kernel passes per step, the fused kernels (score + observe, every row) against the NumPy
oracle on the same states, and what the task's events, action delay and observation history
cost a step (the randomized default against its nominal variant, side by side)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
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
        "score_observe": {
            "fused_ms": ms["fused"],
            "numpy_ms": ms["numpy"],
            "speedup": ms["numpy"] / ms["fused"],
        },
        "events": events_cost(env, "g1_walk_flat", actions, args.walk_steps // 4 or 1, args),
    }


def events_cost(env, task: str, actions: np.ndarray, steps: int, args) -> dict:
    """What the task's events (randomization, pushes, reset draws), action delay and observation
    history cost a step: ``env`` (the randomized default) and the task with ``env.randomize``
    false stepped alternately, each step's time outside the physics compared (the physics
    itself differs, the randomized robot being another robot). Memory: the per-env models."""
    nominal = fuselab_envs.make(task, ["env.randomize=false"], num_envs=env.num_envs)
    for _ in range(args.warmup):
        nominal.step(actions)
    timed = outside_physics_s({"randomized": env, "nominal": nominal}, actions, steps, args)
    nominal.close()
    outside = timed.outside_s
    return {
        "randomized_outside_physics_ms": outside["randomized"] * 1e3,
        "nominal_outside_physics_ms": outside["nominal"] * 1e3,
        "step_ms": timed.step_s * 1e3,
        "cost_pct": (outside["randomized"] - outside["nominal"]) / timed.step_s * 100.0,
        "goal_pct": 1.0,
        "per_env_model_bytes": env.backend.per_env_model_bytes(),
    }


@dataclass(frozen=True)
class Alternated:
    """Envs stepped alternately (:func:`outside_physics_s`)."""

    outside_s: dict[str, float]  # each env's time outside the physics per step (s, median)
    step_s: float  # the first env's whole step (s, median)
    step_spread_pct: float  # the first env's whole step, (slowest - fastest) / median repeat
    rows_reset: dict[str, float]  # each env's rows reset per step (mean)


def outside_physics_s(envs: dict, actions: np.ndarray, steps: int, args) -> Alternated:
    """Each env's time outside the physics per step over ``args.repeats`` repeats, the envs
    stepped alternately so a drift of the machine's speed falls on all of them; the first env's
    whole step and how much it varies between repeats (the noise a cost is read against); and
    each env's rows reset per step (how far their episodes differ)."""
    first = next(iter(envs))
    outside: dict[str, list[float]] = {name: [] for name in envs}
    resets: dict[str, list[float]] = {name: [] for name in envs}
    totals = []
    for _ in range(args.repeats):
        for name, stepped in envs.items():
            timed = time_full_steps(stepped, actions, steps, 1)
            step_s = 1.0 / timed["full_step"]["env_steps_per_s"] * stepped.num_envs
            outside[name].append(step_s * timed["full_step"]["non_physics_share_pct"] / 100.0)
            resets[name].append(timed["kernel_passes_per_step"]["done_rows"])
            if name == first:
                totals.append(step_s)
    median_step = float(np.median(totals))
    return Alternated(
        outside_s={name: float(np.median(times)) for name, times in outside.items()},
        step_s=median_step,
        step_spread_pct=(max(totals) - min(totals)) / median_step * 100.0,
        rows_reset={name: float(np.mean(counts)) for name, counts in resets.items()},
    )


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
        **{f"score_observe_{k}": v for k, v in results["score_observe"].items()},
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
            f"{r['score_observe_fused_ms']:.2f} vs {r['score_observe_numpy_ms']:.2f} ms",
            f"{r['score_observe_speedup']:.1f}x (report)",
        ),
        events_row(results["events"]),
    ]


def events_row(e: dict) -> tuple[str, str, str]:
    memory = e["per_env_model_bytes"] / 2**20
    return (
        "events, action delay, history vs none (outside the physics)",
        f"{e['randomized_outside_physics_ms']:.2f} vs {e['nominal_outside_physics_ms']:.2f} ms "
        f"of a {e['step_ms']:.0f} ms step",
        f"{e['cost_pct']:+.2f}% (goal <= 1%); per-env models {memory:.0f} MiB",
    )


def passes_row(p: dict) -> tuple[str, str, str]:
    return (
        "fused kernel passes per step",
        f"score {p['score']:.2f}, observe all rows {p['observe_all_rows']:.2f}",
        f"+ terminal observe of {p['done_rows']:.1f} done rows in {p['observe_done_rows']:.2f}"
        " (goal: 2 full passes)",
    )
