"""Benchmark suite `backends`: the fused body copy and physics throughput, on the project's G1
(position control from the standing keyframe) with the 14 bodies motion tracking follows.
"""

from __future__ import annotations

import numpy as np
from bench_protocol import time_side_by_side
from mujoco import rollout

from fuselab_env_core.entity import Entity
from fuselab_envs.g1 import DEFAULT_JOINT_POS, G1_XML_PATH, STANDING_PELVIS_HEIGHT
from fuselab_sim_backends.mujoco_cpu import MujocoBackend

TRACKED_BODIES = (
    "pelvis", "left_hip_roll_link", "left_knee_link", "left_ankle_roll_link", "right_hip_roll_link",
    "right_knee_link", "right_ankle_roll_link", "torso_link", "left_shoulder_roll_link",
    "left_elbow_link", "left_wrist_yaw_link", "right_shoulder_roll_link", "right_elbow_link",
    "right_wrist_yaw_link",
)  # fmt: skip
DECIMATION = 4


def bench_backends(args) -> dict:
    return {
        "copy_body_state_w": _copy(args),
        "mujoco_physics": _physics(args),
        "mjwarp_physics": _warp(args),
        "step_ms_vs_num_envs": _sweep(args),
    }


def _sweep(args) -> dict:
    """Control-step time of each backend over a range of N (the scaling plot of the report)."""
    from fuselab_sim_backends.mjwarp import MjWarpBackend

    sizes = {
        "mujoco": (16, 64) if args.quick else (256, 1024, 4096),
        "mjwarp": tuple(args.warp_sweep),
    }
    makers = {"mujoco": MujocoBackend, "mjwarp": MjWarpBackend}
    results: dict = {}
    for backend, ns in sizes.items():
        for n in ns:
            sim = makers[backend](G1_XML_PATH, n)
            _stand(sim)
            ms = time_side_by_side({"step": _stepper(sim)}, 1, 3, repeats=1)
            results[f"{backend}_{n}"] = {"backend": backend, "num_envs": n, "step_ms": ms["step"]}
            sim.close()
    return results


def _copy(args) -> dict:
    n = args.num_envs
    sim = MujocoBackend(G1_XML_PATH, n)
    ids = Entity(sim, TRACKED_BODIES).body_ids
    out = [np.zeros((n, len(ids), k), np.float32) for k in (3, 4, 3, 3)]

    def fused():
        sim.copy_body_state_w(ids, *out)

    def generic():
        # What a plain backend offers: four getters of every body, each returning a new float32
        # array of its own (as MotrixSim's do), then take.
        getters = (sim._body_pos, sim._body_quat, sim._body_lin_vel, sim._body_ang_vel)
        for buffer, raw in zip(out, getters, strict=True):
            buffer[:] = np.take(np.array(raw, np.float32), ids, axis=1)

    # A reference for both: one plain copy of as many bytes as the buffers hold (NumPy, one
    # thread), timed in the same interleaved loop so it sees the same caches.
    source, target = (np.ones(sum(b.size for b in out), np.float32) for _ in range(2))

    ms = time_side_by_side(
        {"fused": fused, "generic": generic, "memcpy": lambda: np.copyto(target, source)},
        args.warmup,
        args.measure,
        args.repeats,
    )
    sim.close()
    return {
        "num_envs": n,
        "bodies": len(ids),
        "fused_ms": ms["fused"],
        "generic_ms": ms["generic"],
        "memcpy_same_bytes_ms": ms["memcpy"],
        "speedup": ms["generic"] / ms["fused"],
        "goal": 30.0,
    }


