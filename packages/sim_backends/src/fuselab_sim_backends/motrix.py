"""MotrixSim behind the SimBackend contract: the plain, non-accelerated adapter.

MotrixSim (``pip install fuselab-sim-backends[motrix]``) loads the same MJCF as MuJoCo and steps
a batched ``SceneData`` in parallel. This adapter reads state with MotrixSim's per-quantity
getters (link poses, link linear and angular velocities, dof positions and velocities) and copies
them into the caller's buffers with NumPy; it deliberately does not use the Numba host-copy
kernel of the MuJoCo backends, nor MotrixSim's compiled query/write plans.

Model facts (body, joint and actuator names and order, qpos/qvel layout, ranges, timestep) come
from compiling the same MJCF with MuJoCo (:mod:`fuselab_sim_backends.model`), so every backend
reports MuJoCo's ids; MotrixSim's links, floating bases, joints and actuators are mapped onto
them by name (by position where MuJoCo has no name). MotrixSim facts this relies on, checked
against MuJoCo in the tests:

* ``SceneData.dof_pos`` has MuJoCo's qpos order, but quaternions are (x, y, z, w): a floating
  base is ``[x, y, z, qx, qy, qz, qw]`` and a ball joint ``[qx, qy, qz, qw]``; the adapter
  permutes columns both ways. ``dof_pos`` setters reject a quaternion that is not normalized,
  so ``reset_envs`` normalizes the quaternions it is given.
* ``SceneData.dof_vel`` has MuJoCo's qvel order and frames: a floating base is
  ``[v (world frame), omega (body frame)]``, like a MuJoCo free joint.
* link poses are ``[x, y, z, qx, qy, qz, qw]`` in the world frame; link angular velocity is in
  the world frame. Link linear velocity is in the world frame but, for a link whose joint is not
  anchored at its origin or that has no joint of its own, it is the velocity of another point
  of the link (see :func:`_link_velocity_offsets`); the adapter moves it to the link origin.
  The world body (MuJoCo id 0) is no MotrixSim link: its row is the identity pose at rest.
* like ``mj_step``, ``step_n`` computes link poses and velocities before it integrates: after a
  step they are those of the state its last substep started from, one substep behind
  ``dof_pos`` / ``dof_vel``. ``SceneModel.forward_kinematic`` refreshes poses and velocities
  from the current state (and changes nothing else: the next step starts with its own
  kinematics), so the first body read after a step runs it, and reads always describe the
  current state, as on the MuJoCo backends.
* ``SceneData[DisjointIndices(ids)].reset(..., forward_kinematic=True)`` writes through to the
  selected envs, in the given order, zeroes their controls and refreshes their link poses and
  velocities at once.
* contact forces come from MotrixSim's contact-force report (``SceneModel.reports
  .contact_forces``, enabled at construction; its cost on the G1 is within measurement noise):
  ``get_link_net_contact_forces`` gives each link's net contact force (world frame) and moment.
  The report is a snapshot of the last substep of ``step_n`` (checked: ``step_n(4)`` reports
  what the fourth of four single steps reports), like the MuJoCo backends. A reset keeps the
  last report, so the adapter reads zeros for envs reset since their last step. The world body
  (no MotrixSim link) gets minus the sum over all links: contacts push in equal and opposite
  pairs.

Gaps against the contract:

* ``SceneData.dof_pos`` / ``dof_vel`` return fresh arrays, so ``copy_qpos_qvel`` allocates two
  (num_envs, nq|nv) arrays per call; the link getters write into preallocated scratch, but the
  velocity correction above allocates small NumPy temporaries. The hot path is therefore not
  allocation-free on this backend.
* ``SceneData.reset`` and ``set_dof_pos`` read their input as C-contiguous whatever its strides
  (a column-permuted view gives garbage): the adapter passes contiguous copies.
* ``SceneData.reset`` keeps cached solver warm-start and actuator activation state; with
  activation dynamics (e.g. ``dyntype="filter"``) a reset env keeps its activation history.
  Position and motor actuators have none. The warm start only seeds the solver: a rerun from
  the same reset differs in the last bits of float32 (not bit-identical, as on MuJoCo).
* Dynamics differ from MuJoCo's (another solver and contact model): only kinematics match;
  contact forces agree with MuJoCo's in their balance (a robot standing still carries its
  weight) but not contact by contact.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import mujoco
import numpy as np

from fuselab_env_core.backend import (
    ModelFacts,
    SimBackend,
    check_buffer,
    check_env_ids,
    check_positive_int,
    check_reset,
)
from fuselab_env_core.timing import elapsed_ms
from fuselab_sim_backends.host_copy import check_body_buffers, check_contact_buffers
from fuselab_sim_backends.model import load_spec, model_facts

try:
    import motrixsim
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "fuselab_sim_backends.motrix needs MotrixSim: pip install 'fuselab-sim-backends[motrix]'"
    ) from error

log = logging.getLogger(__name__)


class MotrixBackend(SimBackend):
    """``num_envs`` MotrixSim simulations of one MJCF model (a file path or an XML string);
    ``physics_dt`` replaces the model's option timestep (seconds per physics step)."""

    def __init__(self, mjcf: str | Path, num_envs: int, physics_dt: float | None = None) -> None:
        self.num_envs = check_positive_int("num_envs", num_envs)

        mj_model = load_spec(mjcf, physics_dt).compile()
        self.model: ModelFacts = model_facts(mj_model)

        started = time.perf_counter()
        self._mx = _load_motrix(mjcf)
        if physics_dt is not None:
            self._mx.options.timestep = physics_dt
        self._mx.reports.contact_forces = True  # produced from the next step on
        log.info(
            "MotrixSim load: %.1f ms (%d links, %d dof pos, %d dof vel, %d actuators)",
            elapsed_ms(started),
            self._mx.num_links,
            self._mx.num_dof_pos,
            self._mx.num_dof_vel,
            self._mx.num_actuators,
        )

        started = time.perf_counter()
        self._check_timestep(mj_model)
        self._link_rows = _map_bodies(mj_model, self._mx)
        # What the link getters are asked for: every link in MuJoCo body order (None: as is).
        in_order = np.array_equal(self._link_rows, np.arange(self._mx.num_links))
        self._link_query: list[int] | None = None if in_order else self._link_rows.tolist()
        self._quat_starts: list[int] = []  # MuJoCo qpos columns where a quaternion (w..z) starts
        self._mx_qpos_col, self._mx_qvel_col = self._map_dofs(mj_model)
        # MuJoCo column of each MotrixSim column: the inverse permutations, used on reset.
        self._mj_qpos_col = np.argsort(self._mx_qpos_col).astype(np.intp)
        self._mj_qvel_col = np.argsort(self._mx_qvel_col).astype(np.intp)
        self._mx_ctrl_col = _map_actuators(mj_model, self._mx)
        self._ctrl_identity = bool(np.array_equal(self._mx_ctrl_col, np.arange(mj_model.nu)))
        self._offset_rows, self._offset_local = _link_velocity_offsets(self._mx, self._link_rows)
        log.info(
            "MotrixSim layout map: %.1f ms (%d link velocities moved to the link origin)",
            elapsed_ms(started),
            self._offset_rows.size,
        )

        started = time.perf_counter()
        self._data = motrixsim.SceneData(self._mx, batch=[self.num_envs])
        self._kinematics_stale = False  # link poses and velocities describe dof_pos / dof_vel
        self._allocate_scratch(mj_model.nbody)
        qpos0 = np.broadcast_to(mj_model.qpos0.astype(np.float32), (self.num_envs, mj_model.nq))
        self.reset_envs(
            np.arange(self.num_envs, dtype=np.int32),
            np.ascontiguousarray(qpos0),
            np.zeros((self.num_envs, mj_model.nv), np.float32),
        )
        log.info(
            "MotrixSim data: %.1f ms (%d envs, physics_dt %.4g s)",
            elapsed_ms(started),
            self.num_envs,
            self.model.physics_dt,
        )

    # ------------------------------------------------------------------ contract

    def set_controls(self, controls: np.ndarray) -> None:
        check_buffer("controls", controls, (self.num_envs, self.model.nu))
        if self._ctrl_identity:
            self._data.actuator_ctrls = controls
        else:
            self._ctrl[:, self._mx_ctrl_col] = controls
            self._data.actuator_ctrls = self._ctrl

    def step(self, substeps: int) -> None:
        self._mx.step_n(self._data, check_positive_int("substeps", substeps))
        self._kinematics_stale = True
        self._contact_cleared[:] = False

    def reset_envs(self, env_ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        ids = check_reset(env_ids, qpos, qvel, self.num_envs, self.model.nq, self.model.nv)
        if ids.shape[0] == 0:
            return
        dof_pos = qpos[:, self._mj_qpos_col]  # MotrixSim layout, quaternions (x, y, z, w)
        for start in self._quat_starts:
            quat = qpos[:, start : start + 4]
            norm = np.linalg.norm(quat, axis=1)
            if (norm < 1e-6).any():
                rows = np.flatnonzero(norm < 1e-6).tolist()
                raise ValueError(
                    f"qpos: columns {start}..{start + 3} hold a quaternion (w, x, y, z); rows "
                    f"{rows} have norm ~0, expected a unit quaternion"
                )
            mx_cols = self._mx_qpos_col[start : start + 4]
            dof_pos[:, mx_cols] = quat / norm[:, None]
        dof_vel = qvel[:, self._mj_qvel_col]
        # MotrixSim reads these buffers as C-contiguous whatever their strides; a fancy-indexed
        # column permutation is not, so make it so.
        real = self._link_pose.dtype
        self._contact_cleared[ids] = True  # the last contact report stays until the next step
        subset = self._data[motrixsim.DisjointIndices(ids)]
        subset.reset(
            self._mx,
            dof_pos=np.ascontiguousarray(dof_pos, dtype=real),
            dof_vel=np.ascontiguousarray(dof_vel, dtype=real),
            forward_kinematic=True,
            reset_overrides=False,
        )

    # The reads fill every row: MotrixSim's getters read whole batches.

    def copy_qpos_qvel(self, out_qpos, out_qvel, env_ids=None) -> None:
        check_buffer("out_qpos", out_qpos, (self.num_envs, self.model.nq))
        check_buffer("out_qvel", out_qvel, (self.num_envs, self.model.nv))
        if env_ids is not None:
            check_env_ids(env_ids, self.num_envs)
        _gather(self._data.dof_pos, self._mx_qpos_col, out_qpos)
        _gather(self._data.dof_vel, self._mx_qvel_col, out_qvel)

    def copy_body_state_w(
        self,
        body_ids: np.ndarray,
        out_pos: np.ndarray,
        out_quat: np.ndarray,
        out_lin_vel: np.ndarray,
        out_ang_vel: np.ndarray,
        env_ids: np.ndarray | None = None,
    ) -> None:
        num_bodies = len(self.model.body_names)
        check_body_buffers(
            self.num_envs, body_ids, num_bodies, out_pos, out_quat, out_lin_vel, out_ang_vel
        )
        if env_ids is not None:
            check_env_ids(env_ids, self.num_envs)
        if body_ids.shape[0] == 0:
            return
        if num_bodies > 1:
            # Per-quantity getters into preallocated scratch (MuJoCo body order, rows 1..),
            # the reported linear velocities moved to the link origins, then plain copies.
            data, rows = self._data, self._link_query
            if self._kinematics_stale:
                self._mx.forward_kinematic(data)
                self._kinematics_stale = False
            self._mx.get_link_poses(data, indices=rows, out=self._link_pose)
            self._mx.get_link_linear_velocities(data, indices=rows, out=self._link_lin_vel)
            self._mx.get_link_angular_velocities(data, indices=rows, out=self._link_ang_vel)
            if self._offset_rows.size:
                # v_origin = v_reported + omega x (R_link @ offset), see _link_velocity_offsets.
                k = self._offset_rows
                lever = _rotate_xyzw(self._link_pose[:, k, 3:7], self._offset_local)
                self._link_lin_vel[:, k] += np.cross(self._link_ang_vel[:, k], lever)
            self._pos[:, 1:] = self._link_pose[:, :, 0:3]
            self._quat[:, 1:, 0] = self._link_pose[:, :, 6]  # (x, y, z, w) -> (w, x, y, z)
            self._quat[:, 1:, 1:] = self._link_pose[:, :, 3:6]
            self._lin_vel[:, 1:] = self._link_lin_vel
            self._ang_vel[:, 1:] = self._link_ang_vel
        _gather(self._pos, body_ids, out_pos)
        _gather(self._quat, body_ids, out_quat)
        _gather(self._lin_vel, body_ids, out_lin_vel)
        _gather(self._ang_vel, body_ids, out_ang_vel)

    def copy_contact_forces(self, body_ids, out_force, env_ids=None) -> None:
        num_bodies = len(self.model.body_names)
        check_contact_buffers(self.num_envs, body_ids, num_bodies, out_force)
        if env_ids is not None:
            check_env_ids(env_ids, self.num_envs)
        if body_ids.shape[0] == 0:
            return
        force = self._contact_force
        if num_bodies > 1 and not self._contact_cleared.all():  # no report before a first step
            self._mx.get_link_net_contact_forces(
                self._data, indices=self._link_query, out=self._link_wrench
            )
            force[:, 1:] = self._link_wrench[:, :, 0:3]
            np.sum(force[:, 1:], axis=1, out=force[:, 0])
            np.negative(force[:, 0], out=force[:, 0])
            np.copyto(force, 0.0, where=self._contact_cleared[:, None, None])
        else:
            force[...] = 0.0
        _gather(force, body_ids, out_force)

    # ------------------------------------------------------------------ cold path

    def _check_timestep(self, mj_model: mujoco.MjModel) -> None:
        mx_dt = float(self._mx.options.timestep)
        if not np.isclose(mx_dt, mj_model.opt.timestep, rtol=1e-6, atol=0.0):
            raise ValueError(
                f"timestep: MotrixSim reads {mx_dt} s from the MJCF, MuJoCo "
                f"{mj_model.opt.timestep} s; expected the same option timestep"
            )

    def _map_dofs(self, mj: mujoco.MjModel) -> tuple[np.ndarray, np.ndarray]:
        """MotrixSim dof_pos / dof_vel column of each MuJoCo qpos / qvel column."""
        mx = self._mx
        if (mx.num_dof_pos, mx.num_dof_vel) != (mj.nq, mj.nv):
            raise ValueError(
                f"mjcf: MotrixSim has {mx.num_dof_pos} dof positions and {mx.num_dof_vel} dof "
                f"velocities, MuJoCo nq={mj.nq} and nv={mj.nv}; the model uses a joint type "
                "the adapter cannot map (free, ball, hinge and slide are supported)"
            )
        qpos_col = np.full(mj.nq, -1, np.intp)
        qvel_col = np.full(mj.nv, -1, np.intp)
        joint_kinds = mujoco.mjtJoint
        seen_per_body: dict[int, int] = {}
        for j in range(mj.njnt):
            kind = mj.jnt_type[j]
            qadr, vadr, body = int(mj.jnt_qposadr[j]), int(mj.jnt_dofadr[j]), int(mj.jnt_bodyid[j])
            link = mx.links[int(self._link_rows[body - 1])]
            if kind == joint_kinds.mjJNT_FREE:
                base = link.body.floatingbase
                if base is None or link.body.base_link.index != link.index:
                    raise ValueError(
                        f"mjcf: MuJoCo free joint {_name(mj, mujoco.mjtObj.mjOBJ_JOINT, j)!r} "
                        f"has no MotrixSim floating base on link {link.name!r}"
                    )
                p, v = base.dof_pos_start, base.dof_vel_start
                qpos_col[qadr : qadr + 7] = [p, p + 1, p + 2, p + 6, p + 3, p + 4, p + 5]
                qvel_col[vadr : vadr + 6] = np.arange(v, v + 6)
                self._quat_starts.append(qadr + 3)
                continue
            local = seen_per_body.get(body, 0)
            seen_per_body[body] = local + 1
            joint = _motrix_joint(mj, mx, j, link, local)
            if kind == joint_kinds.mjJNT_BALL:
                p, v = joint.dof_pos_index, joint.dof_vel_index
                qpos_col[qadr : qadr + 4] = [p + 3, p, p + 1, p + 2]
                qvel_col[vadr : vadr + 3] = np.arange(v, v + 3)
                self._quat_starts.append(qadr)
            else:
                qpos_col[qadr] = joint.dof_pos_index
                qvel_col[vadr] = joint.dof_vel_index
        for name, cols, size in (("qpos", qpos_col, mj.nq), ("qvel", qvel_col, mj.nv)):
            if not np.array_equal(np.sort(cols), np.arange(size)):
                raise ValueError(
                    f"mjcf: MotrixSim's {name} layout does not map one to one onto MuJoCo's "
                    f"(MotrixSim column of each MuJoCo column: {cols.tolist()})"
                )
        return qpos_col, qvel_col

    def _allocate_scratch(self, nbody: int) -> None:
        real = np.dtype(motrixsim.real_dtype())
        n, links = self.num_envs, nbody - 1
        self._link_pose = np.zeros((n, links, 7), real)
        self._link_lin_vel = np.zeros((n, links, 3), real)
        self._link_ang_vel = np.zeros((n, links, 3), real)
        # Per MuJoCo body id; row 0, the world, stays the identity pose at rest.
        self._pos = np.zeros((n, nbody, 3), np.float32)
        self._quat = np.zeros((n, nbody, 4), np.float32)
        self._quat[:, 0, 0] = 1.0
        self._lin_vel = np.zeros((n, nbody, 3), np.float32)
        self._ang_vel = np.zeros((n, nbody, 3), np.float32)
        self._link_wrench = np.zeros((n, links, 6), real)
        self._contact_force = np.zeros((n, nbody, 3), np.float32)  # per MuJoCo body id
        self._contact_cleared = np.ones(n, bool)  # reset (or new) since the last step
        self._ctrl = np.zeros((n, self.model.nu), real)


def _load_motrix(mjcf: str | Path) -> motrixsim.SceneModel:
    xml = mjcf if isinstance(mjcf, str) and mjcf.lstrip().startswith("<") else None
    path = None if xml is not None else str(Path(mjcf).expanduser())
    where = "the MJCF string" if path is None else repr(path)
    try:
        if xml is not None:
            return motrixsim.load_mjcf_str(xml)
        return motrixsim.load_model(str(path))
    except Exception as error:  # MotrixSim raises plain exceptions from Rust
        raise ValueError(f"mjcf: MotrixSim could not load {where}: {error}") from None


def _name(mj: mujoco.MjModel, kind: mujoco.mjtObj, index: int) -> str | None:
    return mujoco.mj_id2name(mj, kind, index) or None


def _map_bodies(mj: mujoco.MjModel, mx: motrixsim.SceneModel) -> np.ndarray:
    """MotrixSim link index of each MuJoCo body 1.. (the world, body 0, is no link)."""
    rows = np.empty(mj.nbody - 1, np.int64)
    for b in range(1, mj.nbody):
        name = _name(mj, mujoco.mjtObj.mjOBJ_BODY, b)
        if name is not None:
            link = mx.get_link_index(name)
        else:  # unnamed in MuJoCo: same depth-first position, if also unnamed there
            same_place = b - 1 < mx.num_links and mx.link_names[b - 1] is None
            link = b - 1 if same_place else None
        if link is None:
            raise ValueError(
                f"mjcf: MuJoCo body {b} ({name or 'unnamed'}) has no MotrixSim link; "
                f"MotrixSim links: {mx.link_names}"
            )
        rows[b - 1] = link
    return rows


def _motrix_joint(mj: mujoco.MjModel, mx, j: int, link, local: int):
    """The MotrixSim joint of MuJoCo joint ``j``: by name, else the ``local``-th of its link."""
    name = _name(mj, mujoco.mjtObj.mjOBJ_JOINT, j)
    joint = mx.get_joint(name) if name is not None else None
    if joint is None and name is None and local < link.num_joints:
        joint = mx.joints[link.joint_indices[local]]
    if joint is None:
        raise ValueError(
            f"mjcf: MuJoCo joint {j} ({name or 'unnamed'}) has no MotrixSim joint; "
            f"MotrixSim joints: {mx.joint_names}"
        )
    return joint


def _map_actuators(mj: mujoco.MjModel, mx: motrixsim.SceneModel) -> np.ndarray:
    """MotrixSim control column of each MuJoCo actuator."""
    if mx.num_actuators != mj.nu:
        raise ValueError(
            f"mjcf: MotrixSim has {mx.num_actuators} actuators, MuJoCo nu={mj.nu}; "
            f"MotrixSim actuators: {mx.actuator_names}"
        )
    cols = np.empty(mj.nu, np.intp)
    for a in range(mj.nu):
        name = _name(mj, mujoco.mjtObj.mjOBJ_ACTUATOR, a)
        col = mx.get_actuator_index(name) if name is not None else a
        if col is None:
            raise ValueError(
                f"mjcf: MuJoCo actuator {name!r} has no MotrixSim actuator; "
                f"MotrixSim actuators: {mx.actuator_names}"
            )
        cols[a] = col
    if not np.array_equal(np.sort(cols), np.arange(mj.nu)):
        raise ValueError(f"mjcf: MotrixSim actuators do not map one to one: {cols.tolist()}")
    return cols


def _link_velocity_offsets(mx, link_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where MotrixSim's link linear velocity is measured, as a correction to the link origin.

    MotrixSim (0.10.1) simulates "low" links, one per joint, whose origin is the joint anchor;
    a model link is a low link plus a fixed transform ``l2h = (t, q)`` (``link_low_maps``), and
    links without joints share their parent's low link. The linear velocity MotrixSim reports for
    a model link is the velocity of the point ``-(M + I) t`` of the link frame (M: rotation of
    q), not of its origin, unless ``t`` is zero (joint anchored at the origin, floating base).
    Rigid motion moves it to the origin: ``v_origin = v_reported + omega x (R_link (M + I) t)``.
    The kinematic parity tests against MuJoCo pin this (offset joint anchors, chains of rotated
    jointless links); a MotrixSim that changes the convention fails them.

    Returns the rows of ``link_rows`` that need the correction and their (K, 3) local offsets.
    """
    low_maps = mx.low.link_low_maps
    rows, offsets = [], []
    for row, link in enumerate(link_rows):
        low = low_maps[int(link)]
        if low.ty != "link":  # mocap bodies: no joint, no low link transform
            continue
        t = np.asarray(low.l2h_transform[:3], np.float64)
        q = np.asarray(low.l2h_transform[3:7], np.float64)
        offset = (_quat_matrix_xyzw(q) + np.eye(3)) @ t
        if np.abs(offset).max() > 1e-9:
            rows.append(row)
            offsets.append(offset)
    return np.asarray(rows, np.intp), np.asarray(offsets, np.float32).reshape(len(rows), 3)


def _quat_matrix_xyzw(q: np.ndarray) -> np.ndarray:
    x, y, z, w = q / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def _rotate_xyzw(quat: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """Rotate ``vec`` (K, 3) by unit quaternions ``quat`` (..., K, 4) in (x, y, z, w) order."""
    axis, w = quat[..., 0:3], quat[..., 3:4]
    twice_cross = 2.0 * np.cross(axis, vec)
    return vec + w * twice_cross + np.cross(axis, twice_cross)


def _gather(source: np.ndarray, columns: np.ndarray, out: np.ndarray) -> None:
    """``out[:, k] = source[:, columns[k]]``; into ``out`` without a temporary when dtypes match
    (``columns`` are validated beforehand, so clipping never changes an index)."""
    if source.dtype == out.dtype:
        np.take(source, columns, axis=1, out=out, mode="clip")
    else:
        out[...] = np.take(source, columns, axis=1)
