"""The SimBackend contract, run against every backend: a new backend is done when it passes.

Plain MuJoCo (``mj_forward``, ``mj_objectVelocity``) is the kinematic oracle, on the walker
model. What only one backend has (threads, raw host arrays, devices, MotrixSim's joint layout)
is tested in that backend's own file.
"""

import mujoco
import numpy as np
import pytest
from sim_backends_models import (
    WALKER_XML,
    assert_body_states_close,
    body_buffers,
    mujoco_body_states,
    random_states,
    state_buffers,
)

from fuselab_env_core.entity import Entity
from fuselab_sim_backends.mjwarp import MjWarpBackend
from fuselab_sim_backends.motrix import MotrixBackend
from fuselab_sim_backends.mujoco_cpu import MujocoBackend

N = 4
SUBSTEPS = 4
BACKENDS = [MujocoBackend, MjWarpBackend, MotrixBackend]
# Body states against plain MuJoCo: MuJoCo's own kinematics stored in float32 (MuJoCo, MuJoCo
# Warp), or another engine's kinematics (MotrixSim).
KINEMATIC_ATOL = {MujocoBackend: 1e-5, MjWarpBackend: 1e-5, MotrixBackend: 1e-4}
# Root height against a plain mj_step loop: the same solver in float64 (MuJoCo) or float32
# (MuJoCo Warp). MotrixSim has a solver of its own: it only has to stand (below).
TRAJECTORY_ATOL = {MujocoBackend: 1e-4, MjWarpBackend: 5e-3}
# A rerun from the same reset: bit-identical, except on MotrixSim, whose reset keeps the
# solver's warm start (its documented semantics), which moves the last bits of float32.
RERUN_ATOL = {MujocoBackend: 0.0, MjWarpBackend: 0.0, MotrixBackend: 1e-5}


def name_of(cls):
    return cls.__name__


def close(sim):
    sim.close()


@pytest.fixture(scope="module")
def model():
    return mujoco.MjModel.from_xml_string(WALKER_XML)


@pytest.fixture(scope="module", params=BACKENDS, ids=name_of)
def backend(request):
    sim = request.param(WALKER_XML, N)
    yield sim
    close(sim)


def standing_states(model):
    return np.tile(model.qpos0, (N, 1)).astype(np.float32), np.zeros((N, model.nv), np.float32)


def all_bodies(model):
    return np.arange(model.nbody, dtype=np.int32)


@pytest.mark.parametrize("backend_class", BACKENDS, ids=name_of)
def test_model_facts_from_a_string_or_a_file_match_mujoco(tmp_path, model, backend_class):
    path = tmp_path / "walker.xml"
    path.write_text(WALKER_XML)
    hinges = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
    for source in (WALKER_XML, path, str(path)):
        sim = backend_class(source, 2)
        facts = sim.model
        close(sim)
        assert facts.body_names == tuple(model.body(b).name for b in range(model.nbody))
        assert facts.body_names[0] == "world"
        assert facts.joint_names == tuple(model.joint(j).name for j in hinges)
        assert facts.actuator_names == tuple(model.actuator(a).name for a in range(model.nu))
        np.testing.assert_allclose(facts.joint_ranges, model.jnt_range[hinges], rtol=1e-6)
        np.testing.assert_array_equal(facts.joint_qpos_adr, model.jnt_qposadr[hinges])
        np.testing.assert_array_equal(facts.joint_qvel_adr, model.jnt_dofadr[hinges])
        assert (facts.nq, facts.nv, facts.nu) == (model.nq, model.nv, model.nu) == (13, 12, 6)
        assert facts.physics_dt == pytest.approx(model.opt.timestep)


