"""NumPy twins of fuselab_envs' terms: the oracle the fused kernel is tested against."""

import numpy as np

from fuselab_env_core.env import time_out  # noqa: F401 - registers the time_out term and twin
from fuselab_env_core.rotations import np_quat_apply_inverse
from fuselab_envs.terms import common, contacts, velocity


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
common.joint_deviation_l1.numpy(lambda q, q0, w: np.sum(w * np.abs(q - q0), axis=1))
common.joint_pos_limits.numpy(
    lambda q, lower, upper: np.sum(np.maximum(lower - q, 0) + np.maximum(q - upper, 0), axis=1)
)
common.bad_orientation.numpy(lambda g, limit: g[:, 2] > -np.cos(limit))
common.base_height_below.numpy(lambda p, min_height, body: p[:, body, 2] < min_height)
common.base_lin_vel.numpy(lambda v: v)
common.base_ang_vel.numpy(lambda w: w)
common.projected_gravity.numpy(lambda g: g)
common.joint_pos_rel.numpy(lambda q, q0: q - q0)
common.joint_vel_rel.numpy(lambda v: v)
common.last_action.numpy(lambda a: a)
velocity.track_lin_vel_xy_exp.numpy(
    lambda c, v, std: np.exp(-np.sum((c[:, :2] - v[:, :2]) ** 2, axis=1) / (std * std))
)
velocity.track_ang_vel_z_exp.numpy(
    lambda c, w, std: np.exp(-((c[:, 2] - w[:, 2]) ** 2) / (std * std))
)
velocity.velocity_command.numpy(lambda c: c)


def _feet_slip(force, lin_vel, num_feet, first_foot_body, threshold):
    feet = lin_vel[:, first_foot_body : first_foot_body + num_feet, :2]
    touching = force[:, :num_feet, 2] > threshold
    return np.sum(np.sum(feet**2, axis=-1) * touching, axis=1)


def _foot_clearance(pos, lin_vel, num_feet, first_foot_body, target):
    feet = slice(first_foot_body, first_foot_body + num_feet)
    speed = np.linalg.norm(lin_vel[:, feet, :2], axis=-1)
    return np.sum((pos[:, feet, 2] - target) ** 2 * np.tanh(2.0 * speed), axis=1)


contacts.feet_slip.numpy(_feet_slip)
contacts.foot_clearance.numpy(_foot_clearance)
contacts.undesired_contacts.numpy(
    lambda force, num_feet, threshold: np.sum(
        np.linalg.norm(force[:, num_feet:], axis=-1) > threshold, axis=1
    ).astype(np.float32)
)
contacts.feet_contact.numpy(
    lambda force, num_feet, threshold: (force[:, :num_feet, 2] > threshold).astype(np.float32)
)


@contacts.feet_air_timer.numpy
def _(force, dt, air_time, last_air_time, first_contact, num_feet, threshold):
    touching = force[:, :num_feet, 2] > threshold
    landed = touching & (air_time > 0)
    first_contact[:] = landed
    last_air_time[:] = np.where(landed, air_time + dt, last_air_time)
    air_time[:] = np.where(touching, 0.0, air_time + dt)


@contacts.feet_air_time.numpy
def _(first_contact, last_air_time, command, threshold_s, min_command):
    moving = np.sum(command[:, :2] ** 2, axis=1) >= min_command * min_command
    return np.sum((last_air_time - threshold_s) * first_contact, axis=1) * moving
