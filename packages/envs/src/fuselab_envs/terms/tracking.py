"""Whole-body motion tracking terms (BeyondMimic's definitions), on the tracked bodies.

The robot's tracked bodies are the entity's bodies; the clip's task arrays (``motion_*``, kernel
data that stays in cache) hold the same bodies in the same order, and ``anchor_body`` names the
anchor (the torso). Every term reads the current frame ``motion_frame[i]`` of the clip
directly, so nothing per body is copied per env. Two preamble terms own what several terms
share, once per env per pass: :func:`motion_anchor_frame` keeps the yaw from the motion anchor's
heading to the robot anchor's (the targets of the tracked bodies are the motion's bodies turned
by it, placed under the robot) and the motion anchor's pose in the robot anchor frame for the
observations; :func:`motion_body_ori_errors` each body's orientation error to its target, for
the rewards only.
"""

from __future__ import annotations

import math
from typing import Annotated

import numba

from fuselab_env_core.ranges import NonNegativeFloat, PositiveFloat, Range
from fuselab_env_core.rotations import (
    atan2_nonnegative,
    matrix_first_two_columns,
    matrix_third_column,
    quat_apply_inverse,
    quat_error_angle,
    quat_mul,
    yaw_quat,
    yaw_quat_mul,
)
from fuselab_env_core.terms import (
    Bodies,
    Body,
    observation,
    preamble,
    reward,
    termination,
)

ANCHOR_BODY = Body("torso_link")  # BeyondMimic's anchor of the G1


# -- preamble -----------------------------------------------------------------------------------


def _per_body(shapes, params):
    return (shapes["body_quat_w"][0],)


@preamble(
    outputs={"motion_to_robot_yaw": (2,), "motion_anchor_pos_b": (3,), "motion_anchor_ori_b": (6,)}
)
def motion_anchor_frame(
    i,
    motion_frame,
    body_pos_w,
    body_quat_w,
    motion_body_pos_w,
    motion_body_quat_w,
    motion_to_robot_yaw,
    motion_anchor_pos_b,
    motion_anchor_ori_b,
    anchor_body: Body = ANCHOR_BODY,
):
    """The anchor transform of the clip's frame ``motion_frame[i]``.

    ``motion_to_robot_yaw`` is (w, z) of the rotation about world z from the motion anchor's
    heading to the robot anchor's: the body targets are the motion's bodies turned by it.
    ``motion_anchor_pos_b`` / ``_ori_b``: the motion anchor in the robot anchor's frame.
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
    yw, _, _, yz = yaw_quat(pw, px, py, pz)
    mw, _, _, mz = yaw_quat(rw, rx, ry, rz)
    # (yw, 0, 0, yz) * conjugate((mw, 0, 0, mz)), a rotation about z
    motion_to_robot_yaw[i, 0], motion_to_robot_yaw[i, 1] = yw * mw + yz * mz, yz * mw - yw * mz
    vx, vy, vz = quat_apply_inverse(
        pw,
        px,
        py,
        pz,
        motion_body_pos_w[f, a, 0] - body_pos_w[i, a, 0],
        motion_body_pos_w[f, a, 1] - body_pos_w[i, a, 1],
        motion_body_pos_w[f, a, 2] - body_pos_w[i, a, 2],
    )
    motion_anchor_pos_b[i, 0], motion_anchor_pos_b[i, 1], motion_anchor_pos_b[i, 2] = vx, vy, vz
    ow, ox, oy, oz = quat_mul(pw, -px, -py, -pz, rw, rx, ry, rz)
    m = matrix_first_two_columns(ow, ox, oy, oz)
    for k in range(6):
        motion_anchor_ori_b[i, k] = m[k]


@preamble(outputs={"body_ori_error_sin_half": _per_body, "body_ori_error_cos_half": _per_body})
def motion_body_ori_errors(
    i,
    motion_frame,
    body_quat_w,
    motion_body_quat_w,
    motion_to_robot_yaw,
    body_ori_error_sin_half,
    body_ori_error_cos_half,
):
    """Each tracked body's orientation error to its target (the motion's body turned by
    ``motion_to_robot_yaw``), kept as |xyz| and |w| of the error quaternion (sine and cosine of
    half the angle): the reward's arctangent over them then vectorizes, where computed here,
    body by body, it was the costliest part of the kernel."""
    f = motion_frame[i]
    dw, dz = motion_to_robot_yaw[i, 0], motion_to_robot_yaw[i, 1]
    for b in range(body_quat_w.shape[1]):
        tw, tx, ty, tz = yaw_quat_mul(
            dw,
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
            tw,
            tx,
            ty,
            tz,
        )
        body_ori_error_sin_half[i, b] = math.sqrt(ex * ex + ey * ey + ez * ez)
        body_ori_error_cos_half[i, b] = abs(ew)


# -- rewards ------------------------------------------------------------------------------------


@numba.njit(inline="always")
def _mean_squared_error_exp(i, actual, f, clip, std):
    """exp(-mean over bodies of |clip[f] - actual[i]|^2 / std^2) for (N, B, 3) / (T, B, 3)."""
    error = 0.0
    for b in range(actual.shape[1]):
        dx = clip[f, b, 0] - actual[i, b, 0]
        dy = clip[f, b, 1] - actual[i, b, 1]
        dz = clip[f, b, 2] - actual[i, b, 2]
        error += dx * dx + dy * dy + dz * dz
    return math.exp(-error / actual.shape[1] / (std * std))


@numba.njit(inline="always")
def _anchor_squared_distance(i, f, a, body_pos_w, motion_body_pos_w):
    """|anchor a of env i - the motion's anchor at frame f|^2, in world coordinates."""
    error = 0.0
    for k in range(3):
        d = motion_body_pos_w[f, a, k] - body_pos_w[i, a, k]
        error += d * d
    return error