def test_body_states_after_a_reset_match_mujoco(backend, model):
    qpos, qvel = random_states(model, N, np.random.default_rng(0))
    backend.reset_envs(np.arange(N), qpos, qvel)
    out = body_buffers(N, model.nbody)
    backend.copy_body_state_w(all_bodies(model), *out)
    want = mujoco_body_states(model, qpos, qvel)
    assert_body_states_close(out, want, KINEMATIC_ATOL[type(backend)])

    # A subset, out of order: those rows change, the others keep their state.
    more_qpos, more_qvel = random_states(model, 2, np.random.default_rng(1))
    backend.reset_envs(np.array([3, 1]), more_qpos, more_qvel)
    got_qpos, got_qvel = state_buffers(model, N)
    backend.copy_qpos_qvel(got_qpos, got_qvel)
    qpos[[3, 1]], qvel[[3, 1]] = more_qpos, more_qvel
    np.testing.assert_allclose(got_qpos, qpos, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got_qvel, qvel, rtol=0, atol=1e-6)
    backend.copy_body_state_w(all_bodies(model), *out)
    assert_body_states_close(
        out, mujoco_body_states(model, qpos, qvel), KINEMATIC_ATOL[type(backend)]
    )


def test_reads_of_the_rows_a_reset_wrote_equal_a_full_read(backend, model):
    # After a reset of a few rows, a read of those rows over buffers read before it must leave
    # the same buffers as a read of every row.
    bodies, contacts = all_bodies(model), np.array([0, 2, 5], np.int32)
    backend.reset_envs(np.arange(N), *random_states(model, N, np.random.default_rng(6)))
    backend.set_controls(np.full((N, model.nu), 0.3, np.float32))
    backend.step(SUBSTEPS)

    def read(out, env_ids=None):
        backend.copy_qpos_qvel(*out[:2], env_ids)
        backend.copy_body_state_w(bodies, *out[2:6], env_ids)
        backend.copy_contact_forces(contacts, out[6], env_ids)

    def buffers():
        return (*state_buffers(model, N), *body_buffers(N, model.nbody), body_buffers(N, 3)[0])

    partial = buffers()
    read(partial)
    rows = np.array([3, 1])
    backend.reset_envs(rows, *random_states(model, 2, np.random.default_rng(7)))
    read(partial, rows)
    full = buffers()
    read(full)
    for got, want in zip(partial, full, strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match=r"env_ids: expected ids in 0\.\.3"):
        backend.copy_body_state_w(bodies, *body_buffers(N, model.nbody), np.array([N]))
    with pytest.raises(TypeError, match="env_ids: expected a 1-D integer numpy array"):
        backend.copy_qpos_qvel(*state_buffers(model, N), np.array([0.5]))


def test_body_states_after_steps_describe_the_current_state(backend, model):
    # Engines leave body poses one substep behind qpos after a step; reads here must not.
    qpos0, qvel0 = random_states(model, N, np.random.default_rng(2))
    backend.reset_envs(np.arange(N), qpos0, qvel0)
    backend.set_controls(np.full((N, model.nu), 0.2, np.float32))
    for _ in range(3):
        backend.step(SUBSTEPS)
    qpos, qvel = state_buffers(model, N)
    backend.copy_qpos_qvel(qpos, qvel)
    assert np.abs(qvel).max() > 0.1  # it moves
    out = body_buffers(N, model.nbody)
    backend.copy_body_state_w(all_bodies(model), *out)
    assert_body_states_close(
        out, mujoco_body_states(model, qpos, qvel), KINEMATIC_ATOL[type(backend)]
    )


def test_the_walker_stands_under_zero_position_targets(backend, model):
    backend.reset_envs(np.arange(N), *standing_states(model))
    backend.set_controls(np.zeros((N, model.nu), np.float32))
    torso = np.array([model.body("torso").id], np.int32)
    pos, quat, lin_vel, ang_vel = body_buffers(N, 1)
    for _ in range(round(2.0 / (model.opt.timestep * SUBSTEPS))):
        backend.step(SUBSTEPS)
    backend.copy_body_state_w(torso, pos, quat, lin_vel, ang_vel)
    assert all(np.isfinite(array).all() for array in (pos, quat, lin_vel, ang_vel))
    x, y = quat[:, 0, 1], quat[:, 0, 2]
    assert (1.0 - 2.0 * (x * x + y * y) > 0.9).all(), "the torso's z axis should point up"
    assert (pos[:, 0, 2] > 0.5).all() and (pos[:, 0, 2] < 0.75).all(), "fallen onto its feet"


