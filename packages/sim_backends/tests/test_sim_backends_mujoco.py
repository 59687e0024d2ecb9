"""What only the MuJoCo CPU backend has: threads, envs stepped a chunk per rollout call, its raw
body states, MuJoCo's answer to a non-finite control. The contract itself: test_sim_backends_contract.py."""

import mujoco
import numpy as np
import pytest
from mujoco import rollout
from sim_backends_models import WALKER_XML, body_buffers, random_states, state_buffers

from fuselab_sim_backends import mujoco_cpu
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


def test_a_step_in_chunks_of_envs_equals_one_rollout_of_every_env(model, monkeypatch):
    """The backend steps its envs a chunk at a time (mujoco_cpu.ENVS_PER_ROLLOUT); states and
    contact forces are those of one rollout call over every env, a short last chunk included."""
    monkeypatch.setattr(mujoco_cpu, "ENVS_PER_ROLLOUT", 4)
    qpos, qvel = random_states(model, N, np.random.default_rng(2))
    sim = MujocoBackend(WALKER_XML, N, num_threads=2)
    sim.reset_envs(np.arange(N), qpos, qvel)
    controls = np.random.default_rng(3).normal(0, 0.5, (N, model.nu)).astype(np.float32)
    sim.set_controls(controls)
    for _ in range(25):  # until it lies on the floor: contact forces to compare
        sim.step(4)
    physics = sim._physics
    initial = sim._state.copy()
    states = np.empty((N, 3, initial.shape[1]))
    sensors = np.empty((N, 3, physics.nsensordata))
    with rollout.Rollout(nthread=2) as pool:
        pool.rollout(
            [physics] * N,
            [mujoco.MjData(physics) for _ in range(2)],
            initial,
            np.repeat(controls[:, None, :].astype(np.float64), 3, axis=1),
            nstep=3,
            state=states,
            sensordata=sensors,
        )
    sim.step(3)
    np.testing.assert_array_equal(sim._state, states[:, -1])
    np.testing.assert_array_equal(sim._contact_force, sensors[:, -1].reshape(N, -1, 3))
    assert sensors[:, -1].any()  # the walker touches the floor: forces were compared
    sim.close()


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


def test_mujoco_resets_an_env_given_a_nan_control_so_its_row_stays_finite(backend, model):
    controls = np.zeros((N, model.nu), np.float32)
    controls[2] = np.nan
    backend.set_controls(controls)
    for _ in range(5):
        backend.step(4)
    qpos, qvel = state_buffers(model, N)
    backend.copy_qpos_qvel(qpos, qvel)
    assert np.isfinite(qpos).all() and np.isfinite(qvel).all()


def test_num_threads_must_be_a_positive_int():
    for num_threads in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="num_threads: expected a positive int"):
            MujocoBackend(WALKER_XML, 2, num_threads=num_threads)
