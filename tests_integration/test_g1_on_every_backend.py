"""The project's G1 on the three backends: kinematic and dynamic parity, standing under PD."""

import mujoco
import numpy as np
import pytest

from fuselab_env_core.entity import Entity
from fuselab_envs.g1 import G1_XML_PATH, build_g1_spec
from fuselab_sim_backends.mjwarp import MjWarpBackend
from fuselab_sim_backends.motrix import MotrixBackend
from fuselab_sim_backends.mujoco_cpu import MujocoBackend

N = 4
TRACKED = [
    "pelvis", "left_hip_roll_link", "left_knee_link", "left_ankle_roll_link", "right_hip_roll_link",
    "right_knee_link", "right_ankle_roll_link", "torso_link", "left_shoulder_roll_link",
    "left_elbow_link", "left_wrist_yaw_link", "right_shoulder_roll_link", "right_elbow_link",
    "right_wrist_yaw_link",
]  # fmt: skip


@pytest.fixture(scope="module")
def model():
    return mujoco.MjModel.from_xml_path(str(G1_XML_PATH))


def standing(model, num_envs):
    key = model.key("knees_bent")
    qpos = np.tile(key.qpos, (num_envs, 1)).astype(np.float32)
    return qpos, np.zeros((num_envs, model.nv), np.float32), key.ctrl


