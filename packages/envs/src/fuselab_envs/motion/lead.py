"""Lead frames: a clip blended in from the robot's rest pose and back out to it.

Motion capture starts and ends mid-motion (the box lift's first frame already squats at 7.8
rad/s), while a robot starts standing. A lead-in of ``lead_in_s`` seconds blends from the
rest pose (the robot's initial joint angles and base height, on the clip's first ground position
and heading) into the clip's first frame; a lead-out blends from its last frame back to rest.
Joints and base position are interpolated, the base orientation slerped, both on a smoothstep
(zero speed at rest); body states come from forward kinematics of the model and velocities from
finite differences, so a lead frame is a frame like any other (holosoma prepends and appends
such blends to its tracking clips).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from fuselab_env_core.rotations import np_quat_mul, np_yaw_quat
from fuselab_envs.motion.clip import MotionClip, join, quat_slerp
from fuselab_envs.motion.convert import clip_from_trajectory
from fuselab_sim_backends.model import model_facts


@dataclass(frozen=True, eq=False)
class Lead:
    """How a dataset's clips are led in and out: the model, its rest pose, the two durations."""

    model: mujoco.MjModel  # forward kinematics of the lead frames
    rest_qpos: np.ndarray  # (nq,) the robot's initial pose: base height and joint angles
    lead_in_s: float = 0.0
    lead_out_s: float = 0.0


@dataclass(frozen=True)
class LedClip:
    """A clip with its lead frames, and how many of its frames lead in and lead out."""

    clip: MotionClip
    lead_in: int
    lead_out: int


def with_lead(clip: MotionClip, lead: Lead) -> LedClip:
    """``clip`` with ``lead.lead_in_s`` of frames before it and ``lead.lead_out_s`` after it."""
    lead_in = round(lead.lead_in_s * clip.fps)
    lead_out = round(lead.lead_out_s * clip.fps)
    parts = []
    if lead_in:
        parts.append(_blend(clip, lead, first=True, frames=lead_in))
    parts.append(clip)
    if lead_out:
        parts.append(_blend(clip, lead, first=False, frames=lead_out))
    return LedClip(join(parts, clip.source) if len(parts) > 1 else clip, lead_in, lead_out)


def _blend(clip: MotionClip, lead: Lead, *, first: bool, frames: int) -> MotionClip:
    """``frames`` frames from rest into the clip's first frame (``first``), or from its last
    frame to rest; the clip's end frame joins the trajectory so velocities run into it."""
    model, facts = lead.model, model_facts(lead.model)
    root = clip.body_index(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, model.jnt_bodyid[0]))
    end = 0 if first else -1
    end_pos = clip.body_pos_w[end, root].astype(np.float64)
    end_quat = clip.body_quat_w[end, root].astype(np.float64)
    end_joints = clip.joint_pos[end].astype(np.float64)
    rest_pos = np.array([end_pos[0], end_pos[1], lead.rest_qpos[2]])
    rest_quat = np_quat_mul(np_yaw_quat(end_quat), lead.rest_qpos[3:7].astype(np.float64))
    rest_joints = lead.rest_qpos[facts.joint_qpos_adr].astype(np.float64)

    # smoothstep from rest (0) to the clip's end frame (1), which closes the trajectory
    t = np.arange(frames + 1) / frames
    alpha = t * t * (3.0 - 2.0 * t)
    if not first:
        alpha = alpha[::-1]  # from the clip's last frame (1) down to rest (0)
    a = alpha[:, None]
    led = clip_from_trajectory(
        model,
        fps=clip.fps,
        root_pos=(1.0 - a) * rest_pos + a * end_pos,
        root_quat=quat_slerp(np.broadcast_to(rest_quat, (frames + 1, 4)), end_quat, alpha),
        joint_pos=(1.0 - a) * rest_joints + a * end_joints,
        source=clip.source,
    )
    if (led.joint_names, led.body_names) != (clip.joint_names, clip.body_names):
        raise ValueError(f"{clip.source}: lead frames: the clip is not on the lead's model")
    keep = slice(0, frames) if first else slice(1, frames + 1)  # drop the clip's own frame
    return led.cut(keep)