@pytest.mark.parametrize("backend_class", list(TRAJECTORY_ATOL), ids=name_of)
def test_stepping_follows_a_plain_mujoco_loop(model, backend_class):
    backend = backend_class(WALKER_XML, N)
    qpos0, qvel0 = standing_states(model)
    backend.reset_envs(np.arange(N), qpos0, qvel0)
    targets = np.tile(np.linspace(-0.3, 0.3, model.nu, dtype=np.float32), (N, 1))
    backend.set_controls(targets)
    data = mujoco.MjData(model)
    data.qpos[:], data.ctrl[:] = qpos0[0], targets[0]
    qpos, qvel = state_buffers(model, N)
    worst_height = worst_qpos = 0.0
    for _ in range(50):
        backend.step(SUBSTEPS)
        for _ in range(SUBSTEPS):
            mujoco.mj_step(model, data)
        backend.copy_qpos_qvel(qpos, qvel)
        worst_height = max(worst_height, float(np.abs(qpos[:, 2] - data.qpos[2]).max()))
        worst_qpos = max(worst_qpos, float(np.abs(qpos - data.qpos).max()))
    assert data.qpos[2] < 0.72, "the walker should have dropped onto its feet"
    close(backend)
    assert worst_height < TRAJECTORY_ATOL[backend_class], (
        f"root height off by {worst_height:.2e} m; max |qpos| deviation {worst_qpos:.2e}"
    )


