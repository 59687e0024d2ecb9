"""Events: what happens to envs outside the kernel (reset noise, pushes, domain randomization).

A task's ``events:`` table lists named events, each naming a registered event function, its
mode and its parameters::

    events:
      reset_joints: {term: reset_joints_by_offset, mode: reset, params: {position_rad: [-0.1, 0.1]}}
      push: {term: push_by_setting_velocity, mode: interval, interval_s: [1.0, 3.0],
             params: {lin_vel_x_mps: [-0.5, 0.5], lin_vel_y_mps: [-0.5, 0.5]}}
      foot_friction: {term: randomize_geom_friction, mode: startup,
                      params: {geoms: ".*_foot_collision", sliding: [0.3, 1.2]}}

An entry set to null is off (``events.push=null`` on the command line). Modes: ``startup``
runs once for every env when the env is built; ``reset`` runs for the envs that start an
episode; ``interval`` runs for each env when its timer, drawn uniformly from ``interval_s``
(seconds) at reset and after every firing, runs out (rows whose episode ends that step are
left alone). Events run in the table's order, draw from the env's generator, and
work on whole arrays of env ids: no Python per env.

An event function is a plain function registered with :func:`event`::

    @event("startup", "reset")
    def randomize_body_com(env, env_ids, bodies: BodyNames, x_m: Interval = (0.0, 0.0)): ...

Its first arguments are the env and the env ids; a reset event may also take ``qpos`` and
``qvel``, the state of those envs being built (float32, one row per env id), and changes it in
place. Annotated keyword arguments are parameters, checked when the task is built (names of
bodies, geoms, joints and actuators arrive as their ids). Physics parameters change through
the backend's per-env model parameters (``SimBackend.set_model_param``), never by reaching into
a backend; each randomizer sets its elements from the model's nominal values, so reset-mode
randomization does not drift, and of two events on one element the later wins.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from fuselab_env_core.backend import ModelFacts, SimBackend
from fuselab_env_core.ranges import (
    Interval,
    NonNegativeInterval,
    ScaleInterval,
    StepInterval,
    check_value,
)
from fuselab_env_core.registry import (
    ActuatorNames,
    BodyNames,
    GeomNames,
    JointNames,
    Registry,
    Signature,
)
from fuselab_env_core.rotations import np_quat_mul

if TYPE_CHECKING:
    from fuselab_env_core.env import FusedEnv

log = logging.getLogger(__name__)

EventMode = Literal["startup", "reset", "interval"]
STATE_INPUTS = ("qpos", "qvel")  # what a reset event may take besides the env and its ids


@dataclass(frozen=True)
class EventFunction:
    name: str
    fn: Callable
    modes: tuple[EventMode, ...]
    state_inputs: tuple[str, ...]  # qpos / qvel: a reset event that edits the reset state
    signature: Signature
    # optional: (backend, params) -> None, raising on a range the model makes impossible
    check: Callable[[SimBackend, dict[str, Any]], None] | None = None


EVENTS: Registry[EventFunction] = Registry("event")


def event(*modes: EventMode, name: str | None = None, check: Callable | None = None):
    """Register an event function usable in ``modes``."""

    def decorate(fn: Callable) -> Callable:
        args = list(inspect.signature(fn).parameters)
        if args[:2] != ["env", "env_ids"]:
            raise TypeError(f"event {fn.__name__!r}: the first arguments must be (env, env_ids)")
        state_inputs = tuple(a for a in args[2:4] if a in STATE_INPUTS)
        if state_inputs and modes != ("reset",):
            raise TypeError(f"event {fn.__name__!r}: only a reset event edits {state_inputs}")
        signature = Signature.of(fn, skip=2 + len(state_inputs))
        EVENTS.register(
            name or fn.__name__,
            EventFunction(name or fn.__name__, fn, modes, state_inputs, signature, check),
        )
        return fn

    return decorate


@dataclass(frozen=True)
class BoundEvent:
    """An entry of the ``events`` table, checked and resolved against the model."""

    entry: str
    function: EventFunction
    mode: EventMode
    params: dict[str, Any]
    interval_s: Interval | None


class EventManager:
    """A task's ``events`` table: runs each entry in its mode (see the module docstring)."""

    ENTRY_KEYS = ("term", "mode", "interval_s", "params")

    def __init__(
        self,
        table: Mapping[str, Any] | None,
        backend: SimBackend,
        step_dt: float,
        randomize: bool = True,
    ):
        """``randomize=False``: only the events that set the reset state run (the nominal
        task: no randomized physics, sensors, delays or pushes)."""
        self.step_dt = step_dt
        self.events = []
        for name, spec in (table or {}).items():
            if spec is None:  # an entry set to null is off (events.push=null)
                continue
            # Every entry is checked; only those that run are resolved against the model (a
            # backend that cannot randomize builds the nominal task).
            if randomize or self.bind(name, spec).function.state_inputs:
                self.events.append(self.bind(name, spec, backend))
        self._by_mode = {
            mode: [e for e in self.events if e.mode == mode]
            for mode in ("startup", "reset", "interval")
        }
        n = backend.num_envs
        # Seconds each env has left before each interval event fires.
        self._time_left = np.zeros((len(self._by_mode["interval"]), n), np.float64)

    @staticmethod
    def bind(name: str, spec: Any, backend: SimBackend | None = None) -> BoundEvent:
        """Entry ``name`` of the table checked (its keys, event, mode, interval and parameters)
        and its names resolved against ``backend``'s model; without a backend (a check before
        the model is loaded) names stay names and no check needs the model."""
        where = f"events.{name}"
        if not isinstance(spec, Mapping):
            raise ValueError(
                f"{where}: expected a mapping with keys {list(EventManager.ENTRY_KEYS)}"
            )
        unknown = sorted(set(spec) - set(EventManager.ENTRY_KEYS))
        if unknown:
            raise ValueError(
                f"{where}: unknown key {unknown[0]!r}; accepted: {list(EventManager.ENTRY_KEYS)}"
            )
        function = EVENTS.get(spec.get("term") or name, f"{where}.term")
        mode = check_value(f"{where}.mode", spec.get("mode"), Literal[function.modes])
        interval = spec.get("interval_s")
        if mode == "interval":
            interval = check_value(f"{where}.interval_s", interval, NonNegativeInterval)
            if interval[1] <= 0.0:
                raise ValueError(f"{where}.interval_s: expected a high end > 0, got {interval}")
        elif interval is not None:
            raise ValueError(f"{where}.interval_s: only an interval event has one, got {interval}")
        facts = None if backend is None else backend.model
        params = function.signature.bind(f"{where}.params", spec.get("params"), facts)
        if function.check is not None and backend is not None:
            function.check(backend, params)
        return BoundEvent(name, function, mode, params, interval)

    def __bool__(self) -> bool:
        return bool(self.events)

    def startup(self, env: FusedEnv) -> None:
        """Every startup event, for every env (the env calls it once, before its first reset)."""
        for e in self._by_mode["startup"]:
            _run(e, env, env.all_envs)

    def reset(self, env: FusedEnv, env_ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray):
        """The reset events of ``env_ids`` (their state being built: ``qpos``, ``qvel``), and
        new interval timers for them."""
        state = {"qpos": qpos, "qvel": qvel}
        for e in self._by_mode["reset"]:
            _run(e, env, env_ids, *(state[name] for name in e.function.state_inputs))
        for k, e in enumerate(self._by_mode["interval"]):
            assert e.interval_s is not None  # checked when bound
            self._time_left[k, env_ids] = env.rng.uniform(*e.interval_s, len(env_ids))

    def advance(self, env: FusedEnv) -> None:
        """One control step of the interval timers; fire the events whose time ran out, for the
        rows that go on (a row ending this step is reset instead)."""
        going_on = ~(env.terminated | env.truncated)
        for k, e in enumerate(self._by_mode["interval"]):
            assert e.interval_s is not None
            time_left = self._time_left[k]
            time_left -= self.step_dt
            due = np.flatnonzero(time_left <= 0.0)
            if due.size:
                time_left[due] = env.rng.uniform(*e.interval_s, due.size)
                rows = due[going_on[due]]
                if rows.size:
                    _run(e, env, rows)


