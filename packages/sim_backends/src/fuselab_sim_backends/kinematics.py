"""World-frame body states of every env from its qpos/qvel: one parallel Numba pass over envs.

The MuJoCo CPU backend needs body poses and velocities of the state a step ends in, while
``mujoco.rollout`` returns only states and sensors, and MuJoCo evaluates sensors at the start
of a step. A second, kinematics-only rollout step would evaluate them, but a MuJoCo step runs
its whole pipeline (mass matrix, bias forces, solve) whatever is disabled: on the G1 it cost
10% of a control step. This pass computes only what the contract reads: the tree walk of
``mj_kinematics`` (body frames from the parent frame, the body offset and each joint in turn)
and the body velocities ``mj_comVel`` implies, at the body origin. The backend's tests compare
it with MuJoCo for every joint type.

Conventions followed from MuJoCo: hinge and slide joints move by ``qpos - qpos0``; a hinge or
ball rotates about its anchor ``jnt_pos``; a free joint sets the body frame directly (its
linear velocity is that of the body origin, its angular velocity is in the body frame); the
three axes of a ball joint are the columns of the body's final orientation (MuJoCo's compiler
rejects a rotation after a ball joint in one body, and a free joint with any other joint).
Mocap bodies stay at their model pose, as in the rollout's data, which never moves them.
"""

from __future__ import annotations

from typing import NamedTuple

import mujoco
import numba
import numpy as np

from fuselab_env_core.terms import ERROR_MODEL, FASTMATH

FREE = int(mujoco.mjtJoint.mjJNT_FREE)
SLIDE = int(mujoco.mjtJoint.mjJNT_SLIDE)
HINGE = int(mujoco.mjtJoint.mjJNT_HINGE)
# Per body: position 3, quaternion (w, x, y, z) 4, linear velocity 3, angular velocity 3.
STATE_WIDTH = 13
ENVS_PER_CHUNK = 64  # envs per thread task at most, sharing one float64 scratch
MIN_CHUNKS = 8  # thread tasks of a call with few envs


class KinematicTree(NamedTuple):
    """The model arrays the pass reads, in MuJoCo's body and joint order."""

    parent: np.ndarray  # (nbody,) int32
    body_pos: np.ndarray  # (nbody, 3) offset from the parent frame
    body_quat: np.ndarray  # (nbody, 4)
    first_joint: np.ndarray  # (nbody,) int32
    num_joints: np.ndarray  # (nbody,) int32
    joint_type: np.ndarray  # (njnt,) int32
    qpos_adr: np.ndarray  # (njnt,) int32
    dof_adr: np.ndarray  # (njnt,) int32
    joint_pos: np.ndarray  # (njnt, 3) anchor in the body frame
    joint_axis: np.ndarray  # (njnt, 3)
    qpos0: np.ndarray  # (nq,)

    @classmethod
    def of(cls, model: mujoco.MjModel) -> KinematicTree:
        return cls(
            parent=_int32(model.body_parentid),
            body_pos=model.body_pos.copy(),
            body_quat=model.body_quat.copy(),
            first_joint=_int32(model.body_jntadr),
            num_joints=_int32(model.body_jntnum),
            joint_type=_int32(model.jnt_type),
            qpos_adr=_int32(model.jnt_qposadr),
            dof_adr=_int32(model.jnt_dofadr),
            joint_pos=model.jnt_pos.copy(),
            joint_axis=model.jnt_axis.copy(),
            qpos0=model.qpos0.copy(),
        )


def _int32(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array, np.int32)


