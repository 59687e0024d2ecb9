"""MuJoCo on the CPU: all envs stepped by ``mujoco.rollout``'s thread pool, in C, GIL released.

Body states are computed from each env's final qpos/qvel after every step (and reset) by the
Numba pass of :mod:`fuselab_sim_backends.kinematics`: rollout returns states and sensors only,
and sensors are evaluated at the start of a step, one substep late.

Contact forces come from the physics step itself: the model is compiled with its own sensors
(which the contract never reads) replaced by one MuJoCo ``contact`` sensor per body that can
touch anything (a geom whose contype/conaffinity can match another body's, or an explicit
``<pair>``), matching the contacts of that body on its "second" side and reduced with
``netforce``: the net force the rest of the world exerts on the body, in the world frame.
Because MuJoCo evaluates them during ``mj_step`` from the state the step starts from, the
sensordata that rollout records after the last substep holds the contact forces the solver
applied during that substep: the forces that produced the current velocities. The world body
gets no sensor: every contact pushes its two bodies equally and oppositely, so the world's net
force is minus the sum over all sensed bodies. Bodies that cannot touch anything read zero.
Cost: the sensors are evaluated on every substep (rollout takes one model per env, not per
step); on the G1 (6 contact sensors, N=4096) they add about 2% to a step.

Per-env model parameters (friction, masses, centres of mass, gains, joint damping, armature,
friction loss): ``mujoco.rollout`` takes one ``MjModel`` per env, so every env starts on the one
nominal model and gets a copy of its own the first time one of its parameters is set (about 76 kB
for the G1; ``mj_setConst`` recomputes what masses, inertias and armature change).

Actuator forces are read, when the backend is built with ``actuator_forces=True``, from one
``actuatorfrc`` sensor per actuator, recorded by rollout after the last substep like the contact
forces.

MuJoCo rejects a non-finite control with a warning and resets that env's data, so NaN actions
corrupt no env; the env detects and reports them itself. MuJoCo's automatic reset of a diverging
state is disabled: such rows stay visible (non-finite) until the env resets them with
:meth:`reset_envs`.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import time
from pathlib import Path
from typing import Any, cast

import mujoco
import numba
import numpy as np
from mujoco import rollout

from fuselab_env_core.backend import (
    SimBackend,
    check_buffer,
    check_env_ids,
    check_model_param,
    check_positive_int,
    check_reset,
)
from fuselab_env_core.timing import elapsed_ms
from fuselab_sim_backends.host_copy import (
    check_body_buffers,
    check_contact_buffers,
    copy_body_states,
)
from fuselab_sim_backends.kinematics import STATE_WIDTH, KinematicTree, forward_kinematics
from fuselab_sim_backends.model import check_position_actuators, load_spec, model_facts

log = logging.getLogger(__name__)

NO_CONTACT = -1  # contact sensor slot of a body that cannot touch anything
WORLD_CONTACT = -2  # contact sensor slot of the world body: minus the sum of every slot
STATE = mujoco.mjtState.mjSTATE_FULLPHYSICS
# Envs per rollout call. A step runs its envs in chunks, so the states, sensors and controls
# rollout records for every substep (of which a step keeps the last) fill small buffers used
# again chunk after chunk. One call over every env wrote ~30 MB a step on the G1 at N=8192, the
# size of the L3 of this project's 2-core machine, and evicted what the env reads next: with
# chunks of 2048 the tracking env's own work per step fell by 0.7-1.3 ms (of ~9), the physics
# (identical results) the same within this machine's noise; chunks of 512 made it slower.
ENVS_PER_ROLLOUT = 2048
_D: Any = mujoco.mjtDisableBit  # declared: pyright would read _D.a | _D.b as a type union


class MujocoBackend(SimBackend):
    """``num_envs`` copies of one MJCF model, stepped by ``num_threads`` C threads;
    ``physics_dt`` replaces the model's option timestep (seconds per physics step)."""

    def __init__(
        self,
        mjcf: str | Path,
        num_envs: int,
        num_threads: int | None = None,
        *,
        actuator_forces: bool = False,
        physics_dt: float | None = None,
    ):
        num_envs = check_positive_int("num_envs", num_envs)
        num_threads = check_positive_int(
            "num_threads", (os.cpu_count() or 1) if num_threads is None else num_threads
        )
        started = time.perf_counter()
        spec = load_spec(mjcf, physics_dt)
        as_written = spec.compile()
        contact_bodies = _touching_bodies(as_written)
        for sensor in list(spec.sensors):
            spec.delete(sensor)
        for body in contact_bodies:
            spec.add_sensor(
                type=mujoco.mjtSensor.mjSENS_CONTACT,
                reftype=mujoco.mjtObj.mjOBJ_BODY,
                refname=mujoco.mj_id2name(as_written, mujoco.mjtObj.mjOBJ_BODY, body),
                intprm=_net_contact_force_intprm(),
            )
        if actuator_forces:
            for actuator in range(as_written.nu):
                spec.add_sensor(
                    type=mujoco.mjtSensor.mjSENS_ACTUATORFRC,
                    objtype=mujoco.mjtObj.mjOBJ_ACTUATOR,
                    objname=mujoco.mj_id2name(as_written, mujoco.mjtObj.mjOBJ_ACTUATOR, actuator),
                )
        self._physics = spec.compile()
        self._physics.opt.disableflags |= int(_D.mjDSBL_AUTORESET)
        if self._physics.nsensor:  # whatever the MJCF's <flag sensor=.../> says
            self._physics.opt.disableflags &= ~int(_D.mjDSBL_SENSOR)
        else:
            self._physics.opt.disableflags |= int(_D.mjDSBL_SENSOR)
        log.info(
            "compile the model with contact sensors (%d contact bodies): %.1f ms",
            contact_bodies.size,
            elapsed_ms(started),
        )

        self.num_envs = n = num_envs
        self.num_threads = num_threads
        self.model = model_facts(self._physics)
        m = self._physics
        self._nstate = mujoco.mj_stateSize(m, STATE)
        self._pool = rollout.Rollout(nthread=num_threads)
        self._datas = [mujoco.MjData(m) for _ in range(num_threads)]
        self._envs_per_call = min(n, ENVS_PER_ROLLOUT)
        # rollout takes one model per env: the nominal one until a parameter of the env is set
        self._models = [self._physics] * n

        self._state = np.empty((n, self._nstate))
        # A reset row is this state (mj_resetData's: time 0, the model's defaults) with the
        # row's qpos and qvel written over it: one vectorized copy, no per-env MjData calls.
        mujoco.mj_resetData(m, self._datas[0])
        self._reset_state = np.empty(self._nstate)
        mujoco.mj_getState(m, self._datas[0], self._reset_state, STATE)
        self._qpos = self._state[:, 1 : 1 + m.nq]  # the state is (time, qpos, qvel, ...)
        self._qvel = self._state[:, 1 + m.nq : 1 + m.nq + m.nv]
        self._ctrl = np.zeros((n, m.nu))
        self._substep_buffers: dict[int, tuple[np.ndarray, ...]] = {}
        self._sensordata = np.zeros((n, self._physics.nsensordata))  # of the last substep
        self._tree = KinematicTree.of(m)
        self._body_states = np.zeros((n, m.nbody, STATE_WIDTH), np.float32)  # what reads want
        bodies = self._body_states
        self._body_pos, self._body_quat = bodies[:, :, 0:3], bodies[:, :, 3:7]
        self._body_lin_vel, self._body_ang_vel = bodies[:, :, 7:10], bodies[:, :, 10:13]
        # Contact sensor slot of each body; forces (n, slots, 3) of the last substep, a view into
        # the sensordata of the last step (zeros before the first).
        self._contact_slots = np.full(m.nbody, NO_CONTACT, np.int32)
        self._contact_slots[contact_bodies] = np.arange(contact_bodies.size, dtype=np.int32)
        self._contact_slots[0] = WORLD_CONTACT
        self._contact_force = self._sensordata[:, : 3 * contact_bodies.size].reshape(
            n, contact_bodies.size, 3
        )
        self._actuator_force = self._sensordata[:, 3 * contact_bodies.size :]
        self._reads_actuator_forces = actuator_forces

        self._all_envs = np.arange(n)
        qpos0 = np.tile(m.qpos0, (n, 1)).astype(np.float32)
        self.reset_envs(self._all_envs, qpos0, np.zeros((n, m.nv), np.float32))
        log.info(
            "MuJoCo backend ready: %d envs, %d threads, nq %d, nv %d, nu %d, dt %g s (%.1f ms)",
            n,
            num_threads,
            m.nq,
            m.nv,
            m.nu,
            m.opt.timestep,
            elapsed_ms(started),
        )

    # -- the contract ----------------------------------------------------------------------------

    def set_controls(self, controls: np.ndarray) -> None:
        check_buffer("controls", controls, (self.num_envs, self.model.nu))
        self._ctrl[:] = controls

    def step(self, substeps: int) -> None:
        buffers = self._buffers_for(substeps)
        for start in range(0, self.num_envs, self._envs_per_call):
            rows = slice(start, min(start + self._envs_per_call, self.num_envs))
            self._step_envs(rows, substeps, buffers)
        forward_kinematics(self._tree, self._qpos, self._qvel, self._all_envs, self._body_states)

    def reset_envs(self, env_ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        env_ids = check_reset(env_ids, qpos, qvel, self.num_envs, self.model.nq, self.model.nv)
        self._state[env_ids] = self._reset_state
        self._qpos[env_ids] = qpos
        self._qvel[env_ids] = qvel
        self._sensordata[env_ids] = 0.0  # no step since: no contact or actuator force yet
        forward_kinematics(self._tree, self._qpos, self._qvel, env_ids, self._body_states)

    def copy_qpos_qvel(self, out_qpos, out_qvel, env_ids=None) -> None:
        check_buffer("out_qpos", out_qpos, (self.num_envs, self.model.nq))
        check_buffer("out_qvel", out_qvel, (self.num_envs, self.model.nv))
        _copy_state_rows(self._envs(env_ids), self._qpos, self._qvel, out_qpos, out_qvel)

    def copy_body_state_w(
        self, body_ids, out_pos, out_quat, out_lin_vel, out_ang_vel, env_ids=None
    ) -> None:
        check_body_buffers(
            self.num_envs,
            body_ids,
            len(self.model.body_names),
            out_pos,
            out_quat,
            out_lin_vel,
            out_ang_vel,
        )
        copy_body_states(
            self._envs(env_ids),
            body_ids,
            self._body_pos,
            self._body_quat,
            self._body_ang_vel,
            self._body_lin_vel,
            None,  # the kinematics pass gives the velocity of the body origin itself
            None,
            out_pos,
            out_quat,
            out_lin_vel,
            out_ang_vel,
        )

    def copy_contact_forces(self, body_ids, out_force, env_ids=None) -> None:
        check_contact_buffers(self.num_envs, body_ids, len(self.model.body_names), out_force)
        envs = self._envs(env_ids)
        _gather_contact_forces(envs, body_ids, self._contact_slots, self._contact_force, out_force)

    def copy_actuator_forces(self, out_force, env_ids=None) -> None:
        if not self._reads_actuator_forces:
            raise ValueError(
                "actuator forces: build the MuJoCo backend with actuator_forces=True to read them"
            )
        check_buffer("out_force", out_force, (self.num_envs, self.model.nu))
        envs = self._envs(env_ids)
        out_force[envs] = self._actuator_force[envs]

    def model_param(self, name: str) -> np.ndarray:
        return _read_param(self._physics, name).copy()

    def set_model_param(self, name, env_ids, element_ids, values) -> None:
        env_ids, element_ids, values = check_model_param(self, name, env_ids, element_ids, values)
        if name in ("actuator_kp", "actuator_kd"):
            check_position_actuators(self._physics, element_ids, name)
        for k, i in enumerate(env_ids.tolist()):
            model = self._own_model(i)
            _write_param(model, name, element_ids, values[k])
            if name in SET_CONST_PARAMS:
                mujoco.mj_setConst(model, self._datas[0])

    def close(self) -> None:
        """Stop the rollout thread pool (also done when the backend is garbage collected)."""
        self._pool.close()

    def per_env_model_bytes(self) -> int:
        """The memory of the envs' own model copies (those whose parameters were set)."""
        copies = sum(model is not self._physics for model in self._models)
        return copies * mujoco.mj_sizeModel(self._physics)

    # -- internals -------------------------------------------------------------------------------

    def _own_model(self, env: int) -> mujoco.MjModel:
        """Env ``env``'s model, copied from the nominal one the first time it is asked for."""
        if self._models[env] is self._physics:
            self._models[env] = copy.copy(self._physics)
        return self._models[env]

    def _envs(self, env_ids: np.ndarray | None) -> np.ndarray:
        return self._all_envs if env_ids is None else check_env_ids(env_ids, self.num_envs)

    def _buffers_for(self, substeps: int):
        """Controls, states and sensors of every substep of one call's envs."""
        substeps = check_positive_int("substeps", substeps)
        if substeps not in self._substep_buffers:
            envs, m = self._envs_per_call, self._physics
            self._substep_buffers[substeps] = (
                np.empty((envs, substeps, m.nu)),
                np.empty((envs, substeps, self._nstate)),
                np.empty((envs, substeps, m.nsensordata)),
            )
        return self._substep_buffers[substeps]

    def _step_envs(self, rows: slice, nstep: int, buffers) -> None:
        """``nstep`` physics steps of envs ``rows`` (one call's at most): their new states and
        the sensors of the last substep."""
        count = rows.stop - rows.start
        ctrl, states, sensors = (buffer[:count] for buffer in buffers)
        ctrl[:] = self._ctrl[rows, None, :]
        self._pool.rollout(
            self._models[rows],
            self._datas,
            self._state[rows],
            ctrl,
            skip_checks=True,
            nstep=nstep,
            state=states,
            sensordata=sensors,
        )
        self._state[rows] = states[:, -1]
        self._sensordata[rows] = sensors[:, -1]


# Parameters whose change mj_setConst must propagate (subtree masses, inverse weights, ...).
SET_CONST_PARAMS = frozenset({"body_mass", "body_ipos", "body_inertia", "dof_armature"})


def _read_param(model: mujoco.MjModel, name: str) -> np.ndarray:
    """The model's values of a contract parameter (a view where MuJoCo stores it as such)."""
    if name == "actuator_kp":
        return model.actuator_gainprm[:, 0]
    if name == "actuator_kd":
        return -model.actuator_biasprm[:, 2]
    return getattr(model, name)


def _write_param(model: mujoco.MjModel, name: str, ids: np.ndarray, values: np.ndarray) -> None:
    if name == "actuator_kp":  # a position actuator: force = kp * (ctrl - q) - kd * qdot
        model.actuator_gainprm[ids, 0] = values
        model.actuator_biasprm[ids, 1] = -values
    elif name == "actuator_kd":
        model.actuator_biasprm[ids, 2] = -values
    else:
        getattr(model, name)[ids] = values


def _touching_bodies(model: mujoco.MjModel) -> np.ndarray:
    """Ids of the bodies other than the world that may take part in a contact: one of their geoms
    has a contype/conaffinity that matches a geom of another body, or is in an explicit pair.
    A superset (parent filtering and excluded pairs are ignored) is all the sensors need."""
    contype = np.zeros(model.nbody, np.int64)
    conaffinity = np.zeros(model.nbody, np.int64)
    np.bitwise_or.at(contype, model.geom_bodyid, model.geom_contype)
    np.bitwise_or.at(conaffinity, model.geom_bodyid, model.geom_conaffinity)
    matches = (contype[:, None] & conaffinity[None, :]) | (conaffinity[:, None] & contype[None, :])
    np.fill_diagonal(matches, 0)  # geoms of one body never collide
    touching = cast(np.ndarray, matches.any(axis=1))  # 2-D in, so an array (not np.bool) out
    touching[model.geom_bodyid[model.pair_geom1]] = True
    touching[model.geom_bodyid[model.pair_geom2]] = True
    touching[0] = False  # the world's force is minus the sum of the others
    return np.flatnonzero(touching).astype(np.int32)


@functools.cache
def _net_contact_force_intprm() -> tuple[int, ...]:
    """The integer parameters of ``<contact data="force" reduce="netforce"/>``, as MuJoCo's own
    parser encodes them (the encoding is not part of MuJoCo's public headers)."""
    spec = mujoco.MjSpec.from_string(
        '<mujoco><sensor><contact data="force" reduce="netforce"/></sensor></mujoco>'
    )
    return tuple(int(value) for value in spec.sensors[0].intprm)


@numba.njit(parallel=True, cache=True)
def _copy_state_rows(envs, qpos, qvel, out_qpos, out_qvel):
    """Rows ``envs`` of the float64 state views into the float32 buffers, in one pass (a
    diverged env's values beyond float32 read inf: the env reports them)."""
    for j in numba.prange(envs.shape[0]):
        i = envs[j]
        for k in range(qpos.shape[1]):
            out_qpos[i, k] = qpos[i, k]
        for k in range(qvel.shape[1]):
            out_qvel[i, k] = qvel[i, k]


@numba.njit(parallel=True, cache=True)
def _gather_contact_forces(envs, body_ids, slots, forces, out):
    """``out[i, k]``: the net contact force on body ``body_ids[k]`` in each env ``i`` of
    ``envs``, from the per-slot forces (N, slots, 3) (any float dtype and strides) and the slot
    of each body."""
    for j in numba.prange(envs.shape[0]):
        i = envs[j]
        for k in range(body_ids.shape[0]):
            slot = slots[body_ids[k]]
            for c in range(3):
                value = 0.0
                if slot >= 0:
                    value = forces[i, slot, c]
                elif slot == WORLD_CONTACT:
                    for other in range(forces.shape[1]):
                        value -= forces[i, other, c]
                out[i, k, c] = value