def _run(e: BoundEvent, env: FusedEnv, env_ids: np.ndarray, *state: np.ndarray) -> None:
    """One event; a backend's refusal (a parameter it cannot set per env) names the event."""
    try:
        e.function.fn(env, env_ids, *state, **e.params)
    except ValueError as error:
        raise ValueError(f"events.{e.entry} ({e.function.name}): {error}") from None


# -- reset state ------------------------------------------------------------------------------


@event("reset")
def reset_root_state_uniform(
    env: FusedEnv,
    env_ids: np.ndarray,
    qpos: np.ndarray,
    qvel: np.ndarray,
    x_m: Interval = (0.0, 0.0),
    y_m: Interval = (0.0, 0.0),
    z_m: Interval = (0.0, 0.0),
    roll_rad: Interval = (0.0, 0.0),
    pitch_rad: Interval = (0.0, 0.0),
    yaw_rad: Interval = (0.0, 0.0),
    lin_vel_x_mps: Interval = (0.0, 0.0),
    lin_vel_y_mps: Interval = (0.0, 0.0),
    lin_vel_z_mps: Interval = (0.0, 0.0),
    ang_vel_x_radps: Interval = (0.0, 0.0),
    ang_vel_y_radps: Interval = (0.0, 0.0),
    ang_vel_z_radps: Interval = (0.0, 0.0),
) -> None:
    """The floating base offset from its initial pose (position in the world frame; roll, pitch
    and yaw about the world axes, applied in that order) and given velocities (linear in the
    world frame, angular in the base frame, as MuJoCo's free joint). Draws the pose, then the
    velocity, (envs, 6) each."""
    _need_floating_base(env.backend.model, "reset_root_state_uniform")
    k = len(env_ids)
    low, high = _bounds(x_m, y_m, z_m, roll_rad, pitch_rad, yaw_rad)
    pose = env.rng.uniform(low, high, (k, 6))
    low, high = _bounds(
        lin_vel_x_mps,
        lin_vel_y_mps,
        lin_vel_z_mps,
        ang_vel_x_radps,
        ang_vel_y_radps,
        ang_vel_z_radps,
    )
    velocity = env.rng.uniform(low, high, (k, 6))
    qpos[:, 0:3] += pose[:, 0:3]
    qpos[:, 3:7] = np_quat_mul(euler_quat(pose[:, 3], pose[:, 4], pose[:, 5]), qpos[:, 3:7])
    qvel[:, 0:6] += velocity


