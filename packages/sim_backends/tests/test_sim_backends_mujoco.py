"""The MuJoCo CPU backend against plain MuJoCo, and the Entity facade bound to it."""

import mujoco
import numpy as np
import pytest
from sim_backends_models import WALKER_XML, mujoco_body_states, random_states

from fuselab_env_core.entity import Entity
from fuselab_sim_backends.mujoco_cpu import MujocoBackend

N = 6


@pytest.fixture(scope="module")
def model():
    return mujoco.MjModel.from_xml_string(WALKER_XML)


@pytest.fixture()
def backend():
    sim = MujocoBackend(WALKER_XML, N, num_threads=2)
    yield sim
    sim.close()


def body_buffers(num_envs, num_bodies):
    return (
        np.zeros((num_envs, num_bodies, 3), np.float32),
        np.zeros((num_envs, num_bodies, 4), np.float32),
        np.zeros((num_envs, num_bodies, 3), np.float32),
        np.zeros((num_envs, num_bodies, 3), np.float32),
    )


def test_body_states_after_reset_match_mujoco(backend, model):
    qpos, qvel = random_states(model, N, np.random.default_rng(0))
    backend.reset_envs(np.arange(N), qpos, qvel)
    ids = np.arange(1, model.nbody, dtype=np.int32)
    out = body_buffers(N, len(ids))
    backend.copy_body_state_w(ids, *out)
    expected = mujoco_body_states(model, qpos, qvel)
    for got, want in zip(out, expected, strict=True):
        np.testing.assert_allclose(got, want[:, 1:], atol=1e-5)


def test_stepping_matches_a_plain_mujoco_loop(backend, model):
    data = mujoco.MjData(model)
    targets = np.tile(np.linspace(-0.3, 0.3, model.nu, dtype=np.float32), (N, 1))
    backend.set_controls(targets)
    data.ctrl[:] = targets[0]
    qpos, qvel = np.zeros((N, model.nq), np.float32), np.zeros((N, model.nv), np.float32)
    worst = 0.0
    for _ in range(50):
        backend.step(4)
        for _ in range(4):
            mujoco.mj_step(model, data)
        backend.copy_qpos_qvel(qpos, qvel)
        worst = max(worst, float(np.abs(qpos - data.qpos).max()))
        assert abs(qpos[0, 2] - data.qpos[2]) < 5e-3
    assert worst < 1e-4, f"max qpos deviation {worst}"
    ids = np.arange(model.nbody, dtype=np.int32)
    out = body_buffers(N, model.nbody)
    backend.copy_body_state_w(ids, *out)  # kinematics of the final state, not one substep late
    expected = mujoco_body_states(model, data.qpos[None], data.qvel[None])
    for got, want in zip(out, expected, strict=True):
        np.testing.assert_allclose(got[0], want[0], atol=1e-4)


def test_one_and_two_threads_give_identical_physics(model):
    qpos, qvel = random_states(model, N, np.random.default_rng(1))
    results = []
    for threads in (1, 2):
        sim = MujocoBackend(WALKER_XML, N, num_threads=threads)
        sim.reset_envs(np.arange(N), qpos, qvel)
        sim.set_controls(np.full((N, model.nu), 0.2, np.float32))
        for _ in range(10):
            sim.step(4)
        out = np.zeros((N, model.nq), np.float32), np.zeros((N, model.nv), np.float32)
        sim.copy_qpos_qvel(*out)
        results.append(out)
        sim.close()
    np.testing.assert_array_equal(results[0][0], results[1][0])


def test_copy_equals_a_numpy_gather_of_the_raw_body_states(backend, model):
    qpos, qvel = random_states(model, N, np.random.default_rng(2))
    backend.reset_envs(np.arange(N), qpos, qvel)
    backend.step(2)
    ids = np.array([3, 1, 6], np.int32)
    out = body_buffers(N, len(ids))
    backend.copy_body_state_w(ids, *out)
    raw = (backend._body_pos, backend._body_quat, backend._body_lin_vel, backend._body_ang_vel)
    for got, array in zip(out, raw, strict=True):
        np.testing.assert_array_equal(got, np.take(array, ids, axis=1).astype(np.float32))


