"""What only the MotrixSim adapter has to get right: MuJoCo's joint layout and kinematics on
corner cases, its own quaternion order and normalization, reads that never step the engine.
The contract itself: test_sim_backends_contract.py."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from sim_backends_models import WALKER_XML, mujoco_body_states

pytest.importorskip("motrixsim")

from fuselab_sim_backends.motrix import MotrixBackend  # noqa: E402

NUM_ENVS = 4
# Plain ints: a pybind11 enum never equals a NumPy integer, so `np.int32(0) in (enum, ...)` fails.
FREE, BALL = int(mujoco.mjtJoint.mjJNT_FREE), int(mujoco.mjtJoint.mjJNT_BALL)
SLIDE, HINGE = int(mujoco.mjtJoint.mjJNT_SLIDE), int(mujoco.mjtJoint.mjJNT_HINGE)

# Layout and velocity corner cases the walker lacks: two floating bases, a static chain, a body
# with a hinge and a slide anchored away from its origin, a chain of rotated bodies without
# joints under it, a ball joint off the origin, and a jointless body under the ball.
CORNER_XML = """
<mujoco model="corner_cases">
  <compiler angle="radian"/>
  <worldbody>
    <body name="static" pos="1 0 0">
      <geom type="sphere" size="0.1"/>
      <body name="static_child" pos="0 0 0.3"><geom type="sphere" size="0.1"/></body>
    </body>
    <body name="a" pos="0 0 1" quat="0.8 0.2 0.3 0.1">
      <freejoint name="a_root"/>
      <geom type="sphere" size="0.1" pos="0.05 0.02 0"/>
      <body name="a1" pos="0.2 0 0.1" quat="0.7 0.1 0.5 0.2">
        <joint name="a_hinge" type="hinge" axis="0.3 0 1" pos="0.05 0.1 -0.2"/>
        <joint name="a_slide" type="slide" axis="1 0.2 0" pos="0.3 0.1 0"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02"/>
        <body name="a1_fixed" pos="0.3 -0.1 0.2" quat="0.9 0 0.3 0">
          <geom type="sphere" size="0.05" pos="0.1 0 0"/>
          <body name="a1_fixed2" pos="0 0.2 0.1" quat="0.9 0.2 0 0.1">
            <geom type="sphere" size="0.05"/>
            <body name="a1_tip" pos="0.1 0 0">
              <joint name="tip_hinge" type="hinge" axis="0 1 0" pos="0 0 0.05"/>
              <geom type="sphere" size="0.05" pos="0.1 0 0"/>
            </body>
          </body>
        </body>
      </body>
    </body>
    <body name="arm" pos="0 1 1">
      <joint name="arm_slide" type="slide" axis="1 0 0"/>
      <geom type="sphere" size="0.1"/>
      <body name="ball_body" pos="0 0 -0.2" quat="0.9 0.1 0.2 0.3">
        <joint name="ball" type="ball" pos="0 0.1 0.1"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.02"/>
        <body name="ball_fixed" pos="0.1 0 -0.3"><geom type="sphere" size="0.03"/></body>
      </body>
    </body>
    <body name="b" pos="0 2 1">
      <freejoint name="b_root"/>
      <geom type="box" size="0.1 0.1 0.1"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="arm_motor" joint="arm_slide"/>
    <position name="a_servo" joint="a_hinge" kp="10"/>
  </actuator>
</mujoco>
"""


@pytest.fixture(scope="module")
def walker() -> MotrixBackend:
    return MotrixBackend(WALKER_XML, NUM_ENVS)


def random_state(model: mujoco.MjModel, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(NUM_ENVS, nq) and (NUM_ENVS, nv) float32: unit quaternions (free and ball joints),
    limited 1-dof joints within range, unlimited ones in +-1."""
    qpos = np.tile(model.qpos0, (NUM_ENVS, 1))
    for j in range(model.njnt):
        adr, kind = model.jnt_qposadr[j], int(model.jnt_type[j])
        if kind in (FREE, BALL):
            start = adr
            if kind == FREE:
                qpos[:, adr : adr + 3] += rng.uniform(-0.3, 0.3, (NUM_ENVS, 3))
                start = adr + 3
            quat = rng.normal(size=(NUM_ENVS, 4))
            qpos[:, start : start + 4] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
        elif model.jnt_limited[j]:
            qpos[:, adr] = rng.uniform(*model.jnt_range[j], NUM_ENVS)
        else:
            qpos[:, adr] = rng.uniform(-1.0, 1.0, NUM_ENVS)
    qvel = rng.normal(size=(NUM_ENVS, model.nv))
    return qpos.astype(np.float32), qvel.astype(np.float32)


def body_buffers(num_bodies: int) -> list[np.ndarray]:
    return [np.zeros((NUM_ENVS, num_bodies, k), np.float32) for k in (3, 4, 3, 3)]


def w_positive(quat: np.ndarray) -> np.ndarray:
    return np.where(quat[..., :1] < 0, -quat, quat)


