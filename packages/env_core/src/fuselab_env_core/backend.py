"""The SimBackend contract: batched physics over num_envs copies of one MuJoCo-format model.

fuselab-sim-backends implements it for MuJoCo, MuJoCo Warp and MotrixSim; a downstream project
can implement it for anything else. Conventions, for every backend:

* every array is (num_envs, ...), float32 and C-contiguous, owned by the caller and
  preallocated once; the hot path (``set_controls``, ``step``, ``copy_*``) allocates nothing;
* quaternions are (w, x, y, z); velocities are in the world frame; a body's linear velocity is
  that of its origin (not of its centre of mass);
* bodies and joints are addressed by index in the model's order (MuJoCo's depth-first body
  order); names are resolved once, on the cold path, by :class:`fuselab_env_core.entity.Entity`;
* the ``copy_*`` reads take optional ``env_ids``: the rows the caller needs fresh (those a
  reset wrote). A backend fills at least those and may fill every row: the caller promises
  that its other rows already hold the backend's current state (it copied them since their
  state last changed), so filling them again changes nothing;
* bad input raises before anything is written: :func:`check_buffer`, :func:`check_env_ids`,
  :func:`check_reset` and :func:`check_positive_int` give every implementation the same errors.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np


@dataclass(frozen=True)
class ModelFacts:
    """What a backend's model is, by name and size (joints: the 1-dof hinge and slide joints)."""

    body_names: tuple[str, ...]
    joint_names: tuple[str, ...]
    actuator_names: tuple[str, ...]
    joint_ranges: np.ndarray  # (num_joints, 2) radians or metres; (-inf, inf) when unlimited
    joint_qpos_adr: np.ndarray  # (num_joints,) column of each joint in qpos
    joint_qvel_adr: np.ndarray  # (num_joints,) column of each joint in qvel
    nq: int
    nv: int
    nu: int
    physics_dt: float


class EntityReads(NamedTuple):
    """Everything an :class:`~fuselab_env_core.entity.Entity` reads from a backend in one
    :meth:`SimBackend.copy_entity_state`: the ids to read (bodies, contact bodies, the joints'
    qpos and qvel columns) and the caller's buffers (N: ``num_envs``)."""

    body_ids: np.ndarray  # (B,) int32
    body_pos_w: np.ndarray  # (N, B, 3)
    body_quat_w: np.ndarray  # (N, B, 4)
    body_lin_vel_w: np.ndarray  # (N, B, 3)
    body_ang_vel_w: np.ndarray  # (N, B, 3)
    contact_body_ids: np.ndarray  # (C,) int32; none: no contact read
    contact_force_w: np.ndarray  # (N, C, 3)
    qpos: np.ndarray  # (N, nq)
    qvel: np.ndarray  # (N, nv)
    joint_qpos_adr: np.ndarray  # (J,) int32 column of each joint in qpos
    joint_qvel_adr: np.ndarray  # (J,) int32 column of each joint in qvel
    joint_pos: np.ndarray  # (N, J)
    joint_vel: np.ndarray  # (N, J)
    state_finite: np.ndarray  # (N,) bool: the row's qpos and qvel are finite