def test_nan_controls_touch_no_other_env_and_reset_recovers(backend, model):
    reference = MujocoBackend(WALKER_XML, N, num_threads=2)
    controls = np.zeros((N, model.nu), np.float32)
    reference.set_controls(controls)
    bad = controls.copy()
    bad[2] = np.nan
    backend.set_controls(bad)
    for _ in range(5):
        backend.step(4)
        reference.step(4)
    got = np.zeros((N, model.nq), np.float32), np.zeros((N, model.nv), np.float32)
    want = np.zeros((N, model.nq), np.float32), np.zeros((N, model.nv), np.float32)
    backend.copy_qpos_qvel(*got)
    reference.copy_qpos_qvel(*want)
    others = [0, 1, 3, 4, 5]
    np.testing.assert_array_equal(got[0][others], want[0][others])
    np.testing.assert_array_equal(got[1][others], want[1][others])
    # MuJoCo rejects a non-finite control with a warning and resets that env: it stays finite.
    assert np.isfinite(got[0][2]).all() and np.isfinite(got[1][2]).all()
    qpos0 = model.qpos0[None].astype(np.float32)
    backend.reset_envs(np.array([2]), qpos0, np.zeros((1, model.nv), np.float32))
    backend.copy_qpos_qvel(*got)
    np.testing.assert_allclose(got[0][2], model.qpos0, atol=1e-6)
    np.testing.assert_array_equal(got[0][others], want[0][others])
    reference.close()


def test_bad_input_names_the_field(backend, model):
    with pytest.raises(ValueError, match=r"out_quat: expected shape \(6, 2, 4\) and dtype float32"):
        pos, _, lin, ang = body_buffers(N, 2)
        backend.copy_body_state_w(np.array([1, 2], np.int32), pos, np.zeros((N, 2, 4)), lin, ang)
    with pytest.raises(ValueError, match=r"body_ids: expected ids in 0..7"):
        backend.copy_body_state_w(np.array([9], np.int32), *body_buffers(N, 1))
    with pytest.raises(ValueError, match=r"controls: expected shape \(6, 6\)"):
        backend.set_controls(np.zeros((N, 5), np.float32))
    with pytest.raises(ValueError, match="substeps: expected a positive int, got 0"):
        backend.step(0)
    with pytest.raises(ValueError, match=r"env_ids: expected ids in 0..5"):
        backend.reset_envs(
            np.array([7]), model.qpos0[None].astype(np.float32), np.zeros((1, model.nv), np.float32)
        )
    with pytest.raises(FileNotFoundError, match="mjcf: no MJCF file at '/nonexistent/robot.xml'"):
        MujocoBackend("/nonexistent/robot.xml", 2)
    with pytest.raises(ValueError, match="mjcf: MuJoCo could not parse the MJCF string"):
        MujocoBackend("<mujoco><worldbody><body></mujoco>", 2)


def test_entity_binds_by_name_and_copies(backend, model):
    entity = Entity(backend, ["left_foot", "torso"], ["right_knee", "left_hip_pitch"])
    qpos, qvel = random_states(model, N, np.random.default_rng(3))
    backend.reset_envs(np.arange(N), qpos, qvel)
    entity.update()
    pos, quat, lin, ang = mujoco_body_states(model, qpos, qvel)
    torso, left_foot = model.body("torso").id, model.body("left_foot").id
    np.testing.assert_allclose(entity.body_pos_w[:, 0], pos[:, left_foot], atol=1e-5)
    np.testing.assert_allclose(entity.body_lin_vel_w[:, 1], lin[:, torso], atol=1e-5)
    right_knee = model.jnt_qposadr[model.joint("right_knee").id]
    np.testing.assert_allclose(entity.joint_pos[:, 0], qpos[:, right_knee], atol=1e-6)
    left_hip = model.jnt_dofadr[model.joint("left_hip_pitch").id]
    np.testing.assert_allclose(entity.joint_vel[:, 1], qvel[:, left_hip], atol=1e-6)
    assert set(entity.state()) >= {"body_pos_w", "joint_pos"}


def test_entity_unknown_name_lists_the_model_names(backend):
    with pytest.raises(
        KeyError, match="body 'left_fot' is not in the model; did you mean 'left_foot'"
    ):
        Entity(backend, ["left_fot"])
    with pytest.raises(KeyError, match="the model's joints: left_hip_pitch, left_hip_roll"):
        Entity(backend, ["torso"], ["elbow"])
