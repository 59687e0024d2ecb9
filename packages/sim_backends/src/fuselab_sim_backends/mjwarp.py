"""The MuJoCo Warp backend: ``num_envs`` Warp worlds of one MJCF model, stepped together.

One :class:`MjWarpBackend` holds one ``mujoco_warp`` Model and one Data with ``nworld =
num_envs``, on Warp's CUDA device when there is one, else on Warp's CPU device. Every batch of
device work (``substeps`` physics steps, a state write, a kinematics refresh) is recorded once
into a Warp graph and replayed: Warp records graphs on its CPU device as well as on CUDA, and
a replay costs a fraction of the Python launch overhead of the same ~100 kernels launched one by
one.

Reading the state goes through host arrays allocated once (pinned on CUDA): the device arrays
are copied to them at most once per step, when first asked for, and the one shared host-copy
kernel of :mod:`fuselab_sim_backends.host_copy` gathers the selected bodies from them.

Two MuJoCo details this backend hides from the caller:

* ``mj_step`` leaves the derived quantities (``xpos``, ``xquat``, ``cvel``, ...) at the state
  *before* the last integration; body reads here are refreshed (kinematics, subtree centres of
  mass, com velocities) so they always describe the current ``qpos``/``qvel``.
* ``cvel`` is (angular; linear) with the linear part the velocity of ``subtree_com`` of the
  body's root; the host-copy kernel moves it to the body origin.

Contact forces are computed on demand, once per step, on the device: ``mujoco_warp``'s public
``contact_force`` (the counterpart of ``mj_contactForce``) turns each active contact's
constraint force into a world-frame force on its second geom, and one kernel adds it to that
geom's body and subtracts it from the first geom's body. ``d.contact`` and ``d.efc.force`` are
those of the last substep (collision and solve run from the state that substep started from;
the kinematics refresh above touches neither), as on the MuJoCo CPU backend. Reset worlds read
zeros until they step again (``set_state`` leaves the last step's contacts in place). Flex
contacts are not attributed to bodies.

Per-env model parameters: a parameter set for some worlds becomes a per-world array of the
Model (mujoco_warp's batched fields, first dimension nworld instead of 1), written from a host
copy; the recorded graphs are recorded again since they hold the arrays they read, and
``set_const`` recomputes what masses, inertias and armature change.

Non-finite controls are passed through as they are. MuJoCo Warp clamps the control of a
ctrl-limited actuator with ``wp.clamp``, which turns NaN into a range bound, so such rows stay
finite (but wrong); an unlimited actuator's NaN reaches its env's state. Either way no other
world is touched (worlds are independent), and :meth:`MjWarpBackend.reset_envs` recovers it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import mujoco
import mujoco_warp as mjw
import numpy as np
import warp as wp

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
from fuselab_sim_backends.model import check_position_actuators, load_spec, model_facts

__all__ = ["MjWarpBackend"]

logger = logging.getLogger(__name__)

# What a reset writes for the reset envs, through mujoco_warp's per-world set_state: the
# physics state (time, qpos, qvel, activations) and the solver warm start; everything else the
# caller set (controls, applied forces) is left as it is.
_RESET_STATE_PARTS = (
    mjw.State.TIME,
    mjw.State.QPOS,
    mjw.State.QVEL,
    mjw.State.ACT,
    mjw.State.WARMSTART,
)


# Kernel parameters are annotated the way Warp documents (``wp.array(dtype=...)``, a call that
# is not a valid type expression, hence the line-level ignores; the ``wp.array[dtype]`` form
# needs a newer Warp than the warp-lang>=1.8 this package accepts), and ``a, b = wp.tid()``
# unpacks a union that Warp's stub cannot narrow by arity.
@wp.kernel
def _net_contact_forces(
    nacon: wp.array(dtype=int),  # pyright: ignore[reportInvalidTypeForm]
    contact_geom: wp.array(dtype=wp.vec2i),  # pyright: ignore[reportInvalidTypeForm]
    contact_worldid: wp.array(dtype=int),  # pyright: ignore[reportInvalidTypeForm]
    contact_force: wp.array(dtype=wp.spatial_vector),  # pyright: ignore[reportInvalidTypeForm]
    geom_bodyid: wp.array(dtype=int),  # pyright: ignore[reportInvalidTypeForm]
    cleared: wp.array(dtype=wp.bool),  # pyright: ignore[reportInvalidTypeForm]
    out: wp.array2d(dtype=wp.vec3),  # pyright: ignore[reportInvalidTypeForm]
):
    """Per (world, body) net contact force: every contact pushes its second geom's body by its
    world-frame force and its first geom's body by the opposite (``out`` zeroed beforehand)."""
    contact = wp.tid()
    if contact >= nacon[0]:
        return
    world = contact_worldid[contact]
    geoms = contact_geom[contact]
    if cleared[world] or geoms[0] < 0 or geoms[1] < 0:  # reset since its step; flex contact
        return
    force = wp.spatial_top(contact_force[contact])
    wp.atomic_add(out, world, geom_bodyid[geoms[1]], force)
    wp.atomic_sub(out, world, geom_bodyid[geoms[0]], force)