@event("reset")
def reset_joints_by_offset(
    env: FusedEnv,
    env_ids: np.ndarray,
    qpos: np.ndarray,
    qvel: np.ndarray,
    joints: JointNames = (".*",),
    position_rad: Interval = (0.0, 0.0),
    velocity_radps: Interval = (0.0, 0.0),
) -> None:
    """Joint positions and velocities offset uniformly from the initial state, positions kept
    within the joints' ranges. Draws the positions, then the velocities, (envs, joints) each."""
    facts, k = env.backend.model, len(env_ids)
    position = env.rng.uniform(*position_rad, (k, len(joints)))
    velocity = env.rng.uniform(*velocity_radps, (k, len(joints)))
    columns = facts.joint_qpos_adr[joints]
    low, high = facts.joint_ranges[joints, 0], facts.joint_ranges[joints, 1]
    qpos[:, columns] = np.clip(qpos[:, columns] + position, low, high)
    qvel[:, facts.joint_qvel_adr[joints]] += velocity


# -- perturbations ----------------------------------------------------------------------------


@event("interval", "reset")
def push_by_setting_velocity(
    env: FusedEnv,
    env_ids: np.ndarray,
    lin_vel_x_mps: Interval = (0.0, 0.0),
    lin_vel_y_mps: Interval = (0.0, 0.0),
    lin_vel_z_mps: Interval = (0.0, 0.0),
    ang_vel_x_radps: Interval = (0.0, 0.0),
    ang_vel_y_radps: Interval = (0.0, 0.0),
    ang_vel_z_radps: Interval = (0.0, 0.0),
) -> None:
    """A push: the floating base's velocity changed at once by a uniform draw (linear in the
    world frame, angular in the base frame), the rest of the state kept."""
    _need_floating_base(env.backend.model, "push_by_setting_velocity")
    low, high = _bounds(
        lin_vel_x_mps,
        lin_vel_y_mps,
        lin_vel_z_mps,
        ang_vel_x_radps,
        ang_vel_y_radps,
        ang_vel_z_radps,
    )
    qpos, qvel = env.robot.qpos[env_ids], env.robot.qvel[env_ids]
    qvel[:, 0:6] += env.rng.uniform(low, high, (len(env_ids), 6))
    env.write_state(env_ids, qpos, qvel)


