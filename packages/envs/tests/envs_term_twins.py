"""NumPy twins of fuselab_envs' terms: the oracle the fused kernel is tested against."""

import numpy as np

from fuselab_env_core.env import time_out  # noqa: F401 - registers the time_out term and twin
from fuselab_env_core.rotations import (
    np_matrix_first_two_columns,
    np_quat_apply,
    np_quat_apply_inverse,
    np_quat_conjugate,
    np_quat_error_angle,
    np_quat_mul,
    np_yaw_quat,
)
from fuselab_envs.terms import common, contacts, gait, tracking, velocity


@common.base_frame.numpy
def _(
    body_quat_w,
    body_lin_vel_w,
    body_ang_vel_w,
    base_lin_vel_b,
    base_ang_vel_b,
    projected_gravity_b,
    base_body,
):
    q = body_quat_w[:, base_body]
    base_lin_vel_b[:] = np_quat_apply_inverse(q, body_lin_vel_w[:, base_body])
    base_ang_vel_b[:] = np_quat_apply_inverse(q, body_ang_vel_w[:, base_body])
    down = np.broadcast_to(np.array([0.0, 0.0, -1.0], np.float32), (len(q), 3))
    projected_gravity_b[:] = np_quat_apply_inverse(q, down)


common.flat_orientation_l2.numpy(lambda g: g[:, 0] ** 2 + g[:, 1] ** 2)
common.lin_vel_z_l2.numpy(lambda v: v[:, 2] ** 2)
common.ang_vel_xy_l2.numpy(lambda w: w[:, 0] ** 2 + w[:, 1] ** 2)
common.action_rate_l2.numpy(lambda a, last: np.sum((a - last) ** 2, axis=1))
common.joint_deviation_l1.numpy(lambda q, q0: np.sum(np.abs(q - q0), axis=1))


@common.variable_posture_exp.numpy
def _(q, q0, command, standing, walking, running, walking_threshold, running_threshold):
    speed = np.linalg.norm(command[:, :2], axis=1) + np.abs(command[:, 2])
    std = np.where(
        (speed > running_threshold)[:, None],
        running,
        np.where((speed > walking_threshold)[:, None], walking, standing),
    )
    return np.exp(-np.mean(((q - q0) / std) ** 2, axis=1))


common.joint_pos_limits.numpy(
    lambda q, lower, upper: np.sum(np.maximum(lower - q, 0) + np.maximum(q - upper, 0), axis=1)
)
common.bad_orientation.numpy(lambda g, limit: g[:, 2] > -np.cos(limit))
common.base_tilted_past.numpy(lambda g, limit: (g[:, 2] > -np.cos(limit)).astype(np.float32))
common.base_height_below.numpy(lambda p, min_height, body: p[:, body, 2] < min_height)
common.base_lin_vel.numpy(lambda v: v)
common.base_ang_vel.numpy(lambda w: w)
common.projected_gravity.numpy(lambda g: g)
common.joint_pos_rel.numpy(lambda q, bias, q0: q + bias - q0)
common.joint_vel_rel.numpy(lambda v: v)
common.last_action.numpy(lambda a: a)
common.joint_torques_l2.numpy(lambda force: np.sum(force**2, axis=1))
common.joint_acc_l2.numpy(lambda acc: np.sum(acc**2, axis=1))
velocity.track_lin_vel_xy_exp.numpy(
    lambda c, v, std: np.exp(-np.sum((c[:, :2] - v[:, :2]) ** 2, axis=1) / (std * std))
)
velocity.track_ang_vel_z_exp.numpy(
    lambda c, w, std: np.exp(-((c[:, 2] - w[:, 2]) ** 2) / (std * std))
)
velocity.velocity_command.numpy(lambda c: c)


def _feet_slip(force, lin_vel, foot_contacts, foot_bodies, threshold):
    feet = lin_vel[:, list(foot_bodies), :2]
    touching = force[:, list(foot_contacts), 2] > threshold
    return np.sum(np.sum(feet**2, axis=-1) * touching, axis=1)


