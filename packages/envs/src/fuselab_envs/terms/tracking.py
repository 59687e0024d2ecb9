"""Whole-body motion tracking terms (BeyondMimic's definitions), on the tracked bodies.

The robot's tracked bodies are the entity's bodies, in the motion's tracked order, with the
anchor (torso) at ``anchor_body``. One preamble term owns every derived quantity, once per env
per step: :func:`motion_reference` reads the current frame of the clip (kernel data), moves
the reference bodies under the robot (the robot anchor's xy and yaw, the motion anchor's
height) and measures each body's orientation error. Rewards, terminations and observations
then only read its workspace.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from fuselab_env_core.rotations import (
    atan2_nonnegative,
    matrix_first_two_columns,
    quat_apply,
    quat_apply_inverse,
    quat_error_angle,
    quat_mul,
    yaw_quat,
)
from fuselab_env_core.terms import observation, preamble, reward, termination

ANCHOR_BODY = 7  # torso_link among the tracked bodies (see tasks/g1_motion_tracking.py)


def _bodies(width: int):
    return lambda shapes, params: (params["motion_body_pos_w"].shape[1], width)


def _per_body(shapes, params):
    return (params["motion_body_pos_w"].shape[1],)


# -- preamble -----------------------------------------------------------------------------------


@preamble(
    outputs={
        "ref_anchor_pos_w": (3,),
        "ref_anchor_quat_w": (4,),
        "target_body_pos_w": _bodies(3),
        "body_ori_error_sin_half": _per_body,
        "body_ori_error_cos_half": _per_body,
        "motion_anchor_pos_b": (3,),
        "motion_anchor_ori_b": (6,),
    }
)
def motion_reference(
    i,
    motion_frame,
    body_pos_w,
    body_quat_w,
    ref_anchor_pos_w,
    ref_anchor_quat_w,
    target_body_pos_w,
    body_ori_error_sin_half,
    body_ori_error_cos_half,
    motion_anchor_pos_b,
    motion_anchor_ori_b,
    motion_body_pos_w: np.ndarray,
    motion_body_quat_w: np.ndarray,
    anchor_body: int = ANCHOR_BODY,
):
    """The clip's frame ``motion_frame[i]``, the anchor transform and the body targets.

    Targets keep the motion's body offsets from its anchor, turned by the yaw between the two
    anchors and placed at the robot anchor's xy and the motion anchor's height. Each body's
    orientation error to its target is kept as |xyz| and |w| of the error quaternion (sine and
    cosine of half the angle): the reward's loop over them vectorizes. Terms that only need the
    frame's joint or velocity targets read them from the clip themselves (``motion_frame`` and
    the clip's arrays): the clip stays in cache, while copies per env would cost memory traffic.
    """
    f, a = motion_frame[i], anchor_body
    pw, px, py, pz = (
        body_quat_w[i, a, 0],
        body_quat_w[i, a, 1],
        body_quat_w[i, a, 2],
        body_quat_w[i, a, 3],
    )
    rw, rx, ry, rz = (
        motion_body_quat_w[f, a, 0],
        motion_body_quat_w[f, a, 1],
        motion_body_quat_w[f, a, 2],
        motion_body_quat_w[f, a, 3],
    )
    ax, ay, az = body_pos_w[i, a, 0], body_pos_w[i, a, 1], body_pos_w[i, a, 2]
    rax, ray, raz = (
        motion_body_pos_w[f, a, 0],
        motion_body_pos_w[f, a, 1],
        motion_body_pos_w[f, a, 2],
    )
    ref_anchor_pos_w[i, 0], ref_anchor_pos_w[i, 1], ref_anchor_pos_w[i, 2] = rax, ray, raz
    ref_anchor_quat_w[i, 0], ref_anchor_quat_w[i, 1] = rw, rx
    ref_anchor_quat_w[i, 2], ref_anchor_quat_w[i, 3] = ry, rz
    yw, yx, yy, yz = yaw_quat(pw, px, py, pz)
    mw, mx, my, mz = yaw_quat(rw, rx, ry, rz)
    dw, dx, dy, dz = quat_mul(yw, yx, yy, yz, mw, -mx, -my, -mz)
    for b in range(motion_body_pos_w.shape[1]):
        ox, oy, oz = quat_apply(
            dw,
            dx,
            dy,
            dz,
            motion_body_pos_w[f, b, 0] - rax,
            motion_body_pos_w[f, b, 1] - ray,
            motion_body_pos_w[f, b, 2] - raz,
        )
        target_body_pos_w[i, b, 0] = ax + ox
        target_body_pos_w[i, b, 1] = ay + oy
        target_body_pos_w[i, b, 2] = raz + oz
        qw, qx, qy, qz = quat_mul(
            dw,
            dx,
            dy,
            dz,
            motion_body_quat_w[f, b, 0],
            motion_body_quat_w[f, b, 1],
            motion_body_quat_w[f, b, 2],
            motion_body_quat_w[f, b, 3],
        )
        ew, ex, ey, ez = quat_mul(
            body_quat_w[i, b, 0],
            -body_quat_w[i, b, 1],
            -body_quat_w[i, b, 2],
            -body_quat_w[i, b, 3],
            qw,
            qx,
            qy,
            qz,
        )
        body_ori_error_sin_half[i, b] = math.sqrt(ex * ex + ey * ey + ez * ez)
        body_ori_error_cos_half[i, b] = abs(ew)
    vx, vy, vz = quat_apply_inverse(pw, px, py, pz, rax - ax, ray - ay, raz - az)
    motion_anchor_pos_b[i, 0], motion_anchor_pos_b[i, 1], motion_anchor_pos_b[i, 2] = vx, vy, vz
    ow, ox, oy, oz = quat_mul(pw, -px, -py, -pz, rw, rx, ry, rz)
    m = matrix_first_two_columns(ow, ox, oy, oz)
    for k in range(6):
        motion_anchor_ori_b[i, k] = m[k]


# -- rewards ------------------------------------------------------------------------------------


@numba.njit(inline="always")
def _mean_squared_error_exp(i, actual, f, clip, std):
    """exp(-mean over bodies of |clip[f] - actual[i]|^2 / std^2) for (N, B, 3) / (T, B, 3)."""
    error = 0.0
    for b in range(actual.shape[1]):
        for k in range(3):
            d = clip[f, b, k] - actual[i, b, k]
            error += d * d
    return math.exp(-error / actual.shape[1] / (std * std))


@reward()
def motion_anchor_pos_error_exp(
    i, body_pos_w, ref_anchor_pos_w, anchor_body: int = ANCHOR_BODY, std: float = 0.3
):
    """The anchor's world position against the motion's (std in metres)."""
    error = 0.0
    for k in range(3):
        d = ref_anchor_pos_w[i, k] - body_pos_w[i, anchor_body, k]
        error += d * d
    return math.exp(-error / (std * std))


@reward()
def motion_anchor_ori_error_exp(
    i, body_quat_w, ref_anchor_quat_w, anchor_body: int = ANCHOR_BODY, std: float = 0.4
):
    """The anchor's world orientation against the motion's (std in radians)."""
    a = anchor_body
    angle = quat_error_angle(
        body_quat_w[i, a, 0],
        body_quat_w[i, a, 1],
        body_quat_w[i, a, 2],
        body_quat_w[i, a, 3],
        ref_anchor_quat_w[i, 0],
        ref_anchor_quat_w[i, 1],
        ref_anchor_quat_w[i, 2],
        ref_anchor_quat_w[i, 3],
    )
    return math.exp(-angle * angle / (std * std))


@reward()
def motion_body_pos_error_exp(i, body_pos_w, target_body_pos_w, std: float = 0.3):
    """Tracked bodies against their anchor-relative targets (std in metres)."""
    error = 0.0
    for b in range(body_pos_w.shape[1]):
        for k in range(3):
            d = target_body_pos_w[i, b, k] - body_pos_w[i, b, k]
            error += d * d
    return math.exp(-error / body_pos_w.shape[1] / (std * std))


@reward()
def motion_body_ori_error_exp(
    i, body_ori_error_sin_half, body_ori_error_cos_half, std: float = 0.4
):
    """Tracked bodies' orientation errors to their targets (std in radians)."""
    error = 0.0
    for b in range(body_ori_error_sin_half.shape[1]):
        angle = 2.0 * atan2_nonnegative(
            body_ori_error_sin_half[i, b], body_ori_error_cos_half[i, b]
        )
        error += angle * angle
    return math.exp(-error / body_ori_error_sin_half.shape[1] / (std * std))