def _physics(args) -> dict:
    """Env-steps/s at 1 and all threads, and the backend's cost over a bare rollout call."""
    n = args.physics_envs
    backends = {threads: MujocoBackend(G1_XML_PATH, n, num_threads=threads) for threads in (1, 2)}
    for sim in backends.values():
        _stand(sim)
    steps = max(2, args.measure // 10)
    threads = time_side_by_side(
        {
            "one_thread": lambda: backends[1].step(DECIMATION),
            "two_threads": lambda: backends[2].step(DECIMATION),
        },
        warmup=2,
        measure=steps,
        repeats=args.repeats,
    )
    # A pair of its own: each call then follows the other, so neither inherits a warmer cache.
    overhead = time_side_by_side(
        {
            "backend_step": lambda: backends[2].step(DECIMATION),
            "bare_rollout": _bare_rollout(backends[2]),
        },
        warmup=2,
        measure=steps,
        repeats=args.repeats,
    )
    for sim in backends.values():
        sim.close()
    return {
        "num_envs": n,
        "decimation": DECIMATION,
        "env_steps_per_s_1_thread": n / (threads["one_thread"] / 1e3),
        "env_steps_per_s_2_threads": n / (threads["two_threads"] / 1e3),
        "thread_speedup": threads["one_thread"] / threads["two_threads"],
        "goal_thread_speedup": 1.8,
        "bare_rollout_ms": overhead["bare_rollout"],
        "backend_step_ms": overhead["backend_step"],
        "overhead_pct": (overhead["backend_step"] / overhead["bare_rollout"] - 1.0) * 100.0,
        "goal_overhead_pct": 3.0,
    }


def _warp(args) -> dict:
    """MuJoCo Warp env-steps/s on its default device (Warp's CPU device on a machine without
    CUDA, where it is the slow backend: sized to finish in well under a minute)."""
    from fuselab_sim_backends.mjwarp import MjWarpBackend

    n = args.warp_envs
    sim = MjWarpBackend(G1_XML_PATH, n)
    _stand(sim)
    ms = time_side_by_side(
        {"step": _stepper(sim)},
        warmup=2,
        measure=max(2, args.measure // 10),
        repeats=args.repeats,
    )
    return {
        "num_envs": n,
        "device": str(sim.device),
        "decimation": DECIMATION,
        "step_ms": ms["step"],
        "env_steps_per_s": n / (ms["step"] / 1e3),
    }


def _stepper(sim):
    """One control step, timed to its end: on CUDA a MuJoCo Warp step only queues device work,
    so the call also waits for the device (as the first state read after a step does)."""
    if getattr(sim, "device", "cpu").startswith("cuda"):
        import warp as wp

        def step_and_wait():
            sim.step(DECIMATION)
            wp.synchronize_device(sim.device)

        return step_and_wait
    return lambda: sim.step(DECIMATION)


def _stand(sim) -> None:
    """All envs at the standing keyframe, position targets holding it."""
    n, facts = sim.num_envs, sim.model
    pose = np.array([DEFAULT_JOINT_POS[name] for name in facts.joint_names], np.float32)
    qpos = np.zeros((n, facts.nq), np.float32)
    qpos[:, 2], qpos[:, 3] = STANDING_PELVIS_HEIGHT, 1.0
    qpos[:, facts.joint_qpos_adr] = pose
    sim.reset_envs(np.arange(n), qpos, np.zeros((n, facts.nv), np.float32))
    sim.set_controls(np.tile(pose, (n, 1)))  # actuators follow the joint order


def _bare_rollout(sim: MujocoBackend):
    """One backend step's physics as a plain mujoco.rollout call from the backend's current
    states (read, not advanced), so both simulate the same contacts."""
    pool = rollout.Rollout(nthread=sim.num_threads)
    state = sim._state
    ctrl = np.repeat(sim._ctrl[:, None, :], DECIMATION, axis=1)
    models = [sim._physics] * sim.num_envs
    state_out = np.empty((sim.num_envs, DECIMATION, state.shape[1]))
    sensor_out = np.empty((sim.num_envs, DECIMATION, sim._physics.nsensordata))

    def step():
        pool.rollout(
            models,
            sim._datas,
            state,
            ctrl,
            skip_checks=True,
            nstep=DECIMATION,
            state=state_out,
            sensordata=sensor_out,
        )

    return step


def backends_rows(r: dict) -> list[tuple[str, str, str]]:
    c, p, w = r["copy_body_state_w"], r["mujoco_physics"], r["mjwarp_physics"]
    return [
        (
            f"copy_body_state_w ({c['bodies']} bodies, N={c['num_envs']}) fused vs generic",
            f"{c['fused_ms']:.3f} vs {c['generic_ms']:.3f} ms",
            f"{c['speedup']:.0f}x (goal >= 30x)",
        ),
        (
            "  reference: one plain copy of the same bytes (NumPy)",
            f"{c['memcpy_same_bytes_ms']:.3f} ms",
            f"fused = {c['fused_ms'] / c['memcpy_same_bytes_ms']:.1f}x a plain copy",
        ),
        (
            f"MuJoCo G1 physics, N={p['num_envs']}, decimation {p['decimation']}",
            f"{p['env_steps_per_s_1_thread']:.0f} vs {p['env_steps_per_s_2_threads']:.0f} steps/s",
            f"1 vs 2 threads: {p['thread_speedup']:.2f}x (goal >= 1.8x)",
        ),
        (
            "backend step vs bare mujoco.rollout",
            f"{p['backend_step_ms']:.1f} vs {p['bare_rollout_ms']:.1f} ms",
            f"{p['overhead_pct']:+.1f}% (goal <= 3%)",
        ),
        (
            f"MuJoCo Warp G1 physics, N={w['num_envs']}, {w['device']}",
            f"{w['env_steps_per_s']:.0f} steps/s",
            f"{w['step_ms']:.1f} ms per step of {w['decimation']} substeps (report)",
        ),
    ]
