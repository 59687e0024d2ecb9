"""Entity: a robot's bodies and joints, bound by name once, then read with copies only.

Binding (the cold path) resolves names to the backend's ids and fails with the names the model
has; :meth:`Entity.update` (the hot path) fills preallocated buffers with one fused body copy,
one joint copy (with a finiteness flag per row) and, for the bodies named in
``contact_body_names``, one contact force copy, which terms then read as state buffers. Two
reads are made only when asked for (a task whose terms read them): the actuator forces of the
last substep (``actuator_force``) and the joint accelerations over the last control step
(``joint_acc``, the change of the joint velocities divided by ``joint_acc_dt``; zero in a row
whose state was just written).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numba
import numpy as np

from fuselab_env_core.backend import SimBackend
from fuselab_env_core.terms import did_you_mean

_PLURAL = {"body": "bodies", "joint": "joints"}


class Entity:
    def __init__(
        self,
        backend: SimBackend,
        body_names: Sequence[str],
        joint_names: Sequence[str] | None = None,
        contact_body_names: Sequence[str] = (),
        *,
        actuator_forces: bool = False,
        joint_acc_dt: float | None = None,
    ):
        facts = backend.model
        self.backend = backend
        self.body_names = tuple(body_names)
        self.joint_names = tuple(facts.joint_names if joint_names is None else joint_names)
        self.contact_body_names = tuple(contact_body_names)
        self.body_ids = _resolve("body", self.body_names, facts.body_names)
        self.joint_ids = _resolve("joint", self.joint_names, facts.joint_names)
        self.contact_body_ids = _resolve("body", self.contact_body_names, facts.body_names)
        n, b, j = backend.num_envs, len(self.body_ids), len(self.joint_ids)
        self.body_pos_w = np.zeros((n, b, 3), np.float32)
        self.body_quat_w = np.zeros((n, b, 4), np.float32)
        self.body_lin_vel_w = np.zeros((n, b, 3), np.float32)
        self.body_ang_vel_w = np.zeros((n, b, 3), np.float32)
        self.joint_pos = np.zeros((n, j), np.float32)
        self.joint_vel = np.zeros((n, j), np.float32)
        # Net contact force on each contact body, world frame, newtons (see copy_contact_forces).
        self.contact_force_w = np.zeros((n, len(self.contact_body_ids), 3), np.float32)
        self.qpos = np.zeros((n, facts.nq), np.float32)
        self.qvel = np.zeros((n, facts.nv), np.float32)
        # Rows whose generalized state is finite (a diverged simulation reads inf or NaN).
        self.state_finite = np.ones(n, np.bool_)
        self.actuator_force = np.zeros((n, facts.nu if actuator_forces else 0), np.float32)
        self.joint_acc = np.zeros((n, j if joint_acc_dt else 0), np.float32)
        self._acc_scale = 1.0 / joint_acc_dt if joint_acc_dt else 0.0
        self._qpos_columns = facts.joint_qpos_adr[self.joint_ids]
        self._qvel_columns = facts.joint_qvel_adr[self.joint_ids]
        self._all_rows = np.arange(n)

    def update(self, env_ids: np.ndarray | None = None) -> None:
        """Copy the current state of the bound bodies and joints, and the contact forces of the
        contact bodies: of every env (no allocation), or of rows ``env_ids`` (those whose state
        was written since the last copy; the other rows must still hold the backend's state)."""
        backend, rows = self.backend, () if env_ids is None else (env_ids,)
        backend.copy_body_state_w(
            self.body_ids,
            self.body_pos_w,
            self.body_quat_w,
            self.body_lin_vel_w,
            self.body_ang_vel_w,
            *rows,
        )
        if self.contact_body_names:
            backend.copy_contact_forces(self.contact_body_ids, self.contact_force_w, *rows)
        if self.actuator_force.shape[1]:
            backend.copy_actuator_forces(self.actuator_force, *rows)
        backend.copy_qpos_qvel(self.qpos, self.qvel, *rows)
        _joint_state(
            self._all_rows if env_ids is None else env_ids,
            self.qpos,
            self.qvel,
            self._qpos_columns,
            self._qvel_columns,
            self.joint_pos,
            self.joint_vel,
            self.state_finite,
            self.joint_acc,
            self._acc_scale if env_ids is None else 0.0,  # a written row: no acceleration
        )

    def joint_columns(self, joint_ids: np.ndarray) -> np.ndarray:
        """The columns of ``joint_pos`` / ``joint_vel`` that hold the model's joints
        ``joint_ids``; a joint the entity does not read is an error naming it."""
        column = {int(j): k for k, j in enumerate(self.joint_ids)}
        missing = [int(j) for j in joint_ids if int(j) not in column]
        if missing:
            names = [self.backend.model.joint_names[j] for j in missing]
            raise KeyError(
                f"joints {names}: not read by this entity ({', '.join(self.joint_names)})"
            )
        return np.array([column[int(j)] for j in joint_ids], np.int64)

    def state(self) -> dict[str, np.ndarray]:
        """The buffers by the names terms use for them (``contact_force_w`` only when the entity
        has contact bodies)."""
        state = {
            "body_pos_w": self.body_pos_w,
            "body_quat_w": self.body_quat_w,
            "body_lin_vel_w": self.body_lin_vel_w,
            "body_ang_vel_w": self.body_ang_vel_w,
            "joint_pos": self.joint_pos,
            "joint_vel": self.joint_vel,
        }
        if self.contact_body_names:
            state["contact_force_w"] = self.contact_force_w
        if self.actuator_force.shape[1]:
            state["actuator_force"] = self.actuator_force
        if self.joint_acc.shape[1]:
            state["joint_acc"] = self.joint_acc
        return state


def _resolve(kind: str, names: Sequence[str], model_names: Sequence[str]) -> np.ndarray:
    index = {name: k for k, name in enumerate(model_names)}
    duplicates = sorted({name for name in names if list(names).count(name) > 1})
    if duplicates:
        raise ValueError(f"{kind} names: {duplicates} listed more than once")
    for name in names:
        if name not in index:
            hint = did_you_mean(name, model_names, list_known=False)
            raise KeyError(
                f"{kind} {name!r} is not in the model{hint} "
                f"(the model's {_PLURAL[kind]}: {', '.join(model_names)})"
            )
    return np.array([index[name] for name in names], dtype=np.int32)


@numba.njit(parallel=True, cache=True)
def _joint_state(
    rows, qpos, qvel, qpos_columns, qvel_columns, joint_pos, joint_vel, finite, joint_acc, acc_scale
):
    """For each row in ``rows``: the joint columns of ``qpos`` / ``qvel``, whether the row's
    whole state is finite (its float64 sum is: a float32 row cannot overflow it) and, when
    ``joint_acc`` has columns, the velocity change times ``acc_scale``."""
    with_acc = joint_acc.shape[1] > 0
    for k in numba.prange(rows.shape[0]):
        i = rows[k]
        for j in range(qpos_columns.shape[0]):
            joint_pos[i, j] = qpos[i, qpos_columns[j]]
        for j in range(qvel_columns.shape[0]):
            velocity = qvel[i, qvel_columns[j]]
            if with_acc:
                joint_acc[i, j] = (velocity - joint_vel[i, j]) * acc_scale
            joint_vel[i, j] = velocity
        row_sum = 0.0
        for j in range(qpos.shape[1]):
            row_sum += qpos[i, j]
        for j in range(qvel.shape[1]):
            row_sum += qvel[i, j]
        finite[i] = math.isfinite(row_sum)