@reward()
def motion_anchor_pos_error_exp(
    i,
    motion_frame,
    body_pos_w,
    motion_body_pos_w,
    anchor_body: Body = ANCHOR_BODY,
    std: PositiveFloat = 0.3,
):
    """The anchor's world position against the motion's (std in metres)."""
    error = _anchor_squared_distance(i, motion_frame[i], anchor_body, body_pos_w, motion_body_pos_w)
    return math.exp(-error / (std * std))


@reward()
def motion_anchor_ori_error_exp(
    i,
    motion_frame,
    body_quat_w,
    motion_body_quat_w,
    anchor_body: Body = ANCHOR_BODY,
    std: PositiveFloat = 0.4,
):
    """The anchor's world orientation against the motion's (std in radians)."""
    f, a = motion_frame[i], anchor_body
    angle = quat_error_angle(
        body_quat_w[i, a, 0],
        body_quat_w[i, a, 1],
        body_quat_w[i, a, 2],
        body_quat_w[i, a, 3],
        motion_body_quat_w[f, a, 0],
        motion_body_quat_w[f, a, 1],
        motion_body_quat_w[f, a, 2],
        motion_body_quat_w[f, a, 3],
    )
    return math.exp(-angle * angle / (std * std))


@reward()
def motion_body_pos_error_exp(
    i,
    motion_frame,
    body_pos_w,
    motion_to_robot_yaw,
    motion_body_pos_w,
    anchor_body: Body = ANCHOR_BODY,
    std: PositiveFloat = 0.3,
):
    """Tracked bodies against their targets (std in metres): the motion's offsets from its
    anchor, turned by the anchors' yaw difference, at the robot anchor's xy and the motion's
    heights."""
    f, a = motion_frame[i], anchor_body
    w, z = motion_to_robot_yaw[i, 0], motion_to_robot_yaw[i, 1]
    cos_yaw, sin_yaw = w * w - z * z, 2.0 * w * z
    error = 0.0
    for b in range(body_pos_w.shape[1]):
        ox = motion_body_pos_w[f, b, 0] - motion_body_pos_w[f, a, 0]
        oy = motion_body_pos_w[f, b, 1] - motion_body_pos_w[f, a, 1]
        dx = body_pos_w[i, a, 0] + cos_yaw * ox - sin_yaw * oy - body_pos_w[i, b, 0]
        dy = body_pos_w[i, a, 1] + sin_yaw * ox + cos_yaw * oy - body_pos_w[i, b, 1]
        dz = motion_body_pos_w[f, b, 2] - body_pos_w[i, b, 2]
        error += dx * dx + dy * dy + dz * dz
    return math.exp(-error / body_pos_w.shape[1] / (std * std))


