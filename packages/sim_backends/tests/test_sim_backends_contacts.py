"""copy_contact_forces on the three backends: plain MuJoCo as the oracle, the walker's weight on
its feet as the physical check, MuJoCo Warp against MuJoCo, and the contract's buffer checks."""

import mujoco
import numpy as np
import pytest
from sim_backends_models import WALKER_XML

from fuselab_env_core.entity import Entity
from fuselab_sim_backends.mjwarp import MjWarpBackend
from fuselab_sim_backends.motrix import MotrixBackend
from fuselab_sim_backends.mujoco_cpu import MujocoBackend

N = 6
BACKENDS = [MujocoBackend, MjWarpBackend, MotrixBackend]


@pytest.fixture(scope="module")
def model():
    return mujoco.MjModel.from_xml_string(WALKER_XML)


def make(backend, num_envs):
    if backend is MujocoBackend:
        return MujocoBackend(WALKER_XML, num_envs, num_threads=2)
    return backend(WALKER_XML, num_envs)


def close(sim):
    sim.close()


def tumbling_states(model, num_envs, seed=0):
    """Float32 (qpos, qvel, ctrl) of a walker kicked by random targets: on its feet, falling,
    lying on its torso or shins, so contacts involve several bodies."""
    rng = np.random.default_rng(seed)
    data = mujoco.MjData(model)
    qpos, qvel, ctrl = [], [], []
    while len(qpos) < num_envs:
        data.ctrl[:] = rng.uniform(-1.0, 1.0, model.nu)
        for _ in range(60):
            mujoco.mj_step(model, data)
        qpos.append(data.qpos.copy())
        qvel.append(data.qvel.copy())
        ctrl.append(data.ctrl.copy())
    return (np.array(a, np.float32) for a in (qpos, qvel, ctrl))


def oracle_contact_forces(model, qpos, qvel, ctrl, substeps):
    """Plain MuJoCo: from each state, ``substeps`` mj_steps, then mj_contactForce of every
    contact of the last one, turned to the world frame and summed per body (float64)."""
    data = mujoco.MjData(model)
    forces = np.zeros((len(qpos), model.nbody, 3))
    wrench = np.zeros(6)
    for i in range(len(qpos)):
        mujoco.mj_resetData(model, data)
        data.qpos[:], data.qvel[:], data.ctrl[:] = qpos[i], qvel[i], ctrl[i]
        for _ in range(substeps):
            mujoco.mj_step(model, data)
        for c, contact in enumerate(data.contact):
            mujoco.mj_contactForce(model, data, c, wrench)
            on_second = contact.frame.reshape(3, 3).T @ wrench[:3]  # rows: normal, tangents
            forces[i, model.geom_bodyid[contact.geom2]] += on_second
            forces[i, model.geom_bodyid[contact.geom1]] -= on_second
    return forces


def read_all(sim, num_bodies):
    out = np.full((sim.num_envs, num_bodies, 3), np.nan, np.float32)
    sim.copy_contact_forces(np.arange(num_bodies, dtype=np.int32), out)
    return out


@pytest.mark.parametrize("substeps", [1, 3])
def test_mujoco_matches_plain_mujoco_summed_per_body(model, substeps):
    qpos, qvel, ctrl = tumbling_states(model, N)
    want = oracle_contact_forces(model, qpos, qvel, ctrl, substeps)
    touched = (np.abs(want).sum(axis=2) > 1.0).sum(axis=1)
    assert touched.max() >= 3, "the states should put several bodies in contact"
    sim = make(MujocoBackend, N)
    sim.reset_envs(np.arange(N), qpos, qvel)
    sim.set_controls(ctrl)
    sim.step(substeps)
    got = read_all(sim, model.nbody)
    close(sim)
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)
    # every contact pushes two bodies: the world's force is minus the sum of the others
    np.testing.assert_allclose(got.sum(axis=1), 0.0, atol=1e-4 * scale)