def test_nan_control_rows_leave_other_envs_untouched_and_a_reset_recovers_them(backend, model):
    qpos0, qvel0 = random_states(model, N, np.random.default_rng(3))
    controls = np.random.default_rng(4).uniform(-0.5, 0.5, (N, model.nu)).astype(np.float32)
    bad, good = np.array([1, 3]), np.array([0, 2])

    def run(ctrl):
        backend.reset_envs(np.arange(N), qpos0, qvel0)
        backend.set_controls(ctrl)
        for _ in range(10):
            backend.step(SUBSTEPS)
        qpos, qvel = state_buffers(model, N)
        backend.copy_qpos_qvel(qpos, qvel)
        bodies = body_buffers(N, model.nbody)
        backend.copy_body_state_w(all_bodies(model), *bodies)
        return (qpos, qvel, *bodies)

    clean = run(controls)
    poisoned_controls = controls.copy()
    poisoned_controls[bad] = np.nan
    poisoned = run(poisoned_controls)
    for want, got in zip(clean, poisoned, strict=True):
        np.testing.assert_allclose(got[good], want[good], rtol=0, atol=RERUN_ATOL[type(backend)])

    backend.reset_envs(bad, qpos0[bad], qvel0[bad])
    qpos, qvel = state_buffers(model, N)
    backend.copy_qpos_qvel(qpos, qvel)
    np.testing.assert_allclose(qpos[bad], qpos0[bad], rtol=0, atol=1e-6)
    np.testing.assert_allclose(qvel[bad], qvel0[bad], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(qpos[good], poisoned[0][good])  # untouched by the reset
    bodies = body_buffers(N, model.nbody)
    backend.copy_body_state_w(all_bodies(model), *bodies)
    assert all(np.isfinite(array).all() for array in bodies)
    backend.set_controls(controls)
    backend.step(SUBSTEPS)
    backend.copy_qpos_qvel(qpos, qvel)
    assert np.isfinite(qpos).all() and np.isfinite(qvel).all()


def test_bad_body_ids_and_buffers_are_rejected_by_name(backend, model):
    ids = np.array([1, 2], dtype=np.int32)
    for bad_ids in (np.array([model.nbody], np.int32), np.array([-1], np.int32)):
        with pytest.raises(ValueError, match=r"body_ids: expected ids in 0\.\.7"):
            backend.copy_body_state_w(bad_ids, *body_buffers(N, 1))
    with pytest.raises(TypeError, match="body_ids: expected a 1-D int32 array"):
        backend.copy_body_state_w(ids.astype(np.int64), *body_buffers(N, 2))
    pos, quat, lin, ang = body_buffers(N, 2)
    with pytest.raises(ValueError, match=r"out_quat: expected shape \(4, 2, 4\)"):
        backend.copy_body_state_w(ids, pos, quat[:, :, :3].copy(), lin, ang)
    with pytest.raises(ValueError, match="out_pos: .* dtype float32"):
        backend.copy_body_state_w(ids, pos.astype(np.float64), quat, lin, ang)
    with pytest.raises(ValueError, match="out_lin_vel"):
        backend.copy_body_state_w(ids, pos, quat, np.zeros((N + 1, 2, 3), np.float32), ang)
    with pytest.raises(ValueError, match="out_ang_vel: expected a C-contiguous"):
        backend.copy_body_state_w(ids, pos, quat, lin, np.zeros((N, 2, 6), np.float32)[:, :, ::2])
    qpos, qvel = state_buffers(model, N)
    with pytest.raises(ValueError, match=r"out_qvel: expected shape \(4, 12\)"):
        backend.copy_qpos_qvel(qpos, qvel[:, :-1].copy())
    force = np.zeros((N, 2, 3), np.float32)
    with pytest.raises(ValueError, match=r"body_ids: expected ids in 0\.\.7"):
        backend.copy_contact_forces(np.array([9], np.int32), force[:, :1].copy())
    with pytest.raises(ValueError, match=r"out_force: expected shape \(4, 2, 3\)"):
        backend.copy_contact_forces(ids, force[:, :1].copy())


def test_bad_controls_and_substeps_are_rejected_by_name(backend, model):
    with pytest.raises(ValueError, match=r"controls: expected shape \(4, 6\)"):
        backend.set_controls(np.zeros((N, model.nu + 1), np.float32))
    with pytest.raises(ValueError, match="controls: .* dtype float32"):
        backend.set_controls(np.zeros((N, model.nu), np.float64))
    with pytest.raises(ValueError, match="controls: expected a C-contiguous"):
        backend.set_controls(np.zeros((N, model.nu), np.float32, order="F"))
    with pytest.raises(TypeError, match="controls: expected a numpy array"):
        backend.set_controls([[0.0] * model.nu] * N)
    for substeps in (0, -1, 2.0, True, "4"):
        with pytest.raises(ValueError, match="substeps: expected a positive int"):
            backend.step(substeps)


def test_bad_resets_are_rejected_and_change_nothing(backend, model):
    qpos0, qvel0 = standing_states(model)
    backend.reset_envs(np.arange(N), qpos0, qvel0)
    one_qpos, one_qvel = qpos0[:1], qvel0[:1]
    with pytest.raises(ValueError, match=r"env_ids: expected ids in 0\.\.3"):
        backend.reset_envs(np.array([N]), one_qpos, one_qvel)
    with pytest.raises(ValueError, match="env_ids: expected distinct ids"):
        backend.reset_envs(np.array([1, 1]), qpos0[:2], qvel0[:2])
    with pytest.raises(TypeError, match="env_ids: expected a 1-D integer numpy array"):
        backend.reset_envs(np.array([0.0]), one_qpos, one_qvel)
    with pytest.raises(ValueError, match=r"qpos: expected shape \(1, 13\)"):
        backend.reset_envs(np.array([0]), qpos0[:2], one_qvel)
    with pytest.raises(ValueError, match="qvel: .* dtype float32"):
        backend.reset_envs(np.array([0]), one_qpos, one_qvel.astype(np.float64))
    not_finite = qpos0[:2].copy()
    not_finite[1, 8] = np.inf
    with pytest.raises(
        ValueError, match=r"qpos: expected finite values; rows \[1\] \(env ids \[3\]"
    ):
        backend.reset_envs(np.array([2, 3]), not_finite, qvel0[:2])
    qpos, qvel = state_buffers(model, N)
    backend.copy_qpos_qvel(qpos, qvel)
    np.testing.assert_array_equal(qpos, qpos0)
    np.testing.assert_array_equal(qvel, qvel0)


@pytest.mark.parametrize("backend_class", BACKENDS, ids=name_of)
def test_bad_construction_arguments_are_rejected_by_name(tmp_path, backend_class):
    missing = tmp_path / "no_such_walker.xml"
    for path in (missing, str(missing)):
        with pytest.raises(FileNotFoundError, match="mjcf: no MJCF file at .*no_such_walker.xml"):
            backend_class(path, N)
    with pytest.raises(ValueError, match="mjcf: MuJoCo could not parse the MJCF string"):
        backend_class("<mujoco><worldbody><body></mujoco>", N)
    for num_envs in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="num_envs: expected a positive int"):
            backend_class(WALKER_XML, num_envs)
    for physics_dt in (0.0, -0.005, float("nan"), float("inf"), True, "0.01"):
        with pytest.raises(
            ValueError, match=r"physics_dt: expected a finite time step > 0 in seconds \(or None"
        ):
            backend_class(WALKER_XML, N, physics_dt=physics_dt)