@reward()
def motion_body_ori_error_exp(
    i, body_ori_error_sin_half, body_ori_error_cos_half, std: PositiveFloat = 0.4
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
    i, motion_frame, body_lin_vel_w, motion_body_lin_vel_w, std: PositiveFloat = 1.0
):
    """Tracked bodies' world linear velocities against the motion's (std in m/s)."""
    return _mean_squared_error_exp(i, body_lin_vel_w, motion_frame[i], motion_body_lin_vel_w, std)


@reward()
def motion_body_ang_vel_error_exp(
    i, motion_frame, body_ang_vel_w, motion_body_ang_vel_w, std: PositiveFloat = 3.14
):
    """Tracked bodies' world angular velocities against the motion's (std in rad/s)."""
    return _mean_squared_error_exp(i, body_ang_vel_w, motion_frame[i], motion_body_ang_vel_w, std)


# -- terminations -------------------------------------------------------------------------------


@termination()
def motion_anchor_height_error(
    i,
    motion_frame,
    body_pos_w,
    motion_body_pos_w,
    anchor_body: Body = ANCHOR_BODY,
    threshold_m: NonNegativeFloat = 0.25,
):
    a = anchor_body
    return abs(motion_body_pos_w[motion_frame[i], a, 2] - body_pos_w[i, a, 2]) > threshold_m


@termination()
def motion_anchor_pos_error(
    i,
    motion_frame,
    body_pos_w,
    motion_body_pos_w,
    anchor_body: Body = ANCHOR_BODY,
    threshold_m: NonNegativeFloat = 0.5,
):
    """The anchor strays from the motion's by more than ``threshold_m`` in world position (all
    three axes: a robot that lags the clip's walk ends, where the height rule lets it drift)."""
    error = _anchor_squared_distance(i, motion_frame[i], anchor_body, body_pos_w, motion_body_pos_w)
    return error > threshold_m * threshold_m


@termination()
def motion_anchor_ori_error(
    i,
    motion_frame,
    body_quat_w,
    motion_body_quat_w,
    anchor_body: Body = ANCHOR_BODY,
    threshold: Annotated[float, Range(ge=0.0, le=2.0)] = 0.8,
):
    """The anchor's gravity direction (z of gravity in the anchor frame) strays from the
    motion's by more than ``threshold`` (a difference of cosines of tilt, in [0, 2])."""
    f, a = motion_frame[i], anchor_body
    robot_x, robot_y = body_quat_w[i, a, 1], body_quat_w[i, a, 2]
    ref_x, ref_y = motion_body_quat_w[f, a, 1], motion_body_quat_w[f, a, 2]
    robot_up = 1.0 - 2.0 * (robot_x * robot_x + robot_y * robot_y)
    ref_up = 1.0 - 2.0 * (ref_x * ref_x + ref_y * ref_y)
    return abs(ref_up - robot_up) > threshold


@termination()
def motion_body_height_error(
    i,
    motion_frame,
    body_pos_w,
    motion_body_pos_w,
    bodies: Bodies,
    threshold_m: NonNegativeFloat = 0.25,
):
    """Any of ``bodies`` (the end effectors) strays in height from its target (the motion's)."""
    f = motion_frame[i]
    for b in bodies:  # noqa: SIM110 - Numba compiles no generator for any()
        if abs(motion_body_pos_w[f, b, 2] - body_pos_w[i, b, 2]) > threshold_m:
            return True
    return False


# -- observations -------------------------------------------------------------------------------


@observation(size=lambda shapes, params: 2 * shapes["motion_joint_pos"][1], mirror="joints")
def motion_command(i, out, col, motion_frame, motion_joint_pos, motion_joint_vel):
    """The reference joint positions and velocities of the current frame."""
    f, n = motion_frame[i], motion_joint_pos.shape[1]
    # Two loops: with both stores in one, the loop did not vectorize.
    for j in range(n):
        out[i, col + j] = motion_joint_pos[f, j]
    for j in range(n):
        out[i, col + n + j] = motion_joint_vel[f, j]