FILTERED_XML = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="0 0 0.05"/>
    <body name="paired" pos="0 0 0.2">
      <freejoint/>
      <geom name="paired_ball" size="0.1" contype="0" conaffinity="0"/>
    </body>
    <body name="ghost" pos="0.5 0 0.2">
      <freejoint/>
      <geom size="0.1" contype="0" conaffinity="0"/>
    </body>
    <body name="shelf" pos="1 0 0.1">
      <geom type="box" size="0.1 0.1 0.1" contype="2" conaffinity="2"/>
    </body>
    <body name="box" pos="1 0 0.35">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.1" contype="2" conaffinity="2"/>
    </body>
  </worldbody>
  <contact>
    <pair geom1="floor" geom2="paired_ball"/>
  </contact>
</mujoco>
"""


def test_explicit_pairs_and_collision_filters_match_plain_mujoco():
    # A ball that touches the floor only through an explicit pair, one that touches nothing, a
    # box on a shelf that collide with each other (contype 2) but not with the floor (contype 1).
    model = mujoco.MjModel.from_xml_string(FILTERED_XML)
    data = mujoco.MjData(model)
    states = []
    for steps in (500, 100):  # settled: 1 s, then 0.2 s more
        for _ in range(steps):
            mujoco.mj_step(model, data)
        states.append((data.qpos.copy(), data.qvel.copy()))
    qpos, qvel = (np.array(a, np.float32) for a in zip(*states, strict=True))
    ctrl = np.zeros((2, 0), np.float32)
    want = oracle_contact_forces(model, qpos, qvel, ctrl, 2)
    sim = MujocoBackend(FILTERED_XML, 2, num_threads=2)
    assert sim._physics.nsensor == 3  # paired, shelf, box: the ghost and the world get none
    sim.reset_envs(np.arange(2), qpos, qvel)
    sim.step(2)
    got = read_all(sim, model.nbody)
    sim.close()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    ball_weight = model.body_mass[model.body("paired").id] * 9.81
    box_weight = model.body_mass[model.body("box").id] * 9.81
    np.testing.assert_allclose(got[:, model.body("paired").id, 2], ball_weight, rtol=0.02)
    np.testing.assert_allclose(got[:, model.body("box").id, 2], box_weight, rtol=0.02)
    np.testing.assert_allclose(got[:, model.body("shelf").id, 2], -box_weight, rtol=0.02)
    np.testing.assert_array_equal(got[:, model.body("ghost").id], 0.0)
    np.testing.assert_allclose(got[:, 0, 2], -ball_weight, rtol=0.02)  # the floor


@pytest.mark.parametrize("backend", BACKENDS)
def test_standing_walker_carries_its_weight_on_its_feet(model, backend):
    weight = mujoco.mj_getTotalmass(model) * -model.opt.gravity[2]
    feet = [model.body(name).id for name in ("left_foot", "right_foot")]
    rest = [b for b in range(1, model.nbody) if b not in feet]
    sim = make(backend, 2)
    sim.set_controls(np.zeros((2, model.nu), np.float32))  # hold the straight-legged pose
    for _ in range(75):  # 1.5 s: dropped 5 cm onto the floor, settled
        sim.step(4)
    got = read_all(sim, model.nbody)
    close(sim)
    on_feet = got[:, feet].sum(axis=1)
    np.testing.assert_allclose(on_feet[:, 2], weight, rtol=0.01)
    assert np.all(np.abs(on_feet[:, :2]) < 0.01 * weight)
    assert np.all(got[:, feet, 2] > 0.3 * weight)  # on both feet
    assert np.all(got[:, rest] == 0.0)  # nothing else touches anything
    np.testing.assert_allclose(got[:, 0, 2], -weight, rtol=0.01)  # the floor is pushed down


@pytest.mark.parametrize("backend", BACKENDS)
def test_bodies_in_the_air_and_envs_just_reset_read_zero(model, backend):
    sim = make(backend, 3)
    zero = np.zeros((3, model.nbody, 3), np.float32)
    np.testing.assert_array_equal(read_all(sim, model.nbody), zero)  # before any step
    sim.set_controls(np.zeros((3, model.nu), np.float32))
    for _ in range(50):
        sim.step(4)
    standing = read_all(sim, model.nbody)
    assert np.all(standing[:, 0, 2] < 0.0)
    high = np.tile(model.qpos0, (1, 1)).astype(np.float32)
    high[0, 2] = 2.0
    sim.reset_envs(np.array([1]), high, np.zeros((1, model.nv), np.float32))
    after_reset = read_all(sim, model.nbody)
    np.testing.assert_array_equal(after_reset[1], 0.0)  # no step since the reset
    np.testing.assert_array_equal(after_reset[[0, 2]], standing[[0, 2]])
    sim.step(4)
    in_the_air = read_all(sim, model.nbody)
    close(sim)
    np.testing.assert_array_equal(in_the_air[1], 0.0)
    assert np.all(in_the_air[[0, 2], 0, 2] < 0.0)


def test_mujoco_and_warp_agree(model):
    qpos, qvel, ctrl = tumbling_states(model, N, seed=1)
    got = []
    for backend in (MujocoBackend, MjWarpBackend):
        sim = make(backend, N)
        sim.reset_envs(np.arange(N), qpos, qvel)
        sim.set_controls(ctrl)
        sim.step(4)
        got.append(read_all(sim, model.nbody))
        close(sim)
    cpu, warp = got
    scale = np.abs(cpu).max()
    assert scale > 10.0
    np.testing.assert_allclose(warp, cpu, atol=5e-4 * scale)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_buffers_raise_naming_them(model, backend):
    sim = make(backend, 2)
    ids = np.array([1, 3], np.int32)
    good = np.zeros((2, 2, 3), np.float32)
    with pytest.raises(TypeError, match="body_ids"):
        sim.copy_contact_forces(ids.astype(np.int64), good)
    with pytest.raises(ValueError, match="body_ids"):
        sim.copy_contact_forces(np.array([1, model.nbody], np.int32), good)
    with pytest.raises(ValueError, match="out_force"):
        sim.copy_contact_forces(ids, np.zeros((2, 3, 3), np.float32))
    with pytest.raises(ValueError, match="out_force"):
        sim.copy_contact_forces(ids, good.astype(np.float64))
    with pytest.raises(ValueError, match="out_force"):
        sim.copy_contact_forces(ids, np.zeros((2, 3, 2), np.float32).transpose(0, 2, 1))
    with pytest.raises(TypeError, match="out_force"):
        sim.copy_contact_forces(ids, good.tolist())
    sim.copy_contact_forces(np.zeros(0, np.int32), np.zeros((2, 0, 3), np.float32))
    close(sim)


def test_entity_copies_the_forces_of_its_contact_bodies(model):
    sim = make(MujocoBackend, 2)
    feet = Entity(sim, ["torso"], contact_body_names=["left_foot", "right_foot"])
    assert feet.contact_force_w.shape == (2, 2, 3)
    assert "contact_force_w" in feet.state()
    assert "contact_force_w" not in Entity(sim, ["torso"]).state()
    sim.set_controls(np.zeros((2, model.nu), np.float32))
    for _ in range(50):
        sim.step(4)
    feet.update()
    direct = np.zeros((2, 2, 3), np.float32)
    sim.copy_contact_forces(feet.contact_body_ids, direct)
    np.testing.assert_array_equal(feet.contact_force_w, direct)
    assert np.all(feet.contact_force_w[:, :, 2] > 0.0)
    with pytest.raises(KeyError, match="left_fot.*did you mean 'left_foot'"):
        Entity(sim, ["torso"], contact_body_names=["left_fot"])
    close(sim)
