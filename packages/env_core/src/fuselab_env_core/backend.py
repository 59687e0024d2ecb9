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
from dataclasses import dataclass

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