@wp.kernel
def _zero_vec3(out: wp.array2d(dtype=wp.vec3)):  # pyright: ignore[reportInvalidTypeForm]
    world, body = wp.tid()  # pyright: ignore[reportAssignmentType, reportGeneralTypeIssues]
    out[world, body] = wp.vec3(0.0)


# Contract parameter -> (Model field, column or None, sign): kp is the gain of a position
# actuator, kd minus its velocity bias.
_WARP_PARAMS: dict[str, tuple[str, int | None, float]] = {
    "geom_friction": ("geom_friction", None, 1.0),
    "body_mass": ("body_mass", None, 1.0),
    "body_ipos": ("body_ipos", None, 1.0),
    "body_inertia": ("body_inertia", None, 1.0),
    "actuator_kp": ("actuator_gainprm", 0, 1.0),
    "actuator_kd": ("actuator_biasprm", 2, -1.0),
    "dof_damping": ("dof_damping", None, 1.0),
    "dof_armature": ("dof_armature", None, 1.0),
    "dof_frictionloss": ("dof_frictionloss", None, 1.0),
}


# What set_const derives from masses, inertias and armature (per world once those are).
_SET_CONST_OUTPUTS = (
    "body_subtreemass",
    "body_invweight0",
    "dof_invweight0",
    "actuator_acc0",
    "tendon_invweight0",
)


def _resolve_device(device: str | None) -> wp.Device:
    if device is None:
        return wp.get_device("cuda" if wp.is_cuda_available() else "cpu")
    if not isinstance(device, str):
        raise TypeError(
            f"device: expected a Warp device name such as 'cpu' or 'cuda:0', got {device!r}"
        )
    if device.startswith("cuda") and not wp.is_cuda_available():
        raise ValueError(f"device: {device!r} requested but Warp finds no CUDA device; use 'cpu'")
    try:
        return wp.get_device(device)
    except (ValueError, RuntimeError) as error:
        names = [str(d) for d in wp.get_devices()]
        raise ValueError(f"device: unknown Warp device {device!r}; available: {names}") from error