def _foot_clearance(pos, lin_vel, foot_bodies, target):
    feet = list(foot_bodies)
    speed = np.linalg.norm(lin_vel[:, feet, :2], axis=-1)
    return np.sum((pos[:, feet, 2] - target) ** 2 * np.tanh(2.0 * speed), axis=1)


contacts.feet_slip.numpy(_feet_slip)
contacts.foot_clearance.numpy(_foot_clearance)
contacts.undesired_contacts.numpy(
    lambda force, bodies, threshold: np.sum(
        np.linalg.norm(force[:, list(bodies)], axis=-1) > threshold, axis=1
    ).astype(np.float32)
)
contacts.feet_contact.numpy(
    lambda force, feet, threshold: (force[:, list(feet), 2] > threshold).astype(np.float32)
)


@contacts.feet_air_timer.numpy
def _(force, dt, air_time, last_air_time, first_contact, feet, threshold):
    touching = force[:, list(feet), 2] > threshold
    landed = touching & (air_time > 0)
    first_contact[:] = landed
    last_air_time[:] = np.where(landed, air_time + dt, last_air_time)
    air_time[:] = np.where(touching, 0.0, air_time + dt)


@contacts.feet_air_time.numpy
def _(first_contact, last_air_time, command, threshold_s, min_command, yaw_rate_weight):
    speed = np.linalg.norm(command[:, :2], axis=1) + yaw_rate_weight * np.abs(command[:, 2])
    moving = speed >= min_command
    return np.sum((last_air_time - threshold_s) * first_contact, axis=1) * moving


# -- gait -----------------------------------------------------------------------------------------


def gait_foot_height(phase, swing_height):
    """MuJoCo Playground's cubic swing profile, written out: up over the first half cycle,
    down over the second."""
    x = (phase + np.pi) / (2 * np.pi)
    rise, fall = 2 * x, 2 * x - 1
    bezier = lambda t: t**3 + 3 * t**2 * (1 - t)  # noqa: E731
    return np.where(x <= 0.5, swing_height * bezier(rise), swing_height * (1 - bezier(fall)))


@gait.feet_gait_height_exp.numpy
def _(phase, pos, feet, swing_height, rest_height, std):
    height = pos[:, list(feet), 2] - rest_height
    error = np.sum((height - gait_foot_height(phase, swing_height)) ** 2, axis=1)
    return np.exp(-error / std**2)


gait.gait_phase_sin_cos.numpy(
    lambda phase: np.stack([np.sin(phase), np.cos(phase)], axis=-1).reshape(len(phase), 4)
)


# -- motion tracking ------------------------------------------------------------------------------


@tracking.motion_anchor_frame.numpy
def _(frame, pos, quat, clip_pos, clip_quat, yaw, anchor_pos_b, anchor_ori_b, a):
    robot_q, ref_q = quat[:, a], clip_quat[frame, a]
    delta = np_quat_mul(np_yaw_quat(robot_q), np_quat_conjugate(np_yaw_quat(ref_q)))
    yaw[:] = delta[:, [0, 3]]
    anchor_pos_b[:] = np_quat_apply_inverse(robot_q, clip_pos[frame, a] - pos[:, a])
    anchor_ori_b[:] = np_matrix_first_two_columns(np_quat_mul(np_quat_conjugate(robot_q), ref_q))


@tracking.motion_body_ori_errors.numpy
def _(frame, quat, clip_quat, yaw, sin_half, cos_half):
    error = np_quat_mul(np_quat_conjugate(quat), np_quat_mul(_yaw(yaw), clip_quat[frame]))
    sin_half[:] = np.linalg.norm(error[..., 1:], axis=-1)
    cos_half[:] = np.abs(error[..., 0])


