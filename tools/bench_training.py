"""Benchmark suite `training`: PPO on G1WalkFlat (MuJoCo CPU): the collector's env-steps/s during
training against the same env stepped alone (same N, same process, interleaved), the PPO
iteration time split into collect and learn, and the iteration at the task's physics step
against 100 Hz physics (a 10 ms step, the same control rate: what `env.physics_dt=0.01
env.decimation=2` buys per iteration), interleaved.

The collector's rate counts only the time inside ``env.step`` (what the env alone is timed on),
so the ratio shows whether torch's threads (policy inference, the update) slow the physics and
the fused kernel down; the collect rate adds policy inference and bookkeeping.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

# Sets OpenMP's wait policy before torch loads (and imports no torch itself: the other suites
# run without torch in the process).
import fuselab_rl  # noqa: F401

PHYSICS_100HZ = ["env.physics_dt=0.01", "env.decimation=2"]


def bench_training(args) -> dict:
    import torch

    from fuselab_envs.registry import make_env
    from fuselab_rl.ppo import PPOTrainer
    from fuselab_rl.runner import compose_config
    from fuselab_rl.threads import ThreadBudget

    n, iterations = args.training_envs, args.training_iterations
    budget = ThreadBudget.resolve(None)
    budget.apply_torch()
    overrides = ["task=g1_walk_flat", f"num_envs={n}", f"num_threads={budget.physics}"]
    cfg = compose_config(overrides)
    steps = int(cfg.algo.num_steps_per_env)
    with tempfile.TemporaryDirectory(prefix="fuselab-bench-training-") as run_dir:
        trainer = PPOTrainer(cfg, torch.device("cpu"), budget, Path(run_dir))
        alone = make_env(cfg)
        task_physics_dt = alone.backend.model.physics_dt
        rng = np.random.default_rng(0)
        # Actions like an untrained policy's (N(0, 1)), drawn before timing.
        actions = rng.normal(0.0, 1.0, (steps, n, alone.action_dim)).astype(np.float32)

        def step_alone() -> float:
            started = time.perf_counter()
            for k in range(steps):
                alone.step(actions[k])
            return time.perf_counter() - started

        step_alone()
        trainer.iterate()  # warm-up: first-call costs of torch and the optimizer
        alone_s, metrics = [], []
        for _ in range(iterations):  # interleaved: the env alone, then one training iteration
            alone_s.append(step_alone())
            metrics.append(trainer.iterate())
        at_100hz = PPOTrainer(
            compose_config([*overrides, *PHYSICS_100HZ]),
            torch.device("cpu"),
            budget,
            Path(run_dir) / "100hz",
        )
        physics_rate = interleaved_iterations({"task": trainer, "100hz": at_100hz}, iterations)
        at_100hz.close()
        trainer.close()

    def median(key: str) -> float:
        return float(np.median([m[key] for m in metrics]))

    alone_rate = n * steps / float(np.median(alone_s))
    collector_rate = median("Perf/env_steps_per_s")
    collect_s, learn_s = median("Perf/collect_s"), median("Perf/learn_s")
    return {
        "collector_vs_env_alone": {
            "num_envs": n,
            "iterations": iterations,
            "env_alone_steps_per_s": alone_rate,
            "collector_env_steps_per_s": collector_rate,
            "ratio": collector_rate / alone_rate,
            "collect_steps_per_s": median("Perf/collect_steps_per_s"),
            "collect_ratio": median("Perf/collect_steps_per_s") / alone_rate,
            "threads": budget.total,
        },
        "iteration": {
            "num_envs": n,
            "steps_per_env": steps,
            "env_steps": n * steps,
            "total_s": collect_s + learn_s,
            "collect_s": collect_s,
            "env_s": median("Perf/env_s"),
            "learn_s": learn_s,
            "collect_share_pct": collect_s / (collect_s + learn_s) * 100.0,
        },
        "physics_rate": {
            "physics_dt": {"task": task_physics_dt, "100hz": 0.01},
            **physics_rate,
            "speedup": physics_rate["iteration_s"]["task"] / physics_rate["iteration_s"]["100hz"],
        },
    }


def interleaved_iterations(trainers: dict, iterations: int) -> dict:
    """Median iteration, collect and learn time of each trainer, their iterations alternated
    (after one warm-up iteration each)."""
    times: dict[str, list[float]] = {name: [] for name in trainers}
    metrics: dict[str, list[dict]] = {name: [] for name in trainers}
    for trainer in trainers.values():
        trainer.iterate()
    for _ in range(iterations):
        for name, trainer in trainers.items():
            started = time.perf_counter()
            metrics[name].append(trainer.iterate())
            times[name].append(time.perf_counter() - started)

    def median(name: str, key: str) -> float:
        return float(np.median([m[key] for m in metrics[name]]))

    return {
        "iteration_s": {name: float(np.median(t)) for name, t in times.items()},
        "collect_s": {name: median(name, "Perf/collect_s") for name in trainers},
        "learn_s": {name: median(name, "Perf/learn_s") for name in trainers},
    }


def training_rows(results: dict) -> list[tuple[str, str, str]]:
    c, it = results["collector_vs_env_alone"], results["iteration"]
    return [
        (
            f"PPO collector vs env alone, G1WalkFlat N={c['num_envs']}",
            f"{c['collector_env_steps_per_s']:.0f} vs {c['env_alone_steps_per_s']:.0f} env-steps/s",
            f"{c['ratio']:.2f}x (with policy inference: {c['collect_steps_per_s']:.0f}/s, "
            f"{c['collect_ratio']:.2f}x)",
        ),
        (
            f"PPO iteration, N={it['num_envs']} x {it['steps_per_env']} steps",
            f"{it['total_s']:.2f} s: collect {it['collect_s']:.2f} s, learn {it['learn_s']:.2f} s",
            f"collect {it['collect_share_pct']:.0f}% of the iteration ({c['threads']} threads)",
        ),
        physics_rate_row(results["physics_rate"]),
    ]


def physics_rate_row(r: dict) -> tuple[str, str, str]:
    task_ms, coarse_ms = (r["physics_dt"][k] * 1e3 for k in ("task", "100hz"))
    it, collect = r["iteration_s"], r["collect_s"]
    return (
        f"PPO iteration, physics step {task_ms:g} ms vs {coarse_ms:g} ms (interleaved)",
        f"{it['task']:.2f} s vs {it['100hz']:.2f} s (collect {collect['task']:.2f} vs "
        f"{collect['100hz']:.2f} s)",
        f"{r['speedup']:.2f}x iterations per minute at {coarse_ms:g} ms",
    )