def random_states(model, rng):
    qpos, qvel, _ = standing(model, N)
    quat = rng.normal(0, 1, (N, 4))
    qpos[:, 3:7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    for j in range(1, model.njnt):
        low, high = model.jnt_range[j]
        qpos[:, model.jnt_qposadr[j]] = rng.uniform(low, high, N)
    return qpos, rng.normal(0, 1.0, (N, model.nv)).astype(np.float32)


def read(sim, entity):
    entity.update()
    return [
        a.copy()
        for a in (
            entity.body_pos_w,
            entity.body_quat_w,
            entity.body_lin_vel_w,
            entity.body_ang_vel_w,
        )
    ]


def sign_normalised(quat):
    return np.where(quat[..., :1] < 0, -quat, quat)


@pytest.mark.parametrize(("backend", "atol"), [(MjWarpBackend, 1e-5), (MotrixBackend, 1e-4)])
def test_kinematic_parity_with_mujoco(model, backend, atol):
    qpos, qvel = random_states(model, np.random.default_rng(0))
    reference, other = MujocoBackend(G1_XML_PATH, N), backend(G1_XML_PATH, N)
    states = []
    for sim in (reference, other):
        sim.reset_envs(np.arange(N), qpos, qvel)
        states.append(read(sim, Entity(sim, TRACKED)))
    reference.close()
    for name, want, got in zip(("pos", "quat", "lin_vel", "ang_vel"), *states, strict=True):
        if name == "quat":
            want, got = sign_normalised(want), sign_normalised(got)
        np.testing.assert_allclose(got, want, atol=atol, err_msg=name)


def test_dynamic_parity_mujoco_vs_warp_standing_under_pd(model):
    qpos, qvel, targets = standing(model, N)
    cpu, warp = MujocoBackend(G1_XML_PATH, N), MjWarpBackend(G1_XML_PATH, N)
    controls = np.tile(targets, (N, 1)).astype(np.float32)
    got = [np.zeros((N, model.nq), np.float32) for _ in range(2)]
    velocities = np.zeros((N, model.nv), np.float32)
    worst_height, worst_qpos = 0.0, 0.0
    for sim in (cpu, warp):
        sim.reset_envs(np.arange(N), qpos, qvel)
        sim.set_controls(controls)
    for _ in range(50):
        for sim, out in zip((cpu, warp), got, strict=True):
            sim.step(4)
            sim.copy_qpos_qvel(out, velocities)
        worst_height = max(worst_height, float(np.abs(got[0][:, 2] - got[1][:, 2]).max()))
        worst_qpos = max(worst_qpos, float(np.abs(got[0] - got[1]).max()))
    cpu.close()
    assert worst_height < 5e-3, (
        f"root height deviation {worst_height} (max qpos deviation {worst_qpos})"
    )


@pytest.mark.parametrize("backend", [MujocoBackend, MjWarpBackend, MotrixBackend])
def test_g1_stands_for_two_seconds_under_stiff_pd(tmp_path, model, backend):
    # The task gains (10 Hz, damping ratio 2) are for a policy: alone they hold the pose for about
    # a second (ankles 57 N m/rad against ~205 needed). Ten times stiffer, it must stand.
    spec = build_g1_spec()
    for actuator in spec.actuators:
        actuator.gainprm[0] *= 10.0
        actuator.biasprm[1] *= 10.0
        actuator.biasprm[2] *= 10.0
    stiff = tmp_path / "g1_stiff.xml"
    stiff.write_text(spec.to_xml())
    qpos, qvel, targets = standing(model, N)
    sim = backend(stiff, N)
    sim.reset_envs(np.arange(N), qpos, qvel)
    sim.set_controls(np.tile(targets, (N, 1)).astype(np.float32))
    pelvis = Entity(sim, ["pelvis", "torso_link"])
    for _ in range(100):  # 2 s at 50 Hz control, 200 Hz physics
        sim.step(4)
    pelvis.update()
    assert np.all(np.isfinite(pelvis.body_pos_w))
    assert np.all(np.abs(pelvis.body_pos_w[:, 0, 2] - qpos[:, 2]) < 0.05)
    w, x, y, z = np.moveaxis(pelvis.body_quat_w[:, 1], -1, 0)
    torso_up_z = 1.0 - 2.0 * (x * x + y * y)  # z component of the torso's z axis
    assert np.all(torso_up_z > 0.9)
    if hasattr(sim, "close"):
        sim.close()


@pytest.fixture(scope="module")
def stiff_g1(tmp_path_factory):
    """The G1 with ten times the task's PD gains (see the test above), as an MJCF file."""
    spec = build_g1_spec()
    for actuator in spec.actuators:
        actuator.gainprm[0] *= 10.0
        actuator.biasprm[1] *= 10.0
        actuator.biasprm[2] *= 10.0
    path = tmp_path_factory.mktemp("g1") / "g1_stiff.xml"
    path.write_text(spec.to_xml())
    return path


FEET = ["left_ankle_roll_link", "right_ankle_roll_link"]


@pytest.mark.parametrize("backend", [MujocoBackend, MjWarpBackend, MotrixBackend])
def test_g1_standing_carries_its_weight_on_its_feet(stiff_g1, model, backend):
    weight = mujoco.mj_getTotalmass(model) * -model.opt.gravity[2]
    qpos, qvel, targets = standing(model, 2)
    sim = backend(stiff_g1, 2)
    sim.reset_envs(np.arange(2), qpos, qvel)
    sim.set_controls(np.tile(targets, (2, 1)).astype(np.float32))
    robot = Entity(sim, ["pelvis"], contact_body_names=FEET + TRACKED[1:3] + TRACKED[8:])
    for _ in range(75):  # 1.5 s: settled
        sim.step(4)
    robot.update()
    if hasattr(sim, "close"):
        sim.close()
    feet, others = robot.contact_force_w[:, :2], robot.contact_force_w[:, 2:]
    np.testing.assert_allclose(feet[..., 2].sum(axis=1), weight, rtol=0.03)
    assert np.all(np.abs(feet[..., :2].sum(axis=1)) < 0.03 * weight)
    assert np.all(feet[..., 2] > 0.3 * weight)  # on both feet
    assert np.all(others == 0.0)  # knees, hips, arms, hands touch nothing


def test_g1_contact_forces_match_plain_mujoco_and_warp(model):
    qpos, qvel, targets = standing(model, 2)
    qpos[1, 2] -= 0.02  # pressed into the floor: a hard landing
    ctrl = np.tile(targets, (2, 1)).astype(np.float32)
    data, wrench = mujoco.MjData(model), np.zeros(6)
    want = np.zeros((2, model.nbody, 3))
    for i in range(2):
        mujoco.mj_resetData(model, data)
        data.qpos[:], data.qvel[:], data.ctrl[:] = qpos[i], qvel[i], ctrl[i]
        for _ in range(4):
            mujoco.mj_step(model, data)
        for c, contact in enumerate(data.contact):  # the last substep's contacts
            mujoco.mj_contactForce(model, data, c, wrench)
            on_second = contact.frame.reshape(3, 3).T @ wrench[:3]
            want[i, model.geom_bodyid[contact.geom2]] += on_second
            want[i, model.geom_bodyid[contact.geom1]] -= on_second
    ids = np.arange(model.nbody, dtype=np.int32)
    got = {}
    for backend in (MujocoBackend, MjWarpBackend):
        sim = backend(G1_XML_PATH, 2)
        sim.reset_envs(np.arange(2), qpos, qvel)
        sim.set_controls(ctrl)
        sim.step(4)
        got[backend] = np.zeros((2, model.nbody, 3), np.float32)
        sim.copy_contact_forces(ids, got[backend])
        if hasattr(sim, "close"):
            sim.close()
    scale = np.abs(want).max()
    assert scale > 100.0
    np.testing.assert_allclose(got[MujocoBackend], want, rtol=1e-4, atol=1e-4 * scale)
    np.testing.assert_allclose(got[MjWarpBackend], want, atol=5e-4 * scale)  # float32 solver
