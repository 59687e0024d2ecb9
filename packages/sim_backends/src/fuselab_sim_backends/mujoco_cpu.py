"""MuJoCo on the CPU: all envs stepped by ``mujoco.rollout``'s thread pool, in C, GIL released.

Body states come from frame sensors (position, quaternion, linear and angular velocity of every
body frame) that the backend adds to the model. MuJoCo evaluates sensors at the start of a step,
so after the physics rollout a second, kinematics-only rollout of one step (timestep 0; contacts,
constraints, actuation and gravity disabled) evaluates them for the final state. The physics
model has sensors disabled instead, so neither pass does work the other repeats.

MuJoCo rejects a non-finite control with a warning and resets that env's data, so NaN actions
corrupt no env; the env detects and reports them itself. MuJoCo's automatic reset of a diverging
state is disabled: such rows stay visible (non-finite) until the env resets them with
:meth:`reset_envs`.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import mujoco
import numpy as np
from mujoco import rollout

from fuselab_env_core.backend import SimBackend, check_buffer
from fuselab_sim_backends.host_copy import check_body_buffers, copy_body_states
from fuselab_sim_backends.model import load_spec, model_facts

log = logging.getLogger(__name__)

BODY_SENSORS = (
    mujoco.mjtSensor.mjSENS_FRAMEPOS,
    mujoco.mjtSensor.mjSENS_FRAMEQUAT,
    mujoco.mjtSensor.mjSENS_FRAMELINVEL,
    mujoco.mjtSensor.mjSENS_FRAMEANGVEL,
)
SENSOR_WIDTH = 13  # 3 + 4 + 3 + 3 per body
STATE = mujoco.mjtState.mjSTATE_FULLPHYSICS
_D = mujoco.mjtDisableBit
# Everything a zero-length step would compute beyond positions, velocities and sensors.
KINEMATICS_ONLY = (
    _D.mjDSBL_CONTACT
    | _D.mjDSBL_CONSTRAINT
    | _D.mjDSBL_EQUALITY
    | _D.mjDSBL_LIMIT
    | _D.mjDSBL_FRICTIONLOSS
    | _D.mjDSBL_ACTUATION
    | _D.mjDSBL_GRAVITY
    | _D.mjDSBL_SPRING
    | _D.mjDSBL_DAMPER
    | _D.mjDSBL_EULERDAMP
    | _D.mjDSBL_WARMSTART
)


class MujocoBackend(SimBackend):
    """``num_envs`` copies of one MJCF model, stepped by ``num_threads`` C threads."""

    def __init__(self, mjcf: str | Path, num_envs: int, num_threads: int | None = None):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs: expected a positive int, got {num_envs!r}")
        if num_threads is None:
            num_threads = os.cpu_count() or 1
        if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
            raise ValueError(f"num_threads: expected a positive int, got {num_threads!r}")
        started = time.perf_counter()
        spec = load_spec(mjcf)
        first_sensor = len(spec.sensors)
        for body in spec.bodies:
            for sensor_type in BODY_SENSORS:
                spec.add_sensor(
                    type=sensor_type, objtype=mujoco.mjtObj.mjOBJ_XBODY, objname=body.name
                )
        self._physics = spec.compile()
        self._physics.opt.disableflags |= int(_D.mjDSBL_SENSOR | _D.mjDSBL_AUTORESET)
        self._kinematics = spec.compile()
        self._kinematics.opt.timestep = 0.0
        self._kinematics.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER  # the cheapest
        self._kinematics.opt.disableflags |= int(KINEMATICS_ONLY | _D.mjDSBL_AUTORESET)
        log.info("compile model with body sensors: %.1f ms", (time.perf_counter() - started) * 1e3)

        self.num_envs = n = num_envs
        self.num_threads = num_threads
        self.model = model_facts(self._physics)
        m = self._physics
        self._nstate = mujoco.mj_stateSize(m, STATE)
        self._pool = rollout.Rollout(nthread=num_threads)
        self._datas = [mujoco.MjData(m) for _ in range(num_threads)]
        self._physics_models = [self._physics] * n
        self._kinematics_models = [self._kinematics] * n

        self._state = np.empty((n, self._nstate))
        self._ctrl = np.zeros((n, m.nu))
        self._substep_buffers: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._kinematics_state = np.empty((n, 1, self._nstate))
        self._kinematics_ctrl = np.zeros((n, 1, m.nu))
        self._sensordata = np.zeros((n, 1, m.nsensordata))
        start = m.sensor_adr[first_sensor]
        bodies = self._sensordata[:, 0, start : start + SENSOR_WIDTH * m.nbody]
        bodies = bodies.reshape(n, m.nbody, SENSOR_WIDTH)
        self._body_pos, self._body_quat = bodies[:, :, 0:3], bodies[:, :, 3:7]
        self._body_lin_vel, self._body_ang_vel = bodies[:, :, 7:10], bodies[:, :, 10:13]
        self._body_rows = np.arange(m.nbody, dtype=np.int32)

        everyone = np.arange(n)
        qpos0 = np.tile(m.qpos0, (n, 1)).astype(np.float32)
        self.reset_envs(everyone, qpos0, np.zeros((n, m.nv), np.float32))
        log.info(
            "MuJoCo backend ready: %d envs, %d threads, nq %d, nv %d, nu %d, dt %g s (%.1f ms)",
            n,
            num_threads,
            m.nq,
            m.nv,
            m.nu,
            m.opt.timestep,
            (time.perf_counter() - started) * 1e3,
        )

    # -- the contract ----------------------------------------------------------------------------

    def set_controls(self, controls: np.ndarray) -> None:
        check_buffer("controls", controls, (self.num_envs, self.model.nu))
        self._ctrl[:] = controls

    def step(self, substeps: int) -> None:
        state_out, sensor_out, ctrl = self._buffers_for(substeps)
        ctrl[:] = self._ctrl[:, None, :]
        self._rollout(self._physics_models, substeps, ctrl, state_out, sensor_out)
        self._state[:] = state_out[:, -1]
        self._evaluate_kinematics()

    def reset_envs(self, env_ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        env_ids = np.asarray(env_ids)
        count = len(env_ids)
        if env_ids.ndim != 1 or env_ids.dtype.kind not in "iu":
            raise TypeError(f"env_ids: expected a 1-D integer array, got {env_ids!r}")
        if count and (env_ids.min() < 0 or env_ids.max() >= self.num_envs):
            raise ValueError(f"env_ids: expected ids in 0..{self.num_envs - 1}, got {env_ids}")
        check_buffer("qpos", qpos, (count, self.model.nq))
        check_buffer("qvel", qvel, (count, self.model.nv))
        m, d = self._physics, self._datas[0]
        for k, env in enumerate(env_ids):
            mujoco.mj_resetData(m, d)
            d.qpos[:] = qpos[k]
            d.qvel[:] = qvel[k]
            mujoco.mj_forward(self._kinematics, d)
            mujoco.mj_getState(m, d, self._state[env], STATE)
            self._sensordata[env, 0] = d.sensordata

    def copy_qpos_qvel(self, out_qpos: np.ndarray, out_qvel: np.ndarray) -> None:
        nq, nv = self.model.nq, self.model.nv
        check_buffer("out_qpos", out_qpos, (self.num_envs, nq))
        check_buffer("out_qvel", out_qvel, (self.num_envs, nv))
        np.copyto(out_qpos, self._state[:, 1 : 1 + nq], casting="same_kind")
        np.copyto(out_qvel, self._state[:, 1 + nq : 1 + nq + nv], casting="same_kind")

    def copy_body_state_w(self, body_ids, out_pos, out_quat, out_lin_vel, out_ang_vel) -> None:
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
            body_ids,
            self._body_pos,
            self._body_quat,
            self._body_ang_vel,
            self._body_lin_vel,
            self._body_pos,  # frame sensors give the velocity of the body origin itself
            self._body_rows,
            out_pos,
            out_quat,
            out_lin_vel,
            out_ang_vel,
        )

    def close(self) -> None:
        """Stop the rollout thread pool (also done when the backend is garbage collected)."""
        self._pool.close()

    # -- internals -------------------------------------------------------------------------------

    def _buffers_for(self, substeps: int):
        if isinstance(substeps, bool) or not isinstance(substeps, int) or substeps < 1:
            raise ValueError(f"substeps: expected a positive int, got {substeps!r}")
        if substeps not in self._substep_buffers:
            n, m = self.num_envs, self._physics
            self._substep_buffers[substeps] = (
                np.empty((n, substeps, self._nstate)),
                np.empty((n, substeps, m.nsensordata)),
                np.empty((n, substeps, m.nu)),
            )
        return self._substep_buffers[substeps]

    def _evaluate_kinematics(self) -> None:
        self._rollout(
            self._kinematics_models,
            1,
            self._kinematics_ctrl,
            self._kinematics_state,
            self._sensordata,
        )

    def _rollout(self, models, nstep, ctrl, state_out, sensor_out) -> None:
        self._pool.rollout(
            models,
            self._datas,
            self._state,
            ctrl,
            skip_checks=True,
            nstep=nstep,
            state=state_out,
            sensordata=sensor_out,
        )