@observation(size=3, mirror="polar")
def motion_anchor_pos_b(i, out, col, motion_anchor_pos_b):
    for k in range(3):
        out[i, col + k] = motion_anchor_pos_b[i, k]


@observation(size=6, mirror="rotation_columns")
def motion_anchor_ori_b(i, out, col, motion_anchor_ori_b):
    for k in range(6):
        out[i, col + k] = motion_anchor_ori_b[i, k]


@observation(size=6, mirror="rotation_columns")
def motion_body_ori_b(
    i, out, col, motion_frame, body_quat_w, motion_body_quat_w, body: Body = ANCHOR_BODY
):
    """The clip's orientation of ``body`` in the robot's ``body`` frame (first two columns of
    the rotation matrix): with ``body: pelvis``, what the pelvis IMU's orientation and the
    reference give a robot-side program."""
    f, b = motion_frame[i], body
    ow, ox, oy, oz = quat_mul(
        body_quat_w[i, b, 0],
        -body_quat_w[i, b, 1],
        -body_quat_w[i, b, 2],
        -body_quat_w[i, b, 3],
        motion_body_quat_w[f, b, 0],
        motion_body_quat_w[f, b, 1],
        motion_body_quat_w[f, b, 2],
        motion_body_quat_w[f, b, 3],
    )
    m = matrix_first_two_columns(ow, ox, oy, oz)
    for k in range(6):
        out[i, col + k] = m[k]


@numba.njit(inline="always")
def _anchor_axes(i, body_quat_w, a):
    """The robot anchor's rotation matrix, column by column (x, y, z axes in world): its
    transpose takes world vectors into the anchor frame, 9 multiplies a vector instead of the
    ~18 of rotating by the quaternion."""
    w, x, y, z = (
        body_quat_w[i, a, 0],
        body_quat_w[i, a, 1],
        body_quat_w[i, a, 2],
        body_quat_w[i, a, 3],
    )
    return matrix_first_two_columns(w, x, y, z) + matrix_third_column(w, x, y, z)


@observation(size=lambda shapes, params: 3 * shapes["body_pos_w"][0])
def body_pos_b(i, out, col, body_pos_w, body_quat_w, anchor_body: Body = ANCHOR_BODY):
    """Tracked bodies' positions in the robot anchor's frame."""
    a = anchor_body
    r = _anchor_axes(i, body_quat_w, a)
    for b in range(body_pos_w.shape[1]):
        x = body_pos_w[i, b, 0] - body_pos_w[i, a, 0]
        y = body_pos_w[i, b, 1] - body_pos_w[i, a, 1]
        z = body_pos_w[i, b, 2] - body_pos_w[i, a, 2]
        out[i, col + 3 * b] = r[0] * x + r[1] * y + r[2] * z
        out[i, col + 3 * b + 1] = r[3] * x + r[4] * y + r[5] * z
        out[i, col + 3 * b + 2] = r[6] * x + r[7] * y + r[8] * z


@observation(size=lambda shapes, params: 6 * shapes["body_quat_w"][0])
def body_ori_b(i, out, col, body_quat_w, anchor_body: Body = ANCHOR_BODY):
    """Tracked bodies' orientations relative to the robot anchor: the first two columns of the
    anchor-frame rotation matrix (each body's matrix columns taken into the anchor frame)."""
    r = _anchor_axes(i, body_quat_w, anchor_body)
    for b in range(body_quat_w.shape[1]):
        m = matrix_first_two_columns(
            body_quat_w[i, b, 0], body_quat_w[i, b, 1], body_quat_w[i, b, 2], body_quat_w[i, b, 3]
        )
        for c in range(2):
            x, y, z = m[3 * c], m[3 * c + 1], m[3 * c + 2]
            out[i, col + 6 * b + 3 * c] = r[0] * x + r[1] * y + r[2] * z
            out[i, col + 6 * b + 3 * c + 1] = r[3] * x + r[4] * y + r[5] * z
            out[i, col + 6 * b + 3 * c + 2] = r[6] * x + r[7] * y + r[8] * z