def max_body_state_error(backend: MotrixBackend, model: mujoco.MjModel, qpos, qvel) -> dict:
    body_ids = np.arange(1, model.nbody, dtype=np.int32)
    out_pos, out_quat, out_lin, out_ang = body_buffers(body_ids.size)
    backend.copy_body_state_w(body_ids, out_pos, out_quat, out_lin, out_ang)
    pos, quat, lin, ang = (a[:, 1:] for a in mujoco_body_states(model, qpos, qvel))
    return {
        "pos": np.abs(out_pos - pos).max(),
        "quat": np.abs(w_positive(out_quat) - w_positive(quat)).max(),
        "lin_vel": np.abs(out_lin - lin).max(),
        "ang_vel": np.abs(out_ang - ang).max(),
    }


def test_model_facts_are_in_mujocos_order_and_layout():
    model = mujoco.MjModel.from_xml_string(CORNER_XML)
    one_dof = [j for j in range(model.njnt) if int(model.jnt_type[j]) in (HINGE, SLIDE)]

    facts = MotrixBackend(CORNER_XML, 2).model

    assert facts.body_names == tuple(model.body(b).name for b in range(model.nbody))
    assert facts.body_names[0] == "world"
    assert facts.joint_names == tuple(model.joint(j).name for j in one_dof)
    assert facts.actuator_names == tuple(model.actuator(a).name for a in range(model.nu))
    np.testing.assert_array_equal(facts.joint_qpos_adr, model.jnt_qposadr[one_dof])
    np.testing.assert_array_equal(facts.joint_qvel_adr, model.jnt_dofadr[one_dof])
    limited = model.jnt_limited[one_dof].astype(bool)
    np.testing.assert_allclose(facts.joint_ranges[limited], model.jnt_range[one_dof][limited])
    assert np.isinf(facts.joint_ranges[~limited]).all()
    assert (facts.nq, facts.nv, facts.nu) == (model.nq, model.nv, model.nu)
    assert facts.physics_dt == model.opt.timestep


def test_body_states_match_mujoco_kinematics():
    model = mujoco.MjModel.from_xml_string(CORNER_XML)
    backend = MotrixBackend(CORNER_XML, NUM_ENVS)
    qpos, qvel = random_state(model, np.random.default_rng(7))
    backend.reset_envs(np.arange(NUM_ENVS, dtype=np.int32), qpos, qvel)

    errors = max_body_state_error(backend, model, qpos, qvel)

    assert max(errors.values()) < 1e-4, errors


def test_reading_body_states_does_not_change_the_trajectory():
    model = mujoco.MjModel.from_xml_string(WALKER_XML)
    qpos, qvel = random_state(model, np.random.default_rng(9))
    controls = np.random.default_rng(10).uniform(-0.5, 0.5, (NUM_ENVS, model.nu))
    finals = []
    for read in (False, True):
        backend = MotrixBackend(WALKER_XML, NUM_ENVS)
        backend.reset_envs(np.arange(NUM_ENVS, dtype=np.int32), qpos, qvel)
        buffers = body_buffers(model.nbody)
        for _ in range(10):
            backend.set_controls(controls.astype(np.float32))
            backend.step(2)
            if read:
                backend.copy_body_state_w(np.arange(model.nbody, dtype=np.int32), *buffers)
        final = np.zeros((NUM_ENVS, model.nq), np.float32)
        backend.copy_qpos_qvel(final, np.zeros((NUM_ENVS, model.nv), np.float32))
        finals.append(final)
    np.testing.assert_array_equal(finals[0], finals[1])


def test_a_zero_reset_quaternion_is_rejected_before_anything_is_written(walker):
    nq, nv = walker.model.nq, walker.model.nv
    before = np.zeros((NUM_ENVS, nq), np.float32)
    walker.copy_qpos_qvel(before, np.zeros((NUM_ENVS, nv), np.float32))
    qpos = np.tile(before[:1], (2, 1))
    qpos[1, 3:7] = 0.0
    with pytest.raises(ValueError, match=r"qpos: columns 3..6 hold a quaternion .* rows \[1\]"):
        walker.reset_envs(np.array([0, 1], np.int32), qpos, np.zeros((2, nv), np.float32))
    after = np.zeros_like(before)
    walker.copy_qpos_qvel(after, np.zeros((NUM_ENVS, nv), np.float32))
    np.testing.assert_array_equal(after, before)


def test_unnormalized_reset_quaternions_are_normalized(walker):
    model = mujoco.MjModel.from_xml_string(WALKER_XML)
    qpos, qvel = random_state(model, np.random.default_rng(5))
    scaled = qpos.copy()
    scaled[:, 3:7] *= 1.01

    walker.reset_envs(np.arange(NUM_ENVS, dtype=np.int32), scaled, qvel)

    out_qpos = np.zeros_like(qpos)
    walker.copy_qpos_qvel(out_qpos, np.zeros_like(qvel))
    np.testing.assert_allclose(out_qpos, qpos, atol=1e-5)
