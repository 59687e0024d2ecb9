"""Benchmark suite `distributed`: PPO on G1WalkFlat as 2 ranks x 1 core (torchrun, gloo) against
1 rank x 2 cores, with the same total envs and the same iterations, one run after the other.

Each side is a real ``fuselab-train`` process tree; the figures come from its metrics.jsonl
(rank 0's; every rank steps the same number of envs): env steps per second of all ranks, the
iteration time, and the time the update spends averaging gradients and the KL over the ranks
(``Perf/allreduce_s``) as a share of the update.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SCRIPTS = Path(sys.executable).parent


def _train(run_dir: Path, ranks: int, envs_per_rank: int, iterations: int) -> list[dict]:
    overrides = [
        "task=g1_walk_flat",
        f"num_envs={envs_per_rank}",
        f"max_iterations={iterations}",
        "progress=false",
        "plot=false",
        "export_onnx=false",
        f"save_interval={iterations}",
        f"run_dir={run_dir}",
    ]
    train = [str(SCRIPTS / "fuselab-train"), *overrides]
    if ranks > 1:
        launcher = [str(SCRIPTS / "torchrun"), "--standalone", f"--nproc-per-node={ranks}"]
        train = [*launcher, "--no-python", *train]
    subprocess.run(train, check=True, capture_output=True, text=True, timeout=1800)
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def bench_distributed(args) -> dict:
    total, iterations = args.training_envs, args.training_iterations + 1  # the first is warm-up
    results = {}
    with tempfile.TemporaryDirectory(prefix="fuselab-bench-distributed-") as workdir:
        for name, ranks in (("one_rank_two_cores", 1), ("two_ranks_one_core", 2)):
            records = _train(Path(workdir) / name, ranks, total // ranks, iterations)[1:]

            def median(key: str, rows: list[dict] = records) -> float:
                return float(np.median([r[key] for r in rows]))

            learn_s = median("Perf/learn_s")
            results[name] = {
                "ranks": ranks,
                "total_envs": total,
                "iterations": len(records),
                "env_steps_per_s": ranks
                * median("Perf/env_steps")
                / (median("Perf/collect_s") + learn_s),
                "iteration_s": median("Perf/collect_s") + learn_s,
                "collect_s": median("Perf/collect_s"),
                "learn_s": learn_s,
                "allreduce_s": median("Perf/allreduce_s"),
                "allreduce_share_pct": median("Perf/allreduce_s") / learn_s * 100.0,
            }
    return results


def distributed_rows(results: dict) -> list[tuple[str, str, str]]:
    one, two = results["one_rank_two_cores"], results["two_ranks_one_core"]
    return [
        (
            f"PPO G1WalkFlat, {one['total_envs']} envs: 2 ranks x 1 core vs 1 rank x 2 cores",
            f"{two['env_steps_per_s']:.0f} vs {one['env_steps_per_s']:.0f} env-steps/s",
            f"{two['env_steps_per_s'] / one['env_steps_per_s']:.2f}x; iteration "
            f"{two['iteration_s']:.2f} s vs {one['iteration_s']:.2f} s",
        ),
        (
            "all-reduce per update (2 ranks, gloo)",
            f"{two['allreduce_s'] * 1e3:.0f} ms of a {two['learn_s']:.2f} s update",
            f"{two['allreduce_share_pct']:.1f}% of the update",
        ),
    ]
