"""Benchmark suite `fastsac`: pipeline efficiency of asynchronous FastSAC on MuJoCo CPU.

For each (task, N): the collector's env-steps/s while the learner trains in parallel, divided
by the same env stepped alone in this process with the same threads the collector gets (the
thread split FastSAC chooses for this machine), interleaved: four repeats of (env alone, env
beside a busy torch process, training window); medians of per-repeat ratios. Ratios:

* ``pipeline_efficiency``: the collector's wall-clock rate (policy inference, copies into the
  ring and any wait on a full ring included) over the env alone: what async collection
  delivers of what the env could do;
* ``env_efficiency``: the rate inside ``env.step`` only, over the env alone: how much the
  learner, running at the same time on the other cores, slows the physics and fused kernel;
* ``contention_ceiling``: the env beside a plain busy torch process, over the env alone: what
  any second busy process costs on this machine, the bound for the two ratios above.

    uv run python tools/bench_fastsac.py [--envs g1_walk_flat:256 g1_walk_flat:1024 cartpole:64]
                                         [--seconds 20] [--json PATH]

``bench_fastsac(args)`` returns the results dict and ``fastsac_rows`` the table rows, in the
shape of tools/bench.py's suites (``args.fastsac_envs``, ``args.fastsac_seconds``).
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import numpy as np

log = logging.getLogger("bench.fastsac")

DEFAULT_ENVS = ("g1_walk_flat:256", "g1_walk_flat:1024", "cartpole:64")


def bench_fastsac(args) -> dict:
    # fuselab_rl sets OpenMP's wait policy before torch loads: imported here, first.
    import fuselab_rl  # noqa: F401
    from fuselab_rl.threads import ThreadBudget

    budget = ThreadBudget.resolve(None)
    collector_threads, learner_threads = budget.split("cpu", None)
    seconds = float(getattr(args, "fastsac_seconds", 20.0))
    results: dict = {}
    for item in getattr(args, "fastsac_envs", DEFAULT_ENVS):
        task, n = item.split(":")
        key = f"{task}_n{n}"
        results[key] = _measure(task, int(n), budget, collector_threads, seconds)
        results[key] |= {"collector_threads": collector_threads, "learner_threads": learner_threads}
        log.info("fastsac %s: %s", key, results[key])
    return results


def _measure(task: str, n: int, budget, collector_threads: int, seconds: float) -> dict:
    """Interleaved repeats of: the env alone, the env beside a busy neighbour process, and a
    training window. Between windows the learner stops draining the ring, so the collector
    soon blocks on it (polling, nearly idle) while the env alone is timed."""
    import multiprocessing as mp

    import torch

    from fuselab_envs.registry import make_env
    from fuselab_rl.fastsac import FastSACTrainer
    from fuselab_rl.runner import compose_config

    cfg = compose_config(
        [
            f"task={task}",
            "algo=fastsac",
            f"num_envs={n}",
            f"num_threads={collector_threads}",
            "algo.steps_per_iteration=1",  # short iterations: many samples in each window
        ]
    )
    alone = make_env(cfg)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (32, n, alone.action_dim)).astype(np.float32)

    def env_alone_rate(min_s: float = 2.0) -> float:
        steps, started = 0, time.perf_counter()
        while time.perf_counter() - started < min_s:
            alone.step(actions[steps % len(actions)])
            steps += 1
        return steps * n / (time.perf_counter() - started)

    torch.set_num_threads(budget.torch)
    env_alone_rate(0.5)  # warm-up
    context = mp.get_context("spawn")
    go, stop = context.Event(), context.Event()
    neighbour_threads = max(1, budget.total - collector_threads)
    neighbour = context.Process(target=_busy_loop, args=(neighbour_threads, go, stop), daemon=True)
    neighbour.start()
    repeats = 4
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="fuselab-bench-fastsac-") as run_dir:
        trainer = FastSACTrainer(cfg, torch.device("cpu"), budget, Path(run_dir))
        try:
            started = time.perf_counter()
            while trainer.env_steps < 2 * trainer.cfg.learning_starts:  # past random actions
                trainer.iterate()
            warmup_s = time.perf_counter() - started
            sizes = {  # what the learner was sized to for this device (choose_learner_sizes)
                "batch_size": trainer.cfg.batch_size,
                "actor_hidden_dims": list(trainer.cfg.actor_hidden_dims),
                "critic_hidden_dims": list(trainer.cfg.critic_hidden_dims),
            }
            for _ in range(repeats):
                row = {"alone": env_alone_rate()}
                go.set()
                time.sleep(0.5)
                row["neighbour"] = env_alone_rate()
                go.clear()
                row |= _training_window(trainer, n, seconds / repeats)
                rows.append(row)
        finally:
            trainer.close()
            stop.set()
            neighbour.join(5)
            if neighbour.is_alive():
                neighbour.kill()

    def median(key: str) -> float:
        return float(np.median([row[key] for row in rows]))

    def median_ratio(top: str, bottom: str) -> float:
        return float(np.median([row[top] / row[bottom] for row in rows]))

    return {
        "task": task,
        "num_envs": n,
        "repeats": repeats,
        "window_s": seconds / repeats,
        "warmup_s": warmup_s,
        "env_alone_steps_per_s": median("alone"),
        # the env alone while a plain torch loop keeps the learner's threads busy: what any
        # second busy process leaves on this machine (shared caches and memory, other users)
        "env_with_busy_neighbour_steps_per_s": median("neighbour"),
        "contention_ceiling": median_ratio("neighbour", "alone"),
        "collector_steps_per_s": median("collector"),
        "collector_env_step_steps_per_s": median("collector_env"),
        "pipeline_efficiency": median_ratio("collector", "alone"),
        "env_efficiency": median_ratio("collector_env", "alone"),
        "pipeline_vs_ceiling": median_ratio("collector", "neighbour"),
        "collector_blocked_s": median("blocked_s"),
        "learner_updates_per_s": median("updates_per_s"),
        **sizes,
        "updates_per_env_step": median("updates_per_env_step"),
        "policy_lag_updates": median("policy_lag_updates"),
    }


def _training_window(trainer, n: int, seconds: float) -> dict:
    """Rates over one window; its first iteration (records from before the pause, and the
    collector's wait on the full ring) is left out."""
    trainer.iterate()
    updates, metrics = trainer.learner.updates, []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds or len(metrics) < 2:
        metrics.append(trainer.iterate())
    window_s = time.perf_counter() - started
    updates = trainer.learner.updates - updates
    sampled = [m for m in metrics if "Perf/collect_steps_per_s" in m]
    env_steps = sum(m["Perf/env_steps"] for m in sampled)
    wall_s = sum(m["Perf/env_steps"] / m["Perf/collect_steps_per_s"] for m in sampled)
    return {
        "collector": env_steps / wall_s,
        "collector_env": env_steps / sum(m["Perf/env_s"] for m in sampled),
        "blocked_s": sum(m["Perf/collect_blocked_s"] for m in sampled),
        "updates_per_s": updates / window_s,
        "updates_per_env_step": updates / max(env_steps / n, 1e-9),
        "policy_lag_updates": float(np.mean([m["Perf/policy_lag_updates"] for m in sampled])),
    }


def _busy_loop(threads: int, go, stop) -> None:
    import torch

    torch.set_num_threads(threads)
    x, w = torch.randn(4096, 512), torch.randn(512, 512)
    while not stop.is_set():
        if go.wait(0.1):
            (x @ w).relu_()


def fastsac_rows(results: dict) -> list[tuple[str, str, str]]:
    rows = []
    for r in results.values():
        rows.append(
            (
                f"async FastSAC collector vs env alone, {r['task']} N={r['num_envs']}",
                f"{r['collector_steps_per_s']:.0f} vs {r['env_alone_steps_per_s']:.0f} env-steps/s",
                f"{r['pipeline_efficiency']:.2f}x (env.step only {r['env_efficiency']:.2f}x; "
                f"any busy neighbour {r['contention_ceiling']:.2f}x; "
                f"{r['collector_threads']}+{r['learner_threads']} threads, learner "
                f"{r['learner_updates_per_s']:.1f} updates/s at batch {r['batch_size']}, actor "
                f"{r['actor_hidden_dims']}, critics {r['critic_hidden_dims']})",
            )
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS), help="task:N items")
    parser.add_argument("--seconds", type=float, default=20.0, help="training window per item")
    parser.add_argument("--json", type=Path, help="write the results here")
    cli = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = argparse.Namespace(fastsac_envs=cli.envs, fastsac_seconds=cli.seconds)
    from bench import print_table  # the suites' one table format (bench imports this module)

    results = bench_fastsac(args)
    print_table("fastsac", fastsac_rows(results))
    if cli.json:
        cli.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