@reward()
def motion_body_lin_vel_error_exp(
    i, motion_frame, body_lin_vel_w, motion_body_lin_vel_w: np.ndarray, std: float = 1.0
):
    """Tracked bodies' world linear velocities against the motion's (std in m/s)."""
    return _mean_squared_error_exp(i, body_lin_vel_w, motion_frame[i], motion_body_lin_vel_w, std)


@reward()
def motion_body_ang_vel_error_exp(
    i, motion_frame, body_ang_vel_w, motion_body_ang_vel_w: np.ndarray, std: float = 3.14
):
    """Tracked bodies' world angular velocities against the motion's (std in rad/s)."""
    return _mean_squared_error_exp(i, body_ang_vel_w, motion_frame[i], motion_body_ang_vel_w, std)


# -- terminations -------------------------------------------------------------------------------


@termination()
def motion_anchor_height_error(
    i, body_pos_w, ref_anchor_pos_w, anchor_body: int = ANCHOR_BODY, threshold_m: float = 0.25
):
    return abs(ref_anchor_pos_w[i, 2] - body_pos_w[i, anchor_body, 2]) > threshold_m


@termination()
def motion_anchor_ori_error(
    i, body_quat_w, ref_anchor_quat_w, anchor_body: int = ANCHOR_BODY, threshold: float = 0.8
):
    """The anchor's gravity direction (z of gravity in the anchor frame) strays from the
    motion's by more than ``threshold`` (a difference of cosines of tilt, in [0, 2])."""
    a = anchor_body
    robot_x, robot_y = body_quat_w[i, a, 1], body_quat_w[i, a, 2]
    ref_x, ref_y = ref_anchor_quat_w[i, 1], ref_anchor_quat_w[i, 2]
    robot_up = 1.0 - 2.0 * (robot_x * robot_x + robot_y * robot_y)
    ref_up = 1.0 - 2.0 * (ref_x * ref_x + ref_y * ref_y)
    return abs(ref_up - robot_up) > threshold