class SimBackend(abc.ABC):
    """A batch of ``num_envs`` simulations of one model, stepped together."""

    num_envs: int
    model: ModelFacts

    @abc.abstractmethod
    def set_controls(self, controls: np.ndarray) -> None:
        """Controls for the next steps: (num_envs, nu) float32, in the model's actuator units
        (position targets for position actuators, torques for motors). Non-finite rows are
        accepted: they corrupt only their own env, which a reset of that env recovers."""

    @abc.abstractmethod
    def step(self, substeps: int) -> None:
        """Advance every env by ``substeps`` physics steps with the current controls."""

    @abc.abstractmethod
    def reset_envs(self, env_ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Set envs ``env_ids`` to float32 (len, nq) ``qpos`` and (len, nv) ``qvel``, clear their
        solver history, and run forward kinematics so reads are consistent at once."""

    @abc.abstractmethod
    def copy_qpos_qvel(
        self, out_qpos: np.ndarray, out_qvel: np.ndarray, env_ids: np.ndarray | None = None
    ) -> None:
        """Fill (num_envs, nq) and (num_envs, nv) with the generalized positions and velocities
        (rows ``env_ids`` at least; every row when None)."""

    @abc.abstractmethod
    def copy_body_state_w(
        self,
        body_ids: np.ndarray,
        out_pos: np.ndarray,
        out_quat: np.ndarray,
        out_lin_vel: np.ndarray,
        out_ang_vel: np.ndarray,
        env_ids: np.ndarray | None = None,
    ) -> None:
        """Fill (num_envs, B, 3|4|3|3) buffers with the world-frame state of bodies ``body_ids``
        (int32, shape (B,)) in one pass (rows ``env_ids`` at least; every row when None)."""

    @abc.abstractmethod
    def copy_contact_forces(
        self, body_ids: np.ndarray, out_force: np.ndarray, env_ids: np.ndarray | None = None
    ) -> None:
        """Fill (num_envs, B, 3) ``out_force`` with the net contact force, in newtons and the
        world frame, that the rest of the world (the floor and every other body) exerts on each
        of the bodies ``body_ids`` (int32, shape (B,)); zeros for a body in contact with nothing
        (rows ``env_ids`` at least; every row when None).

        The forces are those the solver applied during the last physics substep of the last
        :meth:`step` (MuJoCo-style engines compute them from the state that substep started
        from), i.e. the contact forces that produced the current velocities. Envs reset since
        their last step read zeros until they step again.
        """

    def copy_entity_state(self, reads: EntityReads, env_ids: np.ndarray | None = None) -> None:
        """Every read of an entity in one call (rows ``env_ids`` at least; every row when None):
        its bodies (:meth:`copy_body_state_w`), its contact bodies' forces
        (:meth:`copy_contact_forces`, skipped when it has none), qpos and qvel
        (:meth:`copy_qpos_qvel`), then the joints' columns of those and whether each row's
        state is finite. This default makes those calls and one pass over the rows; a backend
        whose reads are host arrays does it all in one pass over the rows instead (the MuJoCo
        CPU backend: one thread team and one visit of each row's memory, not four)."""
        check_entity_reads(reads, self.num_envs, self.model)
        rows = () if env_ids is None else (env_ids,)
        self.copy_body_state_w(
            reads.body_ids,
            reads.body_pos_w,
            reads.body_quat_w,
            reads.body_lin_vel_w,
            reads.body_ang_vel_w,
            *rows,
        )
        if reads.contact_body_ids.size:
            self.copy_contact_forces(reads.contact_body_ids, reads.contact_force_w, *rows)
        self.copy_qpos_qvel(reads.qpos, reads.qvel, *rows)
        _joint_state_rows(env_ids, reads)


def check_buffer(name: str, array: object, shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    """A caller buffer of the contract: exact shape and dtype, C-contiguous, or a clear error."""
    if not isinstance(array, np.ndarray):
        raise TypeError(
            f"{name}: expected a numpy array of shape {shape}, got {type(array).__name__}"
        )
    if array.shape != shape or array.dtype != np.dtype(dtype):
        raise ValueError(
            f"{name}: expected shape {shape} and dtype {np.dtype(dtype)}, "
            f"got {array.shape} {array.dtype}"
        )
    if not array.flags.c_contiguous:
        raise ValueError(f"{name}: expected a C-contiguous array")
    return array


def check_positive_int(name: str, value: object) -> int:
    """A count (envs, substeps, threads): a positive int; a bool or a float is refused."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return int(value)


def check_env_ids(env_ids: object, num_envs: int) -> np.ndarray:
    """Env ids of a call: a 1-D integer array of ids in range (a read may repeat one), or a
    clear error. Returns them as a C-contiguous int64 array."""
    if not isinstance(env_ids, np.ndarray) or env_ids.ndim != 1 or env_ids.dtype.kind not in "iu":
        raise TypeError(f"env_ids: expected a 1-D integer numpy array, got {env_ids!r}")
    if env_ids.size and (env_ids.min() < 0 or env_ids.max() >= num_envs):
        raise ValueError(f"env_ids: expected ids in 0..{num_envs - 1}, got {env_ids}")
    return np.ascontiguousarray(env_ids, dtype=np.int64)


def check_reset(
    env_ids: object, qpos: object, qvel: object, num_envs: int, nq: int, nv: int
) -> np.ndarray:
    """A ``reset_envs`` call, checked whole before a backend writes anything: ``env_ids`` a 1-D
    integer array of distinct ids in range; ``qpos``/``qvel`` buffers of the contract, one
    finite row per id. Returns the ids as int64."""
    env_ids = check_env_ids(env_ids, num_envs)
    if np.unique(env_ids).size != env_ids.size:
        raise ValueError(f"env_ids: expected distinct ids, got {env_ids}")
    for name, array, width in (("qpos", qpos, nq), ("qvel", qvel, nv)):
        finite = np.isfinite(check_buffer(name, array, (env_ids.size, width))).all(axis=1)
        if not finite.all():
            rows = np.flatnonzero(~finite)
            raise ValueError(
                f"{name}: expected finite values; rows {rows.tolist()} "
                f"(env ids {env_ids[rows].tolist()}) are not"
            )
    return env_ids


def check_ids(name: str, ids: object, count: int) -> np.ndarray:
    """Body ids or state columns of a call: a 1-D int32 array of values in 0..count - 1."""
    if not isinstance(ids, np.ndarray) or ids.dtype != np.int32 or ids.ndim != 1:
        raise TypeError(f"{name}: expected a 1-D int32 array, got {ids!r}")
    if ids.size and (ids.min() < 0 or ids.max() >= count):
        raise ValueError(f"{name}: expected ids in 0..{count - 1}, got {ids}")
    return ids


def check_entity_reads(reads: EntityReads, num_envs: int, model: ModelFacts) -> None:
    """A :meth:`SimBackend.copy_entity_state` call, checked whole before anything is written:
    ids in range, every buffer of the contract's shape, named by its field."""
    num_bodies = len(model.body_names)
    b = check_ids("body_ids", reads.body_ids, num_bodies).size
    c = check_ids("contact_body_ids", reads.contact_body_ids, num_bodies).size
    j = check_ids("joint_qpos_adr", reads.joint_qpos_adr, model.nq).size
    jv = check_ids("joint_qvel_adr", reads.joint_qvel_adr, model.nv).size
    n = num_envs
    shapes = {
        "body_pos_w": (n, b, 3),
        "body_quat_w": (n, b, 4),
        "body_lin_vel_w": (n, b, 3),
        "body_ang_vel_w": (n, b, 3),
        "contact_force_w": (n, c, 3),
        "qpos": (n, model.nq),
        "qvel": (n, model.nv),
        "joint_pos": (n, j),
        "joint_vel": (n, jv),
    }
    for name, shape in shapes.items():
        check_buffer(name, getattr(reads, name), shape)
    check_buffer("state_finite", reads.state_finite, (n,), np.bool_)


@numba.njit(cache=True)
def joint_state_row(i, reads):
    """Row ``i`` of the joint buffers from the (float32) qpos and qvel buffers, and whether
    that state is finite (its float64 sum is: a float32 row cannot overflow it)."""
    for j in range(reads.joint_qpos_adr.shape[0]):
        reads.joint_pos[i, j] = reads.qpos[i, reads.joint_qpos_adr[j]]
    for j in range(reads.joint_qvel_adr.shape[0]):
        reads.joint_vel[i, j] = reads.qvel[i, reads.joint_qvel_adr[j]]
    row_sum = 0.0
    for j in range(reads.qpos.shape[1]):
        row_sum += reads.qpos[i, j]
    for j in range(reads.qvel.shape[1]):
        row_sum += reads.qvel[i, j]
    reads.state_finite[i] = math.isfinite(row_sum)


@numba.njit(parallel=True, cache=True)
def _joint_state_rows(env_ids, reads):
    """:func:`joint_state_row` for rows ``env_ids``, or every row when None."""
    if env_ids is None:  # Numba compiles the call with None without this branch's other side
        for i in numba.prange(reads.qpos.shape[0]):
            joint_state_row(i, reads)
    else:
        for k in numba.prange(env_ids.shape[0]):
            joint_state_row(env_ids[k], reads)