# -- physics (per-env model parameters) -----------------------------------------------------------


@event("startup", "reset")
def randomize_geom_friction(
    env: FusedEnv, env_ids: np.ndarray, geoms: GeomNames, sliding: NonNegativeInterval = (1.0, 1.0)
) -> None:
    """Sliding friction of ``geoms`` drawn uniformly per env and geom (MuJoCo uses the larger
    of two touching geoms' coefficients); torsional and rolling friction stay nominal."""
    values = _nominal(env, "geom_friction", env_ids, geoms)
    values[..., 0] = env.rng.uniform(*sliding, values.shape[:2])
    env.backend.set_model_param("geom_friction", env_ids, geoms, values)


@event("startup", "reset")
def randomize_body_mass(
    env: FusedEnv, env_ids: np.ndarray, bodies: BodyNames, scale: ScaleInterval = (1.0, 1.0)
) -> None:
    """Mass and rotational inertia of ``bodies`` scaled by one factor per env and body (the
    mass distribution keeps its shape)."""
    factor = env.rng.uniform(*scale, (len(env_ids), len(bodies)))
    _set_mass(env, env_ids, bodies, factor)


def _check_added_mass(backend: SimBackend, params: dict[str, Any]) -> None:
    lightest = backend.model_param("body_mass")[params["bodies"]].min()
    if lightest + params["mass_kg"][0] <= 0.0:
        raise ValueError(
            f"add_body_mass.mass_kg: {params['mass_kg']} would leave a body of {lightest:g} kg "
            "with a mass <= 0; expected a low end > -(the lightest body's mass)"
        )


@event("startup", "reset", check=_check_added_mass)
def add_body_mass(
    env: FusedEnv, env_ids: np.ndarray, bodies: BodyNames, mass_kg: Interval = (0.0, 0.0)
) -> None:
    """A mass drawn uniformly per env and body added to ``bodies`` (a payload; inertia scaled
    with the mass)."""
    nominal = env.backend.model_param("body_mass")[bodies]
    added = env.rng.uniform(*mass_kg, (len(env_ids), len(bodies)))
    _set_mass(env, env_ids, bodies, (nominal + added) / nominal)


@event("startup", "reset")
def randomize_body_com(
    env: FusedEnv,
    env_ids: np.ndarray,
    bodies: BodyNames,
    x_m: Interval = (0.0, 0.0),
    y_m: Interval = (0.0, 0.0),
    z_m: Interval = (0.0, 0.0),
) -> None:
    """Centre of mass of ``bodies`` offset (body frame) uniformly per env and body."""
    values = _nominal(env, "body_ipos", env_ids, bodies)
    low, high = _bounds(x_m, y_m, z_m)
    values += env.rng.uniform(low, high, values.shape)
    env.backend.set_model_param("body_ipos", env_ids, bodies, values)