def _yaw(yaw):
    """(w, 0, 0, z) quaternions of the (N, 2) yaw, broadcast over bodies."""
    zero = np.zeros_like(yaw[:, 0])
    return np.stack([yaw[:, 0], zero, zero, yaw[:, 1]], axis=-1)[:, None]


def _target_body_pos(frame, pos, yaw, clip_pos, a):
    ref_pos = clip_pos[frame]
    anchor = np.concatenate([pos[:, a, :2], ref_pos[:, a, 2:]], axis=-1)
    return anchor[:, None] + np_quat_apply(_yaw(yaw), ref_pos - ref_pos[:, a : a + 1])


def _mean_squared_error_exp(actual, reference, std):
    error = np.mean(np.sum((reference - actual) ** 2, axis=-1), axis=-1)
    return np.exp(-error / (std * std))


def _clip_error_exp(frame, actual, clip, std):
    return _mean_squared_error_exp(actual, clip[frame], std)


tracking.motion_anchor_pos_error_exp.numpy(
    lambda frame, pos, clip_pos, a, std: np.exp(
        -np.sum((clip_pos[frame, a] - pos[:, a]) ** 2, axis=-1) / (std * std)
    )
)
tracking.motion_anchor_ori_error_exp.numpy(
    lambda frame, quat, clip_quat, a, std: np.exp(
        -(np_quat_error_angle(quat[:, a], clip_quat[frame, a]) ** 2) / (std * std)
    )
)
tracking.motion_body_pos_error_exp.numpy(
    lambda frame, pos, yaw, clip_pos, a, std: _mean_squared_error_exp(
        pos, _target_body_pos(frame, pos, yaw, clip_pos, a), std
    )
)
tracking.motion_body_ori_error_exp.numpy(
    lambda s, c, std: np.exp(-np.mean((2 * np.arctan2(s, c)) ** 2, axis=-1) / (std * std))
)
tracking.motion_body_lin_vel_error_exp.numpy(_clip_error_exp)
tracking.motion_body_ang_vel_error_exp.numpy(_clip_error_exp)
tracking.motion_anchor_height_error.numpy(
    lambda frame, pos, clip_pos, a, threshold: (
        np.abs(clip_pos[frame, a, 2] - pos[:, a, 2]) > threshold
    )
)

tracking.motion_anchor_pos_error.numpy(
    lambda frame, pos, clip_pos, a, threshold: (
        np.linalg.norm(clip_pos[frame, a] - pos[:, a], axis=-1) > threshold
    )
)


def _up(quat):
    return 1 - 2 * (quat[..., 1] ** 2 + quat[..., 2] ** 2)


tracking.motion_anchor_ori_error.numpy(
    lambda frame, quat, clip_quat, a, threshold: (
        np.abs(_up(clip_quat[frame, a]) - _up(quat[:, a])) > threshold
    )
)
tracking.motion_body_height_error.numpy(
    lambda frame, pos, clip_pos, ids, threshold: np.any(
        np.abs(clip_pos[frame[:, None], list(ids), 2] - pos[:, list(ids), 2]) > threshold,
        axis=-1,
    )
)
tracking.motion_command.numpy(lambda f, q, qd: np.concatenate([q[f], qd[f]], axis=-1))
tracking.motion_anchor_pos_b.numpy(lambda v: v)
tracking.motion_anchor_ori_b.numpy(lambda v: v)
tracking.body_pos_b.numpy(
    lambda pos, quat, a: np_quat_apply_inverse(quat[:, a : a + 1], pos - pos[:, a : a + 1]).reshape(
        len(pos), -1
    )
)
tracking.body_ori_b.numpy(
    lambda quat, a: np_matrix_first_two_columns(
        np_quat_mul(np_quat_conjugate(quat[:, a : a + 1]), quat)
    ).reshape(len(quat), -1)
)
tracking.motion_body_ori_b.numpy(
    lambda frame, quat, clip_quat, b: np_matrix_first_two_columns(
        np_quat_mul(np_quat_conjugate(quat[:, b]), clip_quat[frame, b])
    )
)
