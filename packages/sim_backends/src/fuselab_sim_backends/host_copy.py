"""The one host-copy kernel of MuJoCo-layout backends: gather selected bodies, convert velocity.

MuJoCo keeps a body's velocity as a spatial vector (angular; linear) whose linear part is the
velocity of some reference point: for ``mjData.cvel`` the centre of mass of the body's kinematic
subtree root (``subtree_com[body_rootid]``). The contract wants the velocity of the body origin::

    v_origin = v_ref + omega x (xpos - ref)

MuJoCo Warp (``cvel`` copied to the host once per step) and MuJoCo on the CPU (whose kinematics
pass gives origin velocities already: no reference point) both call :func:`copy_body_states`,
one parallel pass over envs, float32 out.
"""

from __future__ import annotations

import numba
import numpy as np

from fuselab_env_core.backend import check_buffer


@numba.njit(parallel=True, cache=True, error_model="numpy")
def copy_body_states(
    envs,
    rows,
    pos,
    quat,
    ang_vel,
    lin_vel,
    ref_points,
    ref_rows,
    out_pos,
    out_quat,
    out_lin_vel,
    out_ang_vel,
):
    """Gather bodies ``rows`` (indices into the second axis of the inputs) for envs ``envs``
    (indices into the first axis: every env, or the few a reset wrote).

    ``pos``/``quat``/``ang_vel``/``lin_vel``: (N, bodies, 3|4|3|3), any float dtype and strides.
    ``lin_vel`` is the velocity of point ``ref_points[i, ref_rows[row]]``, or of the body origin
    itself when ``ref_points`` is None (Numba then compiles the copy without the shift).
    """
    for j in numba.prange(envs.shape[0]):
        i = envs[j]
        for k in range(rows.shape[0]):
            b = rows[k]
            for c in range(3):
                out_pos[i, k, c] = pos[i, b, c]
                out_lin_vel[i, k, c] = lin_vel[i, b, c]
                out_ang_vel[i, k, c] = ang_vel[i, b, c]
            for c in range(4):
                out_quat[i, k, c] = quat[i, b, c]
            if ref_points is not None:
                r = ref_rows[b]
                wx, wy, wz = ang_vel[i, b, 0], ang_vel[i, b, 1], ang_vel[i, b, 2]
                dx = pos[i, b, 0] - ref_points[i, r, 0]
                dy = pos[i, b, 1] - ref_points[i, r, 1]
                dz = pos[i, b, 2] - ref_points[i, r, 2]
                out_lin_vel[i, k, 0] += wy * dz - wz * dy
                out_lin_vel[i, k, 1] += wz * dx - wx * dz
                out_lin_vel[i, k, 2] += wx * dy - wy * dx


def check_body_ids(body_ids: object, num_bodies: int) -> np.ndarray:
    if not isinstance(body_ids, np.ndarray) or body_ids.dtype != np.int32 or body_ids.ndim != 1:
        raise TypeError(f"body_ids: expected a 1-D int32 array, got {body_ids!r}")
    if body_ids.size and (body_ids.min() < 0 or body_ids.max() >= num_bodies):
        raise ValueError(f"body_ids: expected ids in 0..{num_bodies - 1}, got {body_ids}")
    return body_ids


def check_body_buffers(
    num_envs: int,
    body_ids: np.ndarray,
    num_bodies: int,
    out_pos,
    out_quat,
    out_lin_vel,
    out_ang_vel,
) -> None:
    """Validate a copy_body_state_w call: body ids in range, buffers of the contract's shape."""
    b = check_body_ids(body_ids, num_bodies).shape[0]
    check_buffer("out_pos", out_pos, (num_envs, b, 3))
    check_buffer("out_quat", out_quat, (num_envs, b, 4))
    check_buffer("out_lin_vel", out_lin_vel, (num_envs, b, 3))
    check_buffer("out_ang_vel", out_ang_vel, (num_envs, b, 3))


def check_contact_buffers(num_envs: int, body_ids: object, num_bodies: int, out_force) -> None:
    """Validate a copy_contact_forces call: body ids in range, a (num_envs, B, 3) buffer."""
    b = check_body_ids(body_ids, num_bodies).shape[0]
    check_buffer("out_force", out_force, (num_envs, b, 3))