@numba.njit(parallel=True, cache=True, fastmath=set(FASTMATH), error_model=ERROR_MODEL)
def forward_kinematics(tree, qpos, qvel, env_ids, body_states):
    """``body_states[i, b]`` (position, quaternion, linear and angular velocity of body ``b``'s
    origin, world frame) for each env ``i`` in ``env_ids``, from ``qpos[i]`` and ``qvel[i]``.

    Computed in float64 whatever the dtype of ``body_states``: a float32 store (half the memory
    traffic of every later read) rounds each body once, not once per ancestor.
    """
    num_bodies, count = body_states.shape[1], env_ids.shape[0]
    # At most ENVS_PER_CHUNK envs a chunk, and at least MIN_CHUNKS chunks: the few rows of a
    # reset split evenly over threads (160 rows in chunks of 64 kept one of two threads busy
    # with 128 of them). Not numba.get_num_threads(): a kernel calling it cannot be cached.
    size = min(ENVS_PER_CHUNK, max(1, -(-count // MIN_CHUNKS)))
    for chunk in numba.prange(-(-count // size)):
        frames = np.zeros((num_bodies, STATE_WIDTH))  # one env's bodies; the world's row stays
        frames[0, 3] = 1.0
        for k in range(chunk * size, min((chunk + 1) * size, count)):
            i = env_ids[k]
            for b in range(1, num_bodies):
                _body_state(tree, b, qpos[i], qvel[i], frames)
            for b in range(num_bodies):
                for c in range(STATE_WIDTH):
                    body_states[i, b, c] = frames[b, c]


@numba.njit(inline="always", fastmath=set(FASTMATH))
def _body_state(tree, b, qpos, qvel, out):
    """Body ``b`` from its parent's row of ``out`` (parents come first in MuJoCo's order).

    Each joint adds a twist: angular velocity ``w`` about a line through ``anchor``, i.e. the
    linear velocity ``w x (x - anchor)`` at a point ``x``. They are summed as ``w`` and
    ``m = sum(w x anchor)``, so the body origin's velocity is known once its final position is.
    """
    p = tree.parent[b]
    pw = out[p, 10], out[p, 11], out[p, 12]
    pq = out[p, 3], out[p, 4], out[p, 5], out[p, 6]
    first = tree.first_joint[b]
    w = m = slide = (0.0, 0.0, 0.0)
    ball_w = ball_anchor = (0.0, 0.0, 0.0)
    if tree.num_joints[b] == 1 and tree.joint_type[first] == FREE:
        a, d = tree.qpos_adr[first], tree.dof_adr[first]
        x = qpos[a], qpos[a + 1], qpos[a + 2]
        q = _normalized(qpos[a + 3], qpos[a + 4], qpos[a + 5], qpos[a + 6])
        slide = qvel[d], qvel[d + 1], qvel[d + 2]
        ball_w, ball_anchor = (qvel[d + 3], qvel[d + 4], qvel[d + 5]), x
    else:
        x = _add(_vec(out, p, 0), _rotate(pq, _row3(tree.body_pos, b)))
        q = _multiply(pq, _row4(tree.body_quat, b))
        for j in range(first, first + tree.num_joints[b]):
            joint_pos, joint_axis = _row3(tree.joint_pos, j), _row3(tree.joint_axis, j)
            anchor = _add(x, _rotate(q, joint_pos))
            axis = _rotate(q, joint_axis)
            a, d, kind = tree.qpos_adr[j], tree.dof_adr[j], tree.joint_type[j]
            if kind == SLIDE:
                x = _add(x, _scale(axis, qpos[a] - tree.qpos0[a]))
                slide = _add(slide, _scale(axis, qvel[d]))
                continue
            if kind == HINGE:
                half = 0.5 * (qpos[a] - tree.qpos0[a])
                s = np.sin(half)
                local = (np.cos(half), joint_axis[0] * s, joint_axis[1] * s, joint_axis[2] * s)
                spin = _scale(axis, qvel[d])
                w, m = _add(w, spin), _add(m, _cross(spin, anchor))
            else:  # BALL: its axes are those of the final frame, applied below
                local = _normalized(qpos[a], qpos[a + 1], qpos[a + 2], qpos[a + 3])
                ball_w, ball_anchor = (qvel[d], qvel[d + 1], qvel[d + 2]), anchor
            q = _multiply(q, local)
            x = _sub(anchor, _rotate(q, joint_pos))
        q = _normalized(q[0], q[1], q[2], q[3])
    spin = _rotate(q, ball_w)
    w, m = _add(w, spin), _add(m, _cross(spin, ball_anchor))
    # v = v_parent + w_parent x (x - x_parent) + w x x - m + slide
    v = _add(_vec(out, p, 7), _cross(pw, _sub(x, _vec(out, p, 0))))
    v = _add(_sub(_add(v, _cross(w, x)), m), slide)
    for c in range(3):
        out[b, c] = x[c]
        out[b, 7 + c] = v[c]
        out[b, 10 + c] = pw[c] + w[c]
    for c in range(4):
        out[b, 3 + c] = q[c]


@numba.njit(inline="always", fastmath=set(FASTMATH))
def _vec(out, b, start):
    return out[b, start], out[b, start + 1], out[b, start + 2]


@numba.njit(inline="always", fastmath=set(FASTMATH))
def _row3(array, k):
    return array[k, 0], array[k, 1], array[k, 2]


@numba.njit(inline="always", fastmath=set(FASTMATH))
def _row4(array, k):
    return array[k, 0], array[k, 1], array[k, 2], array[k, 3]


@numba.njit(inline="always", fastmath=set(FASTMATH))
def _add(a, b):
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


@numba.njit(inline="always", fastmath=set(FASTMATH))
def _sub(a, b):
    return a[0] - b[0], a[1] - b[1], a[2] - b[2]


@numba.njit(inline="always", fastmath=set(FASTMATH))
def _scale(a, s):
    return a[0] * s, a[1] * s, a[2] * s


@numba.njit(inline="always", fastmath=set(FASTMATH))
def _cross(a, b):
    return a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]


@numba.njit(inline="always", fastmath=set(FASTMATH))
def _multiply(a, b):
    return (
        a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
        a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
        a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
        a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0],
    )


@numba.njit(inline="always", fastmath=set(FASTMATH))
def _rotate(q, v):
    """``q * (0, v) * conj(q)`` for a unit quaternion, as ``v + 2 r x (r x v + w v)``."""
    r = q[1], q[2], q[3]
    u = _cross(r, _add(_cross(r, v), _scale(v, q[0])))
    return v[0] + 2.0 * u[0], v[1] + 2.0 * u[1], v[2] + 2.0 * u[2]


@numba.njit(inline="always", fastmath=set(FASTMATH))
def _normalized(w, x, y, z):
    norm = np.sqrt(w * w + x * x + y * y + z * z)
    if norm < 1e-15:
        return 1.0, 0.0, 0.0, 0.0  # MuJoCo's answer to a zero quaternion
    return w / norm, x / norm, y / norm, z / norm