class MjWarpBackend(SimBackend):
    """``num_envs`` MuJoCo Warp worlds of the model ``mjcf`` (a file path or an XML string).

    ``device`` is a Warp device name; by default ``'cuda'`` when Warp finds one, else ``'cpu'``.
    ``physics_dt`` replaces the model's option timestep (seconds per physics step).
    Besides the :class:`SimBackend` contract it exposes ``mj_model`` (the host MuJoCo model),
    ``device`` (the Warp device name), ``body_rootid`` and :meth:`host_body_arrays`.
    """

    def __init__(
        self,
        mjcf: str | Path,
        num_envs: int,
        device: str | None = None,
        physics_dt: float | None = None,
    ):
        self.num_envs = check_positive_int("num_envs", num_envs)
        self._all_envs = np.arange(self.num_envs)
        wp.init()
        wp_device = _resolve_device(device)
        self.device = str(wp_device)

        spec = load_spec(mjcf, physics_dt)
        start = time.perf_counter()
        try:
            mjm = spec.compile()
        except ValueError as error:
            raise ValueError(f"mjcf: MuJoCo could not compile the model: {error}") from None
        self.mj_model = mjm
        self.model = model_facts(mjm)
        logger.info(
            "mjwarp: compile MuJoCo model %.1f ms (nq=%d nv=%d nu=%d nbody=%d)",
            elapsed_ms(start),
            mjm.nq,
            mjm.nv,
            mjm.nu,
            mjm.nbody,
        )
        self.body_rootid = np.ascontiguousarray(mjm.body_rootid, dtype=np.int32)
        self.body_rootid.setflags(write=False)

        with wp.ScopedDevice(wp_device):
            start = time.perf_counter()
            try:
                self._m = mjw.put_model(mjm)
            except NotImplementedError as error:
                raise NotImplementedError(
                    f"mjcf: MuJoCo Warp cannot simulate this model: {error}"
                ) from error
            logger.info("mjwarp: put_model on %s %.1f ms", self.device, elapsed_ms(start))

            start = time.perf_counter()
            self._d = mjw.make_data(mjm, nworld=self.num_envs)
            logger.info(
                "mjwarp: make_data nworld=%d %.1f ms (naconmax=%d njmax=%d)",
                self.num_envs,
                elapsed_ms(start),
                self._d.naconmax,
                self._d.njmax,
            )

            # Compile (or load from Warp's kernel cache) the kernels of forward dynamics, which
            # are most of a step's, and make the derived quantities consistent with qpos0. It
            # also loads the modules before any graph is recorded.
            start = time.perf_counter()
            mjw.forward(self._m, self._d)
            wp.synchronize_device(wp_device)
            logger.info("mjwarp: first compile (forward) %.1f ms", elapsed_ms(start))
        self._wp_device = wp_device
        self._is_cuda = wp_device.is_cuda
        self._first_step_logged = False

        d = self._d
        n = self.num_envs
        pinned = self._is_cuda

        def host_buffer(shape: tuple[int, ...], dtype) -> tuple[wp.array, np.ndarray]:
            """A host Warp array (pinned on CUDA, so copies can be asynchronous) and its view."""
            host = wp.empty(shape, dtype=dtype, device="cpu", pinned=pinned)
            return host, host.numpy()

        # Host mirrors of the device arrays the reads need, refreshed at most once per step.
        self._xpos_h, self._xpos = host_buffer(d.xpos.shape, d.xpos.dtype)
        self._xquat_h, self._xquat = host_buffer(d.xquat.shape, d.xquat.dtype)
        self._cvel_h, self._cvel = host_buffer(d.cvel.shape, d.cvel.dtype)
        self._subtree_com_h, self._subtree_com = host_buffer(
            d.subtree_com.shape, d.subtree_com.dtype
        )
        self._body_pairs = (
            (self._xpos_h, d.xpos),
            (self._xquat_h, d.xquat),
            (self._cvel_h, d.cvel),
            (self._subtree_com_h, d.subtree_com),
        )
        self._cvel_ang = self._cvel[:, :, 0:3]  # views made once: none per call
        self._cvel_lin = self._cvel[:, :, 3:6]
        self._qpos_h, self._qpos = host_buffer(d.qpos.shape, d.qpos.dtype)
        self._qvel_h, self._qvel = host_buffer(d.qvel.shape, d.qvel.dtype)
        self._ctrl_h, self._ctrl = host_buffer(d.ctrl.shape, d.ctrl.dtype)

        # Reset staging: one row of mujoco_warp's concatenated state per env, and a world mask.
        self._reset_sig = 0
        self._reset_cols: dict[int, slice] = {}
        col = 0
        for part in sorted(_RESET_STATE_PARTS):  # set_state reads the parts in bit order
            size = int(mujoco.mj_stateSize(mjm, int(part)))
            self._reset_cols[int(part)] = slice(col, col + size)
            self._reset_sig |= int(part)
            col += size
        self._state_h, self._state = host_buffer((n, col), wp.float32)
        self._state_d = wp.zeros((n, col), dtype=wp.float32, device=wp_device)
        self._mask_h, self._mask = host_buffer((n,), wp.bool)
        self._mask_d = wp.zeros(n, dtype=wp.bool, device=wp_device)
        self._qpos_cols = self._reset_cols[int(mjw.State.QPOS)]
        self._qvel_cols = self._reset_cols[int(mjw.State.QVEL)]

        # Contact forces: per contact (world frame), then per (world, body), then the host.
        with wp.ScopedDevice(wp_device):
            self._contact_ids = wp.array(np.arange(d.naconmax, dtype=np.int32), dtype=int)
            # Warp's stub types the host wp.zeros by its in-kernel namesake (Array); it is an array
            self._contact_force6 = cast(wp.array, wp.zeros(d.naconmax, dtype=wp.spatial_vector))
            self._body_force_d = wp.zeros((n, mjm.nbody), dtype=wp.vec3)
            self._cleared_d = wp.zeros(n, dtype=wp.bool)
        self._body_force_h, self._body_force = host_buffer((n, mjm.nbody), wp.vec3)
        self._cleared_h, self._cleared = host_buffer((n,), wp.bool)
        self._cleared[:] = True  # no step yet

        self._graphs: dict[object, wp.Graph] = {}
        self._batched: dict[str, np.ndarray] = {}  # Model field -> its per-world host copy
        self._kinematics_stale = False  # forward just ran
        self._body_host_stale = True
        self._state_host_stale = True
        self._contact_host_stale = True

    # -- device work, each batch recorded once into a Warp graph -------------------------------

    def _launch(self, key: object, record: Callable[[], None]) -> None:
        graph = self._graphs.get(key)
        if graph is None:
            with wp.ScopedDevice(self._wp_device), wp.ScopedCapture(device=self._wp_device) as cap:
                record()
            if cap.graph is None:
                raise RuntimeError(f"mjwarp: Warp recorded no graph for {key!r}")
            graph = self._graphs[key] = cap.graph
        wp.capture_launch(graph)

    def _record_steps(self, substeps: int) -> None:
        for _ in range(substeps):
            mjw.step(self._m, self._d)

    def _record_reset(self) -> None:
        state, sig, mask = self._state_d, self._reset_sig, self._mask_d
        mjw.set_state(self._m, self._d, state, sig, active=mask)  # pyright: ignore[reportArgumentType]

    def _record_kinematics(self) -> None:
        # What the body reads need, for the current qpos/qvel: poses, subtree centres of mass
        # (with cdof), com-based velocities. The next step recomputes all of it anyway.
        mjw.kinematics(self._m, self._d)
        mjw.com_pos(self._m, self._d)
        mjw.com_vel(self._m, self._d)

    def _record_contact_forces(self) -> None:
        m, d, out = self._m, self._d, self._body_force_d
        wp.launch(_zero_vec3, dim=out.shape, outputs=[out])
        mjw.contact_force(m, d, self._contact_ids, True, self._contact_force6)
        wp.launch(
            _net_contact_forces,
            dim=d.naconmax,
            inputs=[
                d.nacon,
                d.contact.geom,
                d.contact.worldid,
                self._contact_force6,
                m.geom_bodyid,
                self._cleared_d,
            ],
            outputs=[out],
        )

    def _wait_for_device(self) -> None:
        # Copies between pinned host memory and a CUDA device are asynchronous.
        if self._is_cuda:
            wp.synchronize_device(self._wp_device)

    # -- the contract ---------------------------------------------------------------------------

    def set_controls(self, controls: np.ndarray) -> None:
        check_buffer("controls", controls, (self.num_envs, self.model.nu))
        if self.model.nu == 0:
            return
        self._wait_for_device()  # the staging buffer may still feed the previous copy
        np.copyto(self._ctrl, controls)
        wp.copy(self._d.ctrl, self._ctrl_h)

    def step(self, substeps: int) -> None:
        substeps = check_positive_int("substeps", substeps)
        first = not self._first_step_logged
        start = time.perf_counter()
        self._launch(("step", substeps), lambda: self._record_steps(substeps))
        if first:
            self._wait_for_device()
            self._first_step_logged = True
            logger.info(
                "mjwarp: first step (%d substeps: integrator compile, graph recording) %.1f ms",
                substeps,
                elapsed_ms(start),
            )
        self._kinematics_stale = True
        self._body_host_stale = True
        self._state_host_stale = True
        self._contact_host_stale = True
        self._cleared[:] = False  # no pending copy reads it: every read waits for the device

    def reset_envs(self, env_ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        ids = check_reset(env_ids, qpos, qvel, self.num_envs, self.model.nq, self.model.nv)
        if ids.shape[0] == 0:
            return
        self._wait_for_device()
        self._mask[:] = False
        self._mask[ids] = True
        self._cleared[ids] = True
        self._state[ids] = 0.0  # time, activations, warm start
        self._state[ids, self._qpos_cols] = qpos
        self._state[ids, self._qvel_cols] = qvel
        wp.copy(self._mask_d, self._mask_h)
        wp.copy(self._state_d, self._state_h)
        self._launch("reset", self._record_reset)
        # Kinematics for the new state run lazily, with the first body read after this.
        self._kinematics_stale = True
        self._body_host_stale = True
        self._state_host_stale = True
        self._contact_host_stale = True

    def copy_qpos_qvel(self, out_qpos, out_qvel, env_ids=None) -> None:
        """Every row (the device copy is whole either way)."""
        check_buffer("out_qpos", out_qpos, (self.num_envs, self.model.nq))
        check_buffer("out_qvel", out_qvel, (self.num_envs, self.model.nv))
        if env_ids is not None:
            check_env_ids(env_ids, self.num_envs)
        if self._state_host_stale:
            wp.copy(self._qpos_h, self._d.qpos)
            wp.copy(self._qvel_h, self._d.qvel)
            self._wait_for_device()
            self._state_host_stale = False
        np.copyto(out_qpos, self._qpos)
        np.copyto(out_qvel, self._qvel)

    def copy_body_state_w(
        self,
        body_ids: np.ndarray,
        out_pos: np.ndarray,
        out_quat: np.ndarray,
        out_lin_vel: np.ndarray,
        out_ang_vel: np.ndarray,
        env_ids: np.ndarray | None = None,
    ) -> None:
        check_body_buffers(
            self.num_envs,
            body_ids,
            self.mj_model.nbody,
            out_pos,
            out_quat,
            out_lin_vel,
            out_ang_vel,
        )
        envs = self._all_envs if env_ids is None else check_env_ids(env_ids, self.num_envs)
        self._sync_body_host()
        copy_body_states(
            envs,
            body_ids,
            self._xpos,
            self._xquat,
            self._cvel_ang,
            self._cvel_lin,
            self._subtree_com,
            self.body_rootid,
            out_pos,
            out_quat,
            out_lin_vel,
            out_ang_vel,
        )

    def copy_contact_forces(self, body_ids, out_force, env_ids=None) -> None:
        """Every row (the device copy is whole either way)."""
        check_contact_buffers(self.num_envs, body_ids, self.mj_model.nbody, out_force)
        if env_ids is not None:
            check_env_ids(env_ids, self.num_envs)
        if self._contact_host_stale:
            wp.copy(self._cleared_d, self._cleared_h)
            self._launch("contact_forces", self._record_contact_forces)
            wp.copy(self._body_force_h, self._body_force_d)
            self._wait_for_device()
            self._contact_host_stale = False
        np.take(self._body_force, body_ids, axis=1, out=out_force, mode="clip")  # ids checked

    def copy_actuator_forces(self, out_force, env_ids=None) -> None:
        """Every row: ``actuator_force`` of the last substep (zeros in worlds reset since)."""
        check_buffer("out_force", out_force, (self.num_envs, self.model.nu))
        if env_ids is not None:
            check_env_ids(env_ids, self.num_envs)
        np.copyto(out_force, self._d.actuator_force.numpy())
        out_force[self._cleared] = 0.0

    def model_param(self, name: str) -> np.ndarray:
        field, column, sign = _WARP_PARAMS[name]
        values = getattr(self.mj_model, field)
        return (sign * (values if column is None else values[:, column])).astype(np.float64)

    def set_model_param(self, name, env_ids, element_ids, values) -> None:
        env_ids, element_ids, values = check_model_param(self, name, env_ids, element_ids, values)
        field, column, sign = _WARP_PARAMS[name]
        if name in ("actuator_kp", "actuator_kd"):
            check_position_actuators(self.mj_model, element_ids, name)
        self._wait_for_device()
        rows = np.ix_(env_ids, element_ids)
        writes = [(field, column, sign)]
        if name == "actuator_kp":  # a position actuator's bias holds -kp too
            writes.append(("actuator_biasprm", 1, -1.0))
        for target, col, factor in writes:
            host = self._per_world(target)
            if col is None:
                host[rows] = factor * values
            else:
                host[(*rows, col)] = factor * values
            wp.copy(getattr(self._m, target), wp.array(host, dtype=getattr(self._m, target).dtype))
        if name in ("body_mass", "body_ipos", "body_inertia", "dof_armature"):
            for derived in _SET_CONST_OUTPUTS:  # set_const writes one row per world of these
                self._per_world(derived)
            with wp.ScopedDevice(self._wp_device):
                mjw.set_const(self._m, self._d)
        self._kinematics_stale = True
        self._body_host_stale = True

    # -- beyond the contract --------------------------------------------------------------------

    def host_body_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The current host copies (xpos, xquat, cvel, subtree_com), float32, each
        (num_envs, nbody, 3|4|6|3) in MuJoCo's layout. Views into buffers this backend reuses:
        valid until its next step or reset; copy them to keep them."""
        self._sync_body_host()
        return self._xpos, self._xquat, self._cvel, self._subtree_com

    def _per_world(self, field: str) -> np.ndarray:
        """The host copy of Model field ``field`` with one row per world, made (and the device
        field replaced by a per-world array, the graphs recorded again) the first time."""
        if field not in self._batched:
            nominal = getattr(self._m, field).numpy()[:1]
            host = np.ascontiguousarray(np.repeat(nominal, self.num_envs, axis=0))
            dtype = getattr(self._m, field).dtype
            if host.size:  # (an empty field, e.g. no tendons, stays as it is)
                with wp.ScopedDevice(self._wp_device):
                    setattr(self._m, field, wp.array(host, dtype=dtype))
            self._batched[field] = host
            self._graphs.clear()  # they hold the arrays they read
        return self._batched[field]

    def _sync_body_host(self) -> None:
        if not self._body_host_stale:
            return
        if self._kinematics_stale:
            self._launch("kinematics", self._record_kinematics)
            self._kinematics_stale = False
        for host, dev in self._body_pairs:
            wp.copy(host, dev)
        self._wait_for_device()
        self._body_host_stale = False
