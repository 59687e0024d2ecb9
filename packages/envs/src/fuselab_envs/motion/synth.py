"""A procedural G1 clip: squat, step in place and swing the arms, feet on the floor.

Every motion is a sinusoid under a smooth (sin^2) window that is zero at both ends, so the clip
starts and ends at rest in the default standing pose (``DEFAULT_JOINT_POS``). The pelvis stays
upright above the origin; its height is set per frame so that the lowest foot point touches the
floor. Deterministic: the same duration and rate give the same clip. The embedded default clip
``data/g1_synth.npz`` is ``synth_clip()``.
"""

from __future__ import annotations

import logging
import time

import mujoco
import numpy as np

from fuselab_env_core.backend import check_positive_float
from fuselab_env_core.timing import elapsed_ms
from fuselab_envs.g1 import DEFAULT_JOINT_POS
from fuselab_envs.motion.clip import FRAME_RATE, MIN_FRAMES, MotionClip
from fuselab_envs.motion.convert import (
    clip_from_trajectory,
    forward_kinematics,
    load_model,
    lowest_foot_points,
)
from fuselab_sim_backends.model import model_facts

log = logging.getLogger(__name__)

DEFAULT_DURATION_S = 10.0
DEFAULT_FPS = 50.0

SQUAT_DEPTH_RAD = 0.35  # hip pitch at the bottom of a squat (knee twice that, ankle as the hip)
SQUAT_PERIOD_S = 2.5
STEP_LIFT_RAD = 0.3  # hip pitch of the lifted leg at the top of a step
STEP_PERIOD_S = 1.2  # one left and one right step
ARM_SWING_RAD = 0.35
WAIST_YAW_RAD = 0.2
WAIST_PERIOD_S = 4.0


def _window(t: np.ndarray, start_s: float, end_s: float) -> np.ndarray:
    """sin^2 bump on [start_s, end_s], zero (with zero slope) outside."""
    phase = np.clip((t - start_s) / (end_s - start_s), 0.0, 1.0)
    return np.sin(np.pi * phase) ** 2


def _bend_leg(joint_pos: np.ndarray, column: dict[str, int], side: str, amount: np.ndarray) -> None:
    """Fold a leg by ``amount``: hip pitch -a, knee +2a, ankle pitch -a keeps the sole level."""
    joint_pos[:, column[f"{side}_hip_pitch_joint"]] -= amount
    joint_pos[:, column[f"{side}_knee_joint"]] += 2.0 * amount
    joint_pos[:, column[f"{side}_ankle_pitch_joint"]] -= amount


def synth_joint_pos(
    joint_names: tuple[str, ...], duration_s: float, fps: float
) -> tuple[np.ndarray, np.ndarray]:
    """Frame times (T,) and joint angles (T, J) of the procedural motion."""
    t = np.arange(int(round(duration_s * fps)) + 1, dtype=np.float64) / fps
    column = {name: j for j, name in enumerate(joint_names)}
    joint_pos = np.tile([DEFAULT_JOINT_POS[name] for name in joint_names], (t.size, 1))

    whole = _window(t, 0.0, duration_s)
    squat = _window(t, 0.0, 0.5 * duration_s)  # first half
    steps = _window(t, 0.4 * duration_s, duration_s)  # second half, overlapping a little

    depth = SQUAT_DEPTH_RAD * squat * np.sin(np.pi * t / SQUAT_PERIOD_S) ** 2
    for side in ("left", "right"):
        _bend_leg(joint_pos, column, side, depth)
    gait = np.sin(2.0 * np.pi * t / STEP_PERIOD_S)
    _bend_leg(joint_pos, column, "left", STEP_LIFT_RAD * steps * np.maximum(gait, 0.0) ** 2)
    _bend_leg(joint_pos, column, "right", STEP_LIFT_RAD * steps * np.maximum(-gait, 0.0) ** 2)

    # Arms swing against the legs, elbows bend on the forward swing.
    swing = ARM_SWING_RAD * whole * gait
    joint_pos[:, column["left_shoulder_pitch_joint"]] += swing
    joint_pos[:, column["right_shoulder_pitch_joint"]] -= swing
    joint_pos[:, column["left_elbow_joint"]] += 0.5 * np.maximum(-swing, 0.0)
    joint_pos[:, column["right_elbow_joint"]] += 0.5 * np.maximum(swing, 0.0)
    joint_pos[:, column["waist_yaw_joint"]] += (
        WAIST_YAW_RAD * whole * np.sin(2.0 * np.pi * t / WAIST_PERIOD_S)
    )
    return t, joint_pos


def synth_clip(
    duration_s: float = DEFAULT_DURATION_S,
    fps: float = DEFAULT_FPS,
    *,
    model: mujoco.MjModel | None = None,
) -> MotionClip:
    """The procedural clip on ``model`` (the project's G1 by default)."""
    started = time.perf_counter()
    check_positive_float("fps", fps, FRAME_RATE)
    if not (np.isfinite(duration_s) and duration_s * fps >= MIN_FRAMES - 1):
        raise ValueError(
            f"duration_s: expected at least {MIN_FRAMES} frames' worth ({1.0 / fps} s), "
            f"got {duration_s}"
        )
    model = load_model() if model is None else model
    facts = model_facts(model)
    _, joint_pos = synth_joint_pos(facts.joint_names, duration_s, fps)
    num_frames = joint_pos.shape[0]
    root_quat = np.tile([1.0, 0.0, 0.0, 0.0], (num_frames, 1))
    root_pos = np.zeros((num_frames, 3))

    # Heights with the pelvis at z = 0 first; then lift the pelvis so the lowest foot touches.
    body_pos, body_quat = forward_kinematics(model, root_pos, root_quat, joint_pos, progress=False)
    feet = lowest_foot_points(model, facts.body_names[1:], body_pos, body_quat)
    root_pos[:, 2] = -feet.min(axis=1)

    clip = clip_from_trajectory(
        model,
        fps=fps,
        root_pos=root_pos,
        root_quat=root_quat,
        joint_pos=joint_pos,
        source=f"synth({duration_s:g} s at {fps:g} fps)",
        progress=False,
    )
    log.info(
        "synth clip: %d frames at %g fps (%.2f s): %.1f ms",
        clip.num_frames,
        fps,
        clip.duration_s,
        elapsed_ms(started),
    )
    return clip
