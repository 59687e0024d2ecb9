"""The GPU path, measured in one script: G1WalkFlat on MuJoCo Warp with a CUDA learner.

1. The full env (physics, host copies, fused kernels, the Python rest) at several N: env-steps/s
   and where a step's time goes (each stage timed to the device's completion).
2. ``fuselab-train task=g1_walk_flat backend=mjwarp device=cuda`` for PPO, then FastSAC, each
   for a fixed wall-clock budget, checkpoints every few iterations; every checkpoint is then
   judged by fuselab-eval (MuJoCo CPU, 256 envs) and the minutes and env steps to the walk goals
   come out of tools/learning_curves.py's rule.

It is sized to fit 10 minutes on one lent GPU machine (the default budgets); ``--quick`` runs the
same stages on Warp's CPU device with a few envs and iterations, to check the script where no
GPU is lent (its figures mean nothing):

    python tools/gpu_walk.py --out gpu_results           # a CUDA machine, ~9 minutes
    python tools/gpu_walk.py --quick --out /tmp/gpu      # anywhere: correctness only
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TOOLS = Path(__file__).resolve().parent


def env_throughput(sizes: list[int], steps: int, device: str) -> list[dict]:
    """Env-steps/s and stage shares of the full G1WalkFlat step on MuJoCo Warp, per N."""
    import warp as wp
    from bench_walk import time_full_steps

    import fuselab_envs

    rows = []
    for n in sizes:
        env = fuselab_envs.make("g1_walk_flat", num_envs=n, backend="mjwarp")
        step = env.backend.step

        def synchronized(substeps: int, _step=step) -> None:  # the device's time in "physics"
            _step(substeps)
            wp.synchronize_device(device)

        env.backend.step = synchronized
        actions = np.random.default_rng(0).uniform(-0.5, 0.5, (n, env.action_dim))
        actions = actions.astype(np.float32)
        for _ in range(5):
            env.step(actions)
        result = time_full_steps(env, actions, steps, repeats=2)
        rows.append(
            {"num_envs": n, **result["full_step"], "stage_share_pct": result["stage_share_pct"]}
        )
        print(f"N={n}: {rows[-1]['env_steps_per_s']:.0f} env-steps/s, {result['stage_share_pct']}")
        env.close()
    return rows


def train(out: Path, algo: str, minutes: float, overrides: list[str]) -> Path:
    """fuselab-train for ``minutes`` of wall clock (then SIGINT: the last checkpoint is saved)."""
    run_dir = out / algo
    command = [
        "fuselab-train",
        "task=g1_walk_flat",
        f"algo={algo}",
        "backend=mjwarp",
        f"run_dir={run_dir}",
        "progress=false",
        "max_iterations=100000",
        *overrides,
    ]
    started = time.perf_counter()
    process = subprocess.Popen(command, start_new_session=True)
    try:
        process.wait(timeout=minutes * 60.0)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)
        process.wait()
    print(f"{algo}: trained {(time.perf_counter() - started) / 60:.1f} min in {run_dir}")
    return run_dir


def judge(run_dir: Path, num_envs: int) -> dict:
    from learning_curves import curves, first_at_goal

    options = {"num_envs": num_envs, "events": "nominal", "push": None}
    reports = curves(run_dir, options, every=1)
    return {"first_at_goal": first_at_goal(reports), "last": reports[-1]["metrics"]["overall"]}


def main() -> int:
    sys.path.insert(0, str(TOOLS))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="Warp's CPU device, a few envs")
    parser.add_argument("--ppo-minutes", type=float, default=4.0)
    parser.add_argument("--fastsac-minutes", type=float, default=2.5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import warp as wp

    wp.init()
    cuda = wp.is_cuda_available()
    if not cuda and not args.quick:
        sys.stderr.write("gpu_walk: no CUDA device; run with --quick to check the script here\n")
        return 2
    device = "cuda:0" if cuda and not args.quick else "cpu"
    quick = args.quick
    sizes = [16] if quick else [4096, 8192, 16384]
    report: dict = {"device": device, "quick": quick}

    def save() -> None:  # after every stage: a run stopped at the machine's limit keeps its figures
        (args.out / "gpu_walk.json").write_text(json.dumps(report, indent=2) + "\n")

    report["env"] = env_throughput(sizes, steps=3 if quick else 50, device=device)
    save()
    learner = ["device=cpu", "num_envs=16", "save_interval=1"] if quick else ["device=cuda"]
    ppo = ["num_envs=32", "save_interval=1"] if quick else ["num_envs=4096", "save_interval=20"]
    fastsac = ["num_envs=16", "save_interval=1"] if quick else ["num_envs=4096", "save_interval=50"]
    minutes = (0.7, 0.7) if quick else (args.ppo_minutes, args.fastsac_minutes)
    eval_envs = 16 if quick else 256
    runs = {
        "ppo": train(args.out, "ppo", minutes[0], [*learner[:1], *ppo]),
        "fastsac": train(args.out, "fastsac", minutes[1], [*learner[:1], *fastsac]),
    }
    for algo, run_dir in runs.items():
        report[algo] = judge(run_dir, eval_envs)
        save()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