@pytest.mark.parametrize("backend_class", BACKENDS, ids=name_of)
def test_physics_dt_replaces_the_models_timestep(model, backend_class):
    """A step then lasts ``physics_dt``: the walker, high in the air, falls g x dt faster."""
    backend = backend_class(WALKER_XML, N, physics_dt=2 * model.opt.timestep)
    assert backend.model.physics_dt == pytest.approx(2 * model.opt.timestep)
    qpos0, qvel0 = standing_states(model)
    qpos0[:, 2] += 10.0
    backend.reset_envs(np.arange(N), qpos0, qvel0)
    backend.set_controls(np.zeros((N, model.nu), np.float32))
    backend.step(1)
    qpos, qvel = state_buffers(model, N)
    backend.copy_qpos_qvel(qpos, qvel)
    close(backend)
    fall = -model.opt.gravity[2] * 2 * model.opt.timestep
    np.testing.assert_allclose(-qvel[:, 2], fall, rtol=0.02)


def test_an_entity_binds_by_name_once_and_then_copies(backend, model):
    entity = Entity(backend, ["left_foot", "torso"], ["right_knee", "left_hip_pitch"])
    qpos, qvel = random_states(model, N, np.random.default_rng(5))
    backend.reset_envs(np.arange(N), qpos, qvel)
    entity.update()
    pos, _, lin, _ = mujoco_body_states(model, qpos, qvel)
    atol = KINEMATIC_ATOL[type(backend)]
    torso, left_foot = model.body("torso").id, model.body("left_foot").id
    np.testing.assert_allclose(entity.body_pos_w[:, 0], pos[:, left_foot], atol=atol)
    np.testing.assert_allclose(entity.body_lin_vel_w[:, 1], lin[:, torso], atol=atol)
    right_knee = model.jnt_qposadr[model.joint("right_knee").id]
    np.testing.assert_allclose(entity.joint_pos[:, 0], qpos[:, right_knee], atol=1e-6)
    left_hip = model.jnt_dofadr[model.joint("left_hip_pitch").id]
    np.testing.assert_allclose(entity.joint_vel[:, 1], qvel[:, left_hip], atol=1e-6)
    assert set(entity.state()) >= {"body_pos_w", "joint_pos"}

    # Rows a reset wrote, copied alone: the same buffers as a full copy.
    rows = np.array([2, 0])
    backend.reset_envs(rows, *random_states(model, 2, np.random.default_rng(8)))
    entity.update(rows)
    copied = {name: array.copy() for name, array in entity.state().items()}
    entity.update()
    for name, array in entity.state().items():
        np.testing.assert_array_equal(copied[name], array, err_msg=name)


def test_an_entity_names_an_unknown_body_or_joint_with_the_models_names(backend):
    with pytest.raises(
        KeyError, match="body 'left_fot' is not in the model; did you mean 'left_foot'"
    ):
        Entity(backend, ["left_fot"])
    with pytest.raises(KeyError, match="the model's bodies: world, torso, left_thigh"):
        Entity(backend, ["antenna"])
    with pytest.raises(KeyError, match="the model's joints: left_hip_pitch, left_hip_roll"):
        Entity(backend, ["torso"], ["elbow"])
