"""Terms every legged task shares: the base frame, joint and action regularizers, proprioception.

The base frame preamble writes, once per env per kernel pass, the quantities several rewards
and observations read (base-frame velocities and projected gravity), so none recomputes them.
Per-joint task arrays (``default_joint_pos``, ``soft_joint_pos_lower`` / ``_upper``) come from
the env, in the entity's joint order.
"""

from __future__ import annotations

import math
from typing import Annotated

from fuselab_env_core.ranges import NonNegativeFloat, Range
from fuselab_env_core.rotations import quat_apply_inverse
from fuselab_env_core.terms import (
    Body,
    observation,
    preamble,
    reward,
    termination,
)
from fuselab_envs.terms.velocity import command_speed

BASE_BODY = Body("pelvis")  # the floating base of the legged robots here (the G1)
TiltAngle = Annotated[float, Range(gt=0.0, le=math.pi)]  # radians from upright


@preamble(outputs={"base_lin_vel_b": (3,), "base_ang_vel_b": (3,), "projected_gravity_b": (3,)})
def base_frame(
    i,
    body_quat_w,
    body_lin_vel_w,
    body_ang_vel_w,
    base_lin_vel_b,
    base_ang_vel_b,
    projected_gravity_b,
    base_body: Body = BASE_BODY,
):
    """Base velocities and the gravity direction in the frame of ``base_body``."""
    b = base_body
    w, x, y, z = (
        body_quat_w[i, b, 0],
        body_quat_w[i, b, 1],
        body_quat_w[i, b, 2],
        body_quat_w[i, b, 3],
    )
    vx, vy, vz = quat_apply_inverse(
        w, x, y, z, body_lin_vel_w[i, b, 0], body_lin_vel_w[i, b, 1], body_lin_vel_w[i, b, 2]
    )
    base_lin_vel_b[i, 0], base_lin_vel_b[i, 1], base_lin_vel_b[i, 2] = vx, vy, vz
    wx, wy, wz = quat_apply_inverse(
        w, x, y, z, body_ang_vel_w[i, b, 0], body_ang_vel_w[i, b, 1], body_ang_vel_w[i, b, 2]
    )
    base_ang_vel_b[i, 0], base_ang_vel_b[i, 1], base_ang_vel_b[i, 2] = wx, wy, wz
    gx, gy, gz = quat_apply_inverse(w, x, y, z, 0.0, 0.0, -1.0)
    projected_gravity_b[i, 0], projected_gravity_b[i, 1], projected_gravity_b[i, 2] = gx, gy, gz


# -- rewards ------------------------------------------------------------------------------------


@reward()
def flat_orientation_l2(i, projected_gravity_b):
    """Squared tilt: the gravity direction's xy components in the base frame."""
    return projected_gravity_b[i, 0] ** 2 + projected_gravity_b[i, 1] ** 2


@reward()
def lin_vel_z_l2(i, base_lin_vel_b):
    return base_lin_vel_b[i, 2] ** 2


@reward()
def ang_vel_xy_l2(i, base_ang_vel_b):
    return base_ang_vel_b[i, 0] ** 2 + base_ang_vel_b[i, 1] ** 2


@reward()
def action_rate_l2(i, actions, last_actions):
    total = 0.0
    for j in range(actions.shape[1]):
        d = actions[i, j] - last_actions[i, j]
        total += d * d
    return total


@reward()
def joint_torques_l2(i, actuator_force):
    """Squared actuator forces (N m), summed: what the motors spend (the env reads the forces
    of the last physics substep when a term asks for them)."""
    total = 0.0
    for j in range(actuator_force.shape[1]):
        total += actuator_force[i, j] * actuator_force[i, j]
    return total


@reward()
def joint_acc_l2(i, joint_acc):
    """Squared joint accelerations (rad/s^2, over the last control step), summed."""
    total = 0.0
    for j in range(joint_acc.shape[1]):
        total += joint_acc[i, j] * joint_acc[i, j]
    return total


@reward()
def joint_deviation_l1(i, joint_pos, default_joint_pos):
    """|q - q_default| summed: keeps joints (e.g. arms and waist) near the default pose."""
    total = 0.0
    for j in range(joint_pos.shape[1]):
        total += abs(joint_pos[i, j] - default_joint_pos[j])
    return total