@event("startup", "reset")
def randomize_actuator_gains(
    env: FusedEnv,
    env_ids: np.ndarray,
    actuators: ActuatorNames = (".*",),
    kp_scale: ScaleInterval = (1.0, 1.0),
    kd_scale: ScaleInterval = (1.0, 1.0),
) -> None:
    """Stiffness and damping of position actuators scaled per env and actuator (draws kp's
    factors, then kd's)."""
    for name, scale in (("actuator_kp", kp_scale), ("actuator_kd", kd_scale)):
        values = _nominal(env, name, env_ids, actuators)
        values *= env.rng.uniform(*scale, values.shape)
        env.backend.set_model_param(name, env_ids, actuators, values)


@event("startup", "reset")
def randomize_joint_param(
    env: FusedEnv,
    env_ids: np.ndarray,
    param: Literal["dof_damping", "dof_armature", "dof_frictionloss"],
    joints: JointNames = (".*",),
    scale: ScaleInterval = (1.0, 1.0),
    add: NonNegativeInterval = (0.0, 0.0),
) -> None:
    """A joint's damping, armature or friction loss: nominal x scale + add, drawn per env and
    joint (``add`` gives a value to a joint whose nominal one is 0)."""
    dofs = env.backend.model.joint_qvel_adr[joints].astype(np.int64)
    values = _nominal(env, param, env_ids, dofs)
    values *= env.rng.uniform(*scale, values.shape)
    values += env.rng.uniform(*add, values.shape)
    env.backend.set_model_param(param, env_ids, dofs, values)


# -- sensors --------------------------------------------------------------------------------------


@event("startup", "reset")
def randomize_encoder_bias(
    env: FusedEnv,
    env_ids: np.ndarray,
    joints: JointNames = (".*",),
    bias_rad: Interval = (0.0, 0.0),
) -> None:
    """A constant offset on what the joint encoders report (``encoder_bias``, read by the
    joint position observations; rewards see the true positions), drawn per env and joint."""
    env.encoder_bias[np.ix_(env_ids, env.robot.joint_columns(joints))] = env.rng.uniform(
        *bias_rad, (len(env_ids), len(joints))
    )


@event("reset", "startup")
def randomize_action_delay(env: FusedEnv, env_ids: np.ndarray, steps: StepInterval = (0, 0)):
    """The env's actions reach its actuators this many control steps late (drawn per env; the
    same unit as observation delay)."""
    env.action.set_delay(env_ids, env.rng.integers(steps[0], steps[1] + 1, len(env_ids)))


# -- helpers ------------------------------------------------------------------------------------


def euler_quat(roll: np.ndarray, pitch: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """(w, x, y, z) float64 of the extrinsic x-y-z rotation (roll, then pitch, then yaw)."""
    cr, sr = np.cos(roll / 2), np.sin(roll / 2)
    cp, sp = np.cos(pitch / 2), np.sin(pitch / 2)
    cy, sy = np.cos(yaw / 2), np.sin(yaw / 2)
    return np.stack(
        [
            cr * cp * cy + sr * sp * sy,
            sr * cp * cy - cr * sp * sy,
            cr * sp * cy + sr * cp * sy,
            cr * cp * sy - sr * sp * cy,
        ],
        axis=-1,
    )


def _bounds(*intervals: Interval) -> tuple[np.ndarray, np.ndarray]:
    array = np.array(intervals, np.float64)
    return array[:, 0], array[:, 1]


def _nominal(env: FusedEnv, name: str, env_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The nominal values of elements ``ids``, one copy per env: (envs, ids, *shape)."""
    nominal = env.backend.model_param(name)[ids]
    return np.broadcast_to(nominal, (len(env_ids), *nominal.shape)).copy()


def _set_mass(env: FusedEnv, env_ids: np.ndarray, bodies: np.ndarray, factor: np.ndarray) -> None:
    for name, shape in (("body_mass", ()), ("body_inertia", (1,))):
        values = _nominal(env, name, env_ids, bodies) * factor.reshape(*factor.shape, *shape)
        env.backend.set_model_param(name, env_ids, bodies, values)


def _need_floating_base(facts: ModelFacts, event_name: str) -> None:
    if facts.nq != len(facts.joint_names) + 7:
        raise ValueError(
            f"{event_name}: the robot has no floating base (nq {facts.nq} for "
            f"{len(facts.joint_names)} joints)"
        )
