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
  :func:`check_reset`, :func:`check_positive_int` and :func:`check_model_param` give every
  implementation the same errors;
* per-env model parameters (:data:`MODEL_PARAMS`: friction, masses, centres of mass, gains,
  joint damping, armature, friction loss) are read as the model's nominal values and set for a
  set of envs, element by element; a backend recomputes what depends on them (MuJoCo's
  ``mj_setConst``) and refuses, naming the parameter and itself, what it cannot set per env.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import Literal

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
    geom_names: tuple[str, ...] = ()  # what geom parameters (friction) are named by
    # (num_actuators,) the joint (index into joint_names) each actuator drives, -1 for none
    actuator_joint: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))


@dataclass(frozen=True)
class ModelParam:
    """A model parameter a backend may set per env: the elements it is indexed by, the shape of
    one element's value and the smallest value that is physical (None: any finite value)."""

    element: Literal["body", "geom", "actuator", "dof"]
    shape: tuple[int, ...]
    minimum: float | None
    strict: bool = False  # the minimum itself is not physical (a mass of 0)

    def accepts(self, values: np.ndarray) -> np.ndarray:
        """Which of ``values`` (any shape) are physical."""
        finite = np.isfinite(values)
        if self.minimum is None:
            return finite
        return finite & ((values > self.minimum) if self.strict else (values >= self.minimum))

    def describe(self) -> str:
        if self.minimum is None:
            return "finite values"
        return f"values {'>' if self.strict else '>='} {self.minimum:g}"


# The per-env model parameters of the contract, named as MuJoCo's model fields (kp and kd: the
# gain and damping of a position actuator, MuJoCo's gainprm[0] = -biasprm[1] and -biasprm[2]).
MODEL_PARAMS: dict[str, ModelParam] = {
    "geom_friction": ModelParam("geom", (3,), 0.0),  # sliding, torsional, rolling
    "body_mass": ModelParam("body", (), 0.0, strict=True),  # kg
    "body_ipos": ModelParam("body", (3,), None),  # centre of mass in the body frame, m
    "body_inertia": ModelParam("body", (3,), 0.0, strict=True),  # principal inertia, kg m^2
    "actuator_kp": ModelParam("actuator", (), 0.0),  # N m / rad (or N / m)
    "actuator_kd": ModelParam("actuator", (), 0.0),  # N m s / rad
    "dof_damping": ModelParam("dof", (), 0.0),
    "dof_armature": ModelParam("dof", (), 0.0),  # kg m^2
    "dof_frictionloss": ModelParam("dof", (), 0.0),  # N m
}


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

    def copy_actuator_forces(
        self, out_force: np.ndarray, env_ids: np.ndarray | None = None
    ) -> None:
        """Fill (num_envs, nu) ``out_force`` with the force (torque) each actuator applied in the
        last physics substep, after its force limits (rows ``env_ids`` at least); zeros for envs
        reset since their last step. Optional: read only when a term asks for it."""
        raise ValueError(f"actuator forces: {type(self).__name__} does not report them")

    def model_param(self, name: str) -> np.ndarray:
        """The nominal value of model parameter ``name`` (:data:`MODEL_PARAMS`): float64
        (elements, *shape), a copy. A backend without per-env parameters refuses it."""
        raise ValueError(f"{name}: {type(self).__name__} does not set model parameters per env")

    def set_model_param(
        self, name: str, env_ids: np.ndarray, element_ids: np.ndarray, values: np.ndarray
    ) -> None:
        """Set parameter ``name`` of elements ``element_ids`` in envs ``env_ids`` to ``values``
        (len(env_ids), len(element_ids), *shape); every other env and element keeps its value.
        Checked whole first (:func:`check_model_param`); derived constants are recomputed."""
        raise ValueError(f"{name}: {type(self).__name__} does not set model parameters per env")

    def close(self) -> None:  # noqa: B027 - optional: a backend holding nothing keeps it
        """Release what the backend holds (threads, device memory); idempotent."""


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


def check_positive_float(name: str, value: object, accepted: str = "a finite number > 0") -> float:
    """A finite quantity > 0 (a time step, a frame rate); a bool, a NaN or an infinity is
    refused with an error that says what is ``accepted``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not 0.0 < value < math.inf
    ):
        raise ValueError(f"{name}: expected {accepted}, got {value!r}")
    return float(value)


def check_env_ids(env_ids: object, num_envs: int, name: str = "env_ids") -> np.ndarray:
    """Ids of a call (envs, or the elements of a model parameter): a 1-D integer array of ids
    in range (a read may repeat one), or a clear error. Returns them as a C-contiguous int64
    array."""
    if not isinstance(env_ids, np.ndarray) or env_ids.ndim != 1 or env_ids.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected a 1-D integer numpy array, got {env_ids!r}")
    if env_ids.size and (env_ids.min() < 0 or env_ids.max() >= num_envs):
        raise ValueError(f"{name}: expected ids in 0..{num_envs - 1}, got {env_ids}")
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


def check_model_param(
    backend: SimBackend, name: str, env_ids: object, element_ids: object, values: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A ``set_model_param`` call, checked whole: a known parameter, env ids and element ids in
    range, values of shape (envs, elements, *shape) that are physical (a mass or inertia > 0,
    a friction, gain, damping, armature or friction loss >= 0). Returns the ids (int64) and the
    values (float64)."""
    if name not in MODEL_PARAMS:
        raise ValueError(f"model parameter {name!r}: accepted {sorted(MODEL_PARAMS)}")
    param = MODEL_PARAMS[name]
    env_ids = check_env_ids(env_ids, backend.num_envs)
    element_ids = check_env_ids(element_ids, len(backend.model_param(name)), "element_ids")
    array = np.asarray(values, dtype=np.float64)
    expected = (env_ids.size, element_ids.size, *param.shape)
    if array.shape != expected:
        raise ValueError(f"{name}: expected values of shape {expected}, got {array.shape}")
    physical = param.accepts(array)
    if not physical.all():
        bad = array[~physical]
        raise ValueError(f"{name}: expected {param.describe()}, got {bad[:4].tolist()}")
    return env_ids, element_ids, array