@reward()
def variable_posture_exp(
    i,
    joint_pos,
    default_joint_pos,
    command,
    posture_std_standing,
    posture_std_walking,
    posture_std_running,
    walking_threshold: NonNegativeFloat = 0.05,
    running_threshold: NonNegativeFloat = 1.5,
):
    """exp(-mean over joints of ((q - q_default) / std)^2): 1 in the default pose, with the
    per-joint tolerances (task arrays, radians) of the speed the command asks, |v_xy| + |wz|:
    tight to stand, looser to walk, loosest to run (mjlab's variable posture)."""
    speed = command_speed(command, i, 1.0)
    std = posture_std_standing
    if speed > running_threshold:
        std = posture_std_running
    elif speed > walking_threshold:
        std = posture_std_walking
    total = 0.0
    for j in range(joint_pos.shape[1]):
        d = (joint_pos[i, j] - default_joint_pos[j]) / std[j]
        total += d * d
    return math.exp(-total / joint_pos.shape[1])


@reward()
def joint_pos_limits(i, joint_pos, soft_joint_pos_lower, soft_joint_pos_upper):
    """How far joints are outside their soft limits (radians, summed)."""
    total = 0.0
    for j in range(joint_pos.shape[1]):
        q = joint_pos[i, j]
        total += max(soft_joint_pos_lower[j] - q, 0.0) + max(q - soft_joint_pos_upper[j], 0.0)
    return total


@reward()
def base_tilted_past(i, projected_gravity_b, limit_angle_rad: TiltAngle = 1.0):
    """1 on the step the base tilts past ``limit_angle_rad``: with a large negative weight, the
    termination penalty that keeps falling from being the cheapest way out of the penalties."""
    return 1.0 if projected_gravity_b[i, 2] > -math.cos(limit_angle_rad) else 0.0


# -- terminations ---------------------------------------------------------------------------------


@termination()
def bad_orientation(i, projected_gravity_b, limit_angle_rad: TiltAngle = 1.0):
    """The base tilted more than ``limit_angle_rad`` from upright: it fell over."""
    return projected_gravity_b[i, 2] > -math.cos(limit_angle_rad)


@termination()
def base_height_below(
    i, body_pos_w, min_height_m: NonNegativeFloat = 0.3, base_body: Body = BASE_BODY
):
    return body_pos_w[i, base_body, 2] < min_height_m


# -- observations -------------------------------------------------------------------------------


@observation(size=3, mirror="polar")
def base_lin_vel(i, out, col, base_lin_vel_b):
    for k in range(3):
        out[i, col + k] = base_lin_vel_b[i, k]


@observation(size=3, mirror="axial")
def base_ang_vel(i, out, col, base_ang_vel_b):
    for k in range(3):
        out[i, col + k] = base_ang_vel_b[i, k]


@observation(size=3, mirror="polar")
def projected_gravity(i, out, col, projected_gravity_b):
    for k in range(3):
        out[i, col + k] = projected_gravity_b[i, k]


@observation(size=lambda shapes, params: shapes["joint_pos"][0], mirror="joints")
def joint_pos_rel(i, out, col, joint_pos, encoder_bias, default_joint_pos):
    """Joint positions as the encoders report them (the env's ``encoder_bias`` added, zero
    unless an event draws one) relative to the robot's default pose (a task array, the same
    for all envs: it stays in cache, where a per-env copy would be read for every env)."""
    for j in range(joint_pos.shape[1]):
        out[i, col + j] = joint_pos[i, j] + encoder_bias[i, j] - default_joint_pos[j]


@observation(size=lambda shapes, params: shapes["joint_vel"][0], mirror="joints")
def joint_vel_rel(i, out, col, joint_vel):
    for j in range(joint_vel.shape[1]):
        out[i, col + j] = joint_vel[i, j]


@observation(size=lambda shapes, params: shapes["actions"][0], mirror="joints")
def last_action(i, out, col, actions):
    for j in range(actions.shape[1]):
        out[i, col + j] = actions[i, j]