@termination()
def motion_body_height_error(
    i, body_pos_w, target_body_pos_w, body_ids: np.ndarray, threshold_m: float = 0.25
):
    """Any of ``body_ids`` (end effectors) strays in height from its target."""
    for k in range(body_ids.shape[0]):
        b = body_ids[k]
        if abs(target_body_pos_w[i, b, 2] - body_pos_w[i, b, 2]) > threshold_m:
            return True
    return False


# -- observations -------------------------------------------------------------------------------


@observation(size=lambda shapes, params: 2 * params["motion_joint_pos"].shape[1])
def motion_command(
    i, out, col, motion_frame, motion_joint_pos: np.ndarray, motion_joint_vel: np.ndarray
):
    """The reference joint positions and velocities of the current frame."""
    f, n = motion_frame[i], motion_joint_pos.shape[1]
    for j in range(n):
        out[i, col + j] = motion_joint_pos[f, j]
        out[i, col + n + j] = motion_joint_vel[f, j]


@observation(size=3)
def motion_anchor_pos_b(i, out, col, motion_anchor_pos_b):
    for k in range(3):
        out[i, col + k] = motion_anchor_pos_b[i, k]


@observation(size=6)
def motion_anchor_ori_b(i, out, col, motion_anchor_ori_b):
    for k in range(6):
        out[i, col + k] = motion_anchor_ori_b[i, k]


@observation(size=lambda shapes, params: 3 * shapes["body_pos_w"][0])
def body_pos_b(i, out, col, body_pos_w, body_quat_w, anchor_body: int = ANCHOR_BODY):
    """Tracked bodies' positions in the robot anchor's frame."""
    a = anchor_body
    qw, qx, qy, qz = (
        body_quat_w[i, a, 0],
        body_quat_w[i, a, 1],
        body_quat_w[i, a, 2],
        body_quat_w[i, a, 3],
    )
    px, py, pz = body_pos_w[i, a, 0], body_pos_w[i, a, 1], body_pos_w[i, a, 2]
    for b in range(body_pos_w.shape[1]):
        x, y, z = quat_apply_inverse(
            qw,
            qx,
            qy,
            qz,
            body_pos_w[i, b, 0] - px,
            body_pos_w[i, b, 1] - py,
            body_pos_w[i, b, 2] - pz,
        )
        out[i, col + 3 * b] = x
        out[i, col + 3 * b + 1] = y
        out[i, col + 3 * b + 2] = z


@observation(size=lambda shapes, params: 6 * shapes["body_quat_w"][0])
def body_ori_b(i, out, col, body_quat_w, anchor_body: int = ANCHOR_BODY):
    """Tracked bodies' orientations relative to the robot anchor (first two matrix columns)."""
    a = anchor_body
    qw, qx, qy, qz = (
        body_quat_w[i, a, 0],
        body_quat_w[i, a, 1],
        body_quat_w[i, a, 2],
        body_quat_w[i, a, 3],
    )
    for b in range(body_quat_w.shape[1]):
        rw, rx, ry, rz = quat_mul(
            qw,
            -qx,
            -qy,
            -qz,
            body_quat_w[i, b, 0],
            body_quat_w[i, b, 1],
            body_quat_w[i, b, 2],
            body_quat_w[i, b, 3],
        )
        m = matrix_first_two_columns(rw, rx, ry, rz)
        for k in range(6):
            out[i, col + 6 * b + k] = m[k]
