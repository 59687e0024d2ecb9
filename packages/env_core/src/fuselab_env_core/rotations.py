"""Quaternion math, (w, x, y, z), in two forms.

* Scalar Numba helpers for terms: they take and return plain floats (tuples), so a term calling
  them inside the fused ``prange`` loop allocates nothing and creates no array views.
* Vectorized NumPy twins over arrays of shape (..., 4) / (..., 3), for NumPy twins of terms.
"""

from __future__ import annotations

import math

import numba
import numpy as np

# -- scalar helpers for terms (Numba) ----------------------------------------------------------


@numba.njit(inline="always")
def quat_mul(aw, ax, ay, az, bw, bx, by, bz):
    return (
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    )


@numba.njit(inline="always")
def quat_apply(w, x, y, z, vx, vy, vz):
    """Rotate vector v by unit quaternion q."""
    # t = 2 * cross(q_xyz, v); v' = v + w * t + cross(q_xyz, t)
    tx = 2.0 * (y * vz - z * vy)
    ty = 2.0 * (z * vx - x * vz)
    tz = 2.0 * (x * vy - y * vx)
    return (
        vx + w * tx + (y * tz - z * ty),
        vy + w * ty + (z * tx - x * tz),
        vz + w * tz + (x * ty - y * tx),
    )


@numba.njit(inline="always")
def quat_apply_inverse(w, x, y, z, vx, vy, vz):
    """Rotate vector v by the inverse of unit quaternion q."""
    return quat_apply(w, -x, -y, -z, vx, vy, vz)


@numba.njit(inline="always")
def yaw_quat(w, x, y, z):
    """The heading (rotation about world z) part of q: yaw = atan2(sy, cy) of its ZYX angles.

    The half-angle quaternion is normalize(cy + |(cy, sy)|, sy), which needs two square roots
    instead of atan2, cos and sin (scalar libm calls cost ~20 ns each in the fused loop).
    """
    sy = 2.0 * (w * z + x * y)
    cy = 1.0 - 2.0 * (y * y + z * z)
    hw = cy + math.sqrt(cy * cy + sy * sy)
    norm = math.sqrt(hw * hw + sy * sy)
    if norm < 1e-12:  # yaw = pi exactly
        return 0.0, 0.0, 0.0, 1.0
    return hw / norm, 0.0, 0.0, sy / norm


@numba.njit(inline="always")
def yaw_quat_mul(yw, yz, w, x, y, z):
    """(yw, 0, 0, yz) * q: a rotation about z times q, in half the multiplies of quat_mul."""
    return (
        yw * w - yz * z,
        yw * x - yz * y,
        yw * y + yz * x,
        yw * z + yz * w,
    )


@numba.njit(inline="always")
def quat_error_angle(aw, ax, ay, az, bw, bx, by, bz):
    """Angle in radians of the rotation between unit quaternions a and b, in [0, pi]."""
    w, x, y, z = quat_mul(aw, -ax, -ay, -az, bw, bx, by, bz)
    return 2.0 * atan2_nonnegative(math.sqrt(x * x + y * y + z * z), abs(w))


@numba.njit(inline="always")
def atan2_nonnegative(s, c):
    """atan2(s, c) for s, c >= 0, to ~2e-7 relative, without a libm call.

    libm's scalar atan2 costs ~20 ns per call and dominated tracking rewards. Both reductions
    are computed and then selected, so no branch depends on the data (random orientations
    made branches mispredict). Polynomial: Cephes atanf.
    """
    low, high = min(s, c), max(s, c, 1e-30)
    t = low / high
    reduced = (low - high) / (low + high)  # (t - 1) / (t + 1), independent of the division above
    big = t > 0.41421356237309503  # tan(pi / 8)
    u = reduced if big else t
    zz = u * u
    p = (
        ((8.05374449538e-2 * zz - 1.38776856032e-1) * zz + 1.99777106478e-1) * zz - 3.33329491539e-1
    ) * zz * u + u
    angle = p + (0.7853981633974483 if big else 0.0)
    return angle if s <= c else 1.5707963267948966 - angle


@numba.njit(inline="always")
def matrix_first_two_columns(w, x, y, z):
    """Columns 0 and 1 of the rotation matrix of q: a continuous 6-D orientation encoding."""
    return (
        1.0 - 2.0 * (y * y + z * z),
        2.0 * (x * y + w * z),
        2.0 * (x * z - w * y),
        2.0 * (x * y - w * z),
        1.0 - 2.0 * (x * x + z * z),
        2.0 * (y * z + w * x),
    )


@numba.njit(inline="always")
def matrix_third_column(w, x, y, z):
    """Column 2 of the rotation matrix of q."""
    return (2.0 * (x * z + w * y), 2.0 * (y * z - w * x), 1.0 - 2.0 * (x * x + y * y))


# -- vectorized NumPy twins ------------------------------------------------------------------


def np_quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        axis=-1,
    )


def np_quat_conjugate(q: np.ndarray) -> np.ndarray:
    return q * np.array([1.0, -1.0, -1.0, -1.0], dtype=q.dtype)


def np_quat_apply(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    xyz = q[..., 1:]
    t = 2.0 * np.cross(xyz, v)
    return v + q[..., :1] * t + np.cross(xyz, t)


def np_quat_apply_inverse(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np_quat_apply(np_quat_conjugate(q), v)


def np_yaw(q: np.ndarray) -> np.ndarray:
    """The heading of q (rad, rotation about world z), as ``yaw_quat`` takes it."""
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def np_wrap_angle(angle: np.ndarray) -> np.ndarray:
    """``angle`` (rad) wrapped into [-pi, pi)."""
    return np.mod(angle + np.pi, 2.0 * np.pi) - np.pi


def np_yaw_quat(q: np.ndarray) -> np.ndarray:
    yaw = np_yaw(q)
    zero = np.zeros_like(yaw)
    return np.stack([np.cos(0.5 * yaw), zero, zero, np.sin(0.5 * yaw)], axis=-1)


def np_quat_error_angle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = np_quat_mul(np_quat_conjugate(a), b)
    return 2.0 * np.arctan2(np.linalg.norm(d[..., 1:], axis=-1), np.abs(d[..., 0]))


def np_matrix_first_two_columns(q: np.ndarray) -> np.ndarray:
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack(
        [
            1.0 - 2.0 * (y * y + z * z),
            2.0 * (x * y + w * z),
            2.0 * (x * z - w * y),
            2.0 * (x * y - w * z),
            1.0 - 2.0 * (x * x + z * z),
            2.0 * (y * z + w * x),
        ],
        axis=-1,
    )
