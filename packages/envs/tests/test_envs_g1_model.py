"""The project's G1 29-DoF MuJoCo model: structure, facts, gains, standing, and the committed XML."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from fuselab_envs.g1 import (
    ACTION_SCALE,
    BODY_NAMES,
    DEFAULT_JOINT_POS,
    G1_XML_PATH,
    JOINT_NAMES,
    STANDING_KEYFRAME,
    STANDING_PELVIS_HEIGHT,
    build_g1_spec,
)
from fuselab_envs.g1 import table as t

EXPECTED_BODIES = [
    "world",
    "pelvis",
    "left_hip_pitch_link",
    "left_hip_roll_link",
    "left_hip_yaw_link",
    "left_knee_link",
    "left_ankle_pitch_link",
    "left_ankle_roll_link",
    "right_hip_pitch_link",
    "right_hip_roll_link",
    "right_hip_yaw_link",
    "right_knee_link",
    "right_ankle_pitch_link",
    "right_ankle_roll_link",
    "waist_yaw_link",
    "waist_roll_link",
    "torso_link",
    "left_shoulder_pitch_link",
    "left_shoulder_roll_link",
    "left_shoulder_yaw_link",
    "left_elbow_link",
    "left_wrist_roll_link",
    "left_wrist_pitch_link",
    "left_wrist_yaw_link",
    "right_shoulder_pitch_link",
    "right_shoulder_roll_link",
    "right_shoulder_yaw_link",
    "right_elbow_link",
    "right_wrist_roll_link",
    "right_wrist_pitch_link",
    "right_wrist_yaw_link",
]

EXPECTED_JOINTS = [
    "left_hip_pitch_joint",
    "left_hip_roll_joint",
    "left_hip_yaw_joint",
    "left_knee_joint",
    "left_ankle_pitch_joint",
    "left_ankle_roll_joint",
    "right_hip_pitch_joint",
    "right_hip_roll_joint",
    "right_hip_yaw_joint",
    "right_knee_joint",
    "right_ankle_pitch_joint",
    "right_ankle_roll_joint",
    "waist_yaw_joint",
    "waist_roll_joint",
    "waist_pitch_joint",
    "left_shoulder_pitch_joint",
    "left_shoulder_roll_joint",
    "left_shoulder_yaw_joint",
    "left_elbow_joint",
    "left_wrist_roll_joint",
    "left_wrist_pitch_joint",
    "left_wrist_yaw_joint",
    "right_shoulder_pitch_joint",
    "right_shoulder_roll_joint",
    "right_shoulder_yaw_joint",
    "right_elbow_joint",
    "right_wrist_roll_joint",
    "right_wrist_pitch_joint",
    "right_wrist_yaw_joint",
]

OMEGA = 2.0 * math.pi * 10.0  # 10 Hz natural frequency
ZETA = 2.0  # damping ratio


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return build_g1_spec().compile()


@pytest.fixture(scope="module")
def xml_model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(str(G1_XML_PATH))


def _names(m: mujoco.MjModel, objtype: mujoco.mjtObj, n: int) -> list[str]:
    return [mujoco.mj_id2name(m, objtype, i) for i in range(n)]


def _standing_data(m: mujoco.MjModel) -> mujoco.MjData:
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key(STANDING_KEYFRAME).id)
    mujoco.mj_forward(m, d)
    return d


def _lowest_foot_point(m: mujoco.MjModel, d: mujoco.MjData) -> float:
    z = []
    for name in ("left_foot_collision", "right_foot_collision"):
        g = m.geom(name).id
        corners = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).reshape(3, -1).T
        pts = d.geom_xpos[g] + (corners * m.geom_size[g]) @ d.geom_xmat[g].reshape(3, 3).T
        z.append(pts[:, 2].min())
    return float(min(z))


# --------------------------------------------------------------------------------------------
# Structure
# --------------------------------------------------------------------------------------------


def test_compiles_from_spec_and_from_committed_xml(model, xml_model):
    assert G1_XML_PATH.is_file()
    for m in (model, xml_model):
        assert m.opt.timestep == pytest.approx(0.005)
        assert m.nmesh == 0


def test_bodies_have_the_public_names_in_depth_first_order(model):
    assert model.nbody == 31  # world + 30 links
    assert _names(model, mujoco.mjtObj.mjOBJ_BODY, model.nbody) == EXPECTED_BODIES
    assert list(BODY_NAMES) == EXPECTED_BODIES[1:]
    parents = {
        model.body(i).name: model.body(int(model.body_parentid[i])).name
        for i in range(1, model.nbody)
    }
    assert parents["pelvis"] == "world"
    assert parents["left_hip_pitch_link"] == "pelvis"
    assert parents["right_hip_pitch_link"] == "pelvis"
    assert parents["waist_yaw_link"] == "pelvis"
    assert parents["waist_roll_link"] == "waist_yaw_link"
    assert parents["torso_link"] == "waist_roll_link"
    assert parents["left_shoulder_pitch_link"] == "torso_link"
    assert parents["right_wrist_yaw_link"] == "right_wrist_pitch_link"
    assert parents["left_ankle_roll_link"] == "left_ankle_pitch_link"
    for row in t.BODIES:
        assert parents[row.name] == row.parent


def test_29_hinges_with_the_table_ranges_axes_and_armature(model):
    assert model.njnt == 30
    assert model.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE
    assert model.joint(0).name == "floating_base_joint"
    assert model.body_jntadr[model.body("pelvis").id] == 0
    assert _names(model, mujoco.mjtObj.mjOBJ_JOINT, model.njnt)[1:] == EXPECTED_JOINTS
    assert list(JOINT_NAMES) == EXPECTED_JOINTS
    assert np.all(model.jnt_type[1:] == mujoco.mjtJoint.mjJNT_HINGE)
    assert np.all(model.jnt_limited[1:])
    np.testing.assert_allclose(model.jnt_range[1:], [j.range for j in t.JOINTS])
    np.testing.assert_allclose(model.jnt_axis[1:], [j.axis for j in t.JOINTS])
    np.testing.assert_allclose(model.dof_armature[6:], [j.armature for j in t.JOINTS])
    for j in t.JOINTS:
        assert model.body(int(model.jnt_bodyid[model.joint(j.name).id])).name == j.body
    # A few public facts, spelled out.
    assert model.joint("left_knee_joint").range.tolist() == pytest.approx([-0.087267, 2.8798])
    assert model.joint("right_hip_roll_joint").range.tolist() == pytest.approx([-2.9671, 0.5236])
    assert model.joint("waist_pitch_joint").range.tolist() == pytest.approx([-0.52, 0.52])


def test_reflected_inertias_match_the_published_armature():
    for name, motor in t.MOTORS.items():
        assert motor.reflected_inertia == pytest.approx(t.PUBLISHED_ARMATURE[name], rel=1e-8)
    assert t.MOTORS["7520-22"].gear_ratio == pytest.approx(22.5)
    assert t.MOTORS["7520-14"].gear_ratio == pytest.approx(14.318, rel=1e-4)
    for j in t.JOINTS:
        motor = t.MOTORS[j.motor]
        assert j.armature == pytest.approx(j.n_motors * motor.reflected_inertia)
        assert j.effort_limit == pytest.approx(j.n_motors * motor.effort_limit)
        assert j.velocity_limit == motor.velocity_limit


def test_total_mass_is_the_table_sum_and_a_g1(model):
    table_mass = sum(row.mass for row in t.BODIES)
    assert model.body_subtreemass[0] == pytest.approx(table_mass)
    assert 30.0 < table_mass < 40.0
    np.testing.assert_allclose(model.body_mass[1:], [row.mass for row in t.BODIES])
    np.testing.assert_allclose(model.body_ipos[1:], [row.com for row in t.BODIES])
    # MuJoCo may reorder principal axes; the sorted moments are invariant.
    np.testing.assert_allclose(
        np.sort(model.body_inertia[1:], axis=1),
        np.sort([row.inertia for row in t.BODIES], axis=1),
        rtol=1e-6,
    )


def test_position_actuators_have_the_armature_derived_gains(model):
    assert model.nu == 29
    expected_names = [n.removesuffix("_joint") for n in EXPECTED_JOINTS]
    assert _names(model, mujoco.mjtObj.mjOBJ_ACTUATOR, model.nu) == expected_names
    for i, j in enumerate(t.JOINTS):
        assert model.joint(int(model.actuator_trnid[i, 0])).name == j.name
        kp = j.armature * OMEGA**2
        kd = 2.0 * ZETA * j.armature * OMEGA
        assert model.actuator_gainprm[i, 0] == pytest.approx(kp, rel=1e-12)
        np.testing.assert_allclose(model.actuator_biasprm[i, :3], [0.0, -kp, -kd], rtol=1e-12)
        assert model.actuator_forcelimited[i]
        np.testing.assert_allclose(model.actuator_forcerange[i], [-j.effort_limit, j.effort_limit])
        assert ACTION_SCALE[j.name] == pytest.approx(0.25 * j.effort_limit / kp, rel=1e-12)
    assert set(ACTION_SCALE) == set(EXPECTED_JOINTS)
    assert model.actuator("left_knee").gainprm[0] == pytest.approx(99.098, rel=1e-4)


def test_sites_floor_and_primitive_geoms(model):
    for site in ("imu_in_pelvis", "imu_in_torso", "left_foot", "right_foot"):
        assert model.site(site).id >= 0
    assert model.body(int(model.site_bodyid[model.site("imu_in_torso").id])).name == "torso_link"
    assert model.body(int(model.site_bodyid[model.site("left_foot").id])).name == (
        "left_ankle_roll_link"
    )
    floor = model.geom("floor")
    assert floor.type[0] == mujoco.mjtGeom.mjGEOM_PLANE
    primitives = {
        int(mujoco.mjtGeom.mjGEOM_CAPSULE),
        int(mujoco.mjtGeom.mjGEOM_BOX),
        int(mujoco.mjtGeom.mjGEOM_SPHERE),
    }
    robot_geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] != 0]
    assert all(int(model.geom_type[g]) in primitives for g in robot_geoms)
    assert {model.body(int(model.geom_bodyid[g])).name for g in robot_geoms} == set(BODY_NAMES)
    # Robot geoms never collide with each other; only the named ones touch the floor.
    colliding = {
        model.geom(g).name
        for g in robot_geoms
        if (model.geom_contype[g] & model.geom_conaffinity[floor.id])
        or (model.geom_conaffinity[g] & model.geom_contype[floor.id])
    }
    assert colliding == {
        f"{s}_{part}_collision" for s in ("left", "right") for part in ("foot", "shin", "hand")
    }
    assert all(model.geom_contype[g] == 0 for g in robot_geoms)


# --------------------------------------------------------------------------------------------
# Standing pose
# --------------------------------------------------------------------------------------------


def test_standing_keyframe_puts_the_soles_on_the_floor(model):
    key = model.key(STANDING_KEYFRAME)
    default = np.array([DEFAULT_JOINT_POS[n] for n in EXPECTED_JOINTS])
    np.testing.assert_allclose(key.qpos[7:], default)
    np.testing.assert_allclose(key.ctrl, default)
    assert key.qpos[2] == pytest.approx(STANDING_PELVIS_HEIGHT)
    lo, hi = model.jnt_range[1:].T
    assert np.all((lo <= default) & (default <= hi))
    d = _standing_data(model)
    assert _lowest_foot_point(model, d) == pytest.approx(0.0, abs=1e-3)
    for site in ("left_foot", "right_foot"):
        assert d.site(site).xpos[2] == pytest.approx(0.0, abs=2e-3)
    assert 0.70 < STANDING_PELVIS_HEIGHT < 0.80
    # Contacts at rest are feet against the floor only.
    for c in d.contact[: d.ncon]:
        names = {model.geom(int(c.geom[0])).name, model.geom(int(c.geom[1])).name}
        assert "floor" in names
        assert names - {"floor"} <= {"left_foot_collision", "right_foot_collision"}


def test_straight_legged_qpos0_stands_on_the_floor(model):
    d = mujoco.MjData(model)
    mujoco.mj_forward(model, d)
    assert _lowest_foot_point(model, d) == pytest.approx(0.0, abs=1e-3)


def _stand(m: mujoco.MjModel, seconds: float) -> tuple[float, float, mujoco.MjData]:
    """Hold the default pose with the position actuators; worst pelvis drop and torso tilt."""
    d = _standing_data(m)
    z0 = d.qpos[2]
    worst_dz, min_up = 0.0, 1.0
    for _ in range(round(seconds / m.opt.timestep)):
        mujoco.mj_step(m, d)
        worst_dz = max(worst_dz, abs(d.qpos[2] - z0))
        min_up = min(min_up, d.body("torso_link").xmat[8])  # cos of the torso's tilt
    return worst_dz, min_up, d


def _feet_in_contact(m: mujoco.MjModel, d: mujoco.MjData) -> set[str]:
    feet = {m.geom("left_foot_collision").id, m.geom("right_foot_collision").id}
    return {m.geom(int(g)).name for c in d.contact[: d.ncon] for g in c.geom if g in feet}


def test_settles_on_its_feet_under_the_nominal_pd_gains():
    # The armature-derived gains are policy gains: the ankles (2 x 28.5 N*m/rad) are far softer
    # than the toppling stiffness m*g*h (~200 N*m/rad), so without a policy the robot leans over
    # after about a second. The first half second checks feet, contacts and actuators.
    m = build_g1_spec().compile()
    worst_dz, min_up, d = _stand(m, 0.5)
    assert worst_dz < 0.05
    assert min_up > 0.95
    assert _feet_in_contact(m, d) == {"left_foot_collision", "right_foot_collision"}


def test_stands_for_2s_under_stiffened_pd():
    # The same position actuators with kp and kd scaled by 10 (test only): the mass distribution,
    # the feet and the standing pose hold the robot up with plain MuJoCo for 2 s.
    m = build_g1_spec().compile()
    m.actuator_gainprm[:, 0] *= 10.0
    m.actuator_biasprm[:, 1:3] *= 10.0
    worst_dz, min_up, d = _stand(m, 2.0)
    assert worst_dz < 0.05
    assert min_up > 0.95
    assert _feet_in_contact(m, d) == {"left_foot_collision", "right_foot_collision"}
    assert np.linalg.norm(d.qpos[:2]) < 0.1


# --------------------------------------------------------------------------------------------
# The committed MJCF
# --------------------------------------------------------------------------------------------


def test_committed_xml_is_up_to_date(model, xml_model):
    """If this fails, run ``python -m fuselab_envs.g1.build`` and commit g1.xml."""
    m, x = model, xml_model
    for objtype, n in (
        (mujoco.mjtObj.mjOBJ_BODY, "nbody"),
        (mujoco.mjtObj.mjOBJ_JOINT, "njnt"),
        (mujoco.mjtObj.mjOBJ_GEOM, "ngeom"),
        (mujoco.mjtObj.mjOBJ_SITE, "nsite"),
        (mujoco.mjtObj.mjOBJ_ACTUATOR, "nu"),
        (mujoco.mjtObj.mjOBJ_SENSOR, "nsensor"),
        (mujoco.mjtObj.mjOBJ_KEY, "nkey"),
    ):
        assert _names(m, objtype, getattr(m, n)) == _names(x, objtype, getattr(x, n))
    # MJCF stores 6 significant digits.
    for field in (
        "body_parentid",
        "body_pos",
        "body_quat",
        "body_mass",
        "body_ipos",
        "body_iquat",
        "body_inertia",
        "jnt_type",
        "jnt_bodyid",
        "jnt_axis",
        "jnt_range",
        "dof_armature",
        "dof_damping",
        "geom_type",
        "geom_bodyid",
        "geom_size",
        "geom_pos",
        "geom_quat",
        "geom_contype",
        "geom_conaffinity",
        "geom_friction",
        "site_pos",
        "site_bodyid",
        "actuator_trnid",
        "actuator_gainprm",
        "actuator_biasprm",
        "actuator_ctrlrange",
        "actuator_forcerange",
        "sensor_type",
        "key_qpos",
        "key_ctrl",
    ):
        np.testing.assert_allclose(
            getattr(x, field), getattr(m, field), rtol=2e-5, atol=1e-8, err_msg=field
        )
    assert x.opt.timestep == m.opt.timestep
    assert x.opt.integrator == m.opt.integrator
