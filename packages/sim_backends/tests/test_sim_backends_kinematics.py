"""The kinematics pass of the MuJoCo CPU backend against MuJoCo itself, on a model with every
joint type, joint anchors and axes off the body frame, welded and mocap bodies."""

import mujoco
import numpy as np
from sim_backends_models import mujoco_body_states

from fuselab_sim_backends.kinematics import STATE_WIDTH, KinematicTree, forward_kinematics
from fuselab_sim_backends.mujoco_cpu import MujocoBackend

EVERY_JOINT_XML = """
<mujoco>
  <worldbody>
    <body name="mocap" mocap="true" pos="0.3 0.2 1" quat="0.9 0.1 0.3 0.2"><geom size="0.1"/></body>
    <body name="root" pos="0 0 1">
      <freejoint/>
      <geom size="0.1"/>
      <body name="hinged" pos="0.1 0.2 0.3" quat="0.7 0.1 0.5 0.2">
        <joint type="hinge" axis="0.3 1 0.2" pos="0.05 -0.02 0.1"/>
        <geom size="0.1"/>
        <body name="three_joints" pos="0 0.3 0">
          <joint type="slide" axis="1 0.5 0"/>
          <joint type="hinge" axis="0 0 1" pos="0.1 0 0"/>
          <joint type="hinge" axis="1 0 0" pos="0 0.1 0.1"/>
          <geom size="0.1"/>
          <body name="welded" pos="0.2 0.1 0" quat="0.5 0.5 0.5 0.5">
            <geom size="0.05"/>
            <body name="ball_last" pos="0 0 0.2">
              <joint type="hinge" axis="0 1 0" pos="0.1 0 0"/>
              <joint type="slide" axis="0 1 1"/>
              <joint type="ball" pos="0.02 0.03 0.04"/>
              <geom size="0.1"/>
            </body>
          </body>
        </body>
      </body>
    </body>
    <body name="on_rails" pos="1 0 0.5">
      <joint type="slide" axis="0 0 1" ref="0.3"/>
      <joint type="hinge" axis="0 1 0" ref="0.5"/>
      <geom size="0.1"/>
    </body>
  </worldbody>
</mujoco>
"""


def random_states(model, num_envs, seed=0):
    """Any qpos (non-unit quaternions included: both sides normalise) and qvel, float64."""
    rng = np.random.default_rng(seed)
    qpos = np.tile(model.qpos0, (num_envs, 1)) + rng.normal(0, 1, (num_envs, model.nq))
    return qpos, rng.normal(0, 2, (num_envs, model.nv))


def test_every_joint_type_matches_mujoco_to_rounding():
    model = mujoco.MjModel.from_xml_string(EVERY_JOINT_XML)
    qpos, qvel = random_states(model, 40)
    out = np.full((40, model.nbody, STATE_WIDTH), np.nan)
    forward_kinematics(KinematicTree.of(model), qpos, qvel, np.arange(40), out)
    pos, quat, lin, ang = mujoco_body_states(model, qpos, qvel)
    np.testing.assert_allclose(out[..., 0:3], pos, atol=1e-12)
    np.testing.assert_allclose(out[..., 3:7], quat, atol=1e-12)
    np.testing.assert_allclose(out[..., 7:10], lin, atol=1e-12)
    np.testing.assert_allclose(out[..., 10:13], ang, atol=1e-12)


def test_only_the_given_envs_are_written():
    model = mujoco.MjModel.from_xml_string(EVERY_JOINT_XML)
    qpos, qvel = random_states(model, 4, seed=1)
    out = np.zeros((4, model.nbody, STATE_WIDTH))
    forward_kinematics(KinematicTree.of(model), qpos, qvel, np.array([1, 3]), out)
    assert not out[[0, 2]].any()
    assert out[[1, 3], :, 3].all()  # every quaternion written


def test_backend_reads_every_body_after_reset_and_after_steps():
    model = mujoco.MjModel.from_xml_string(EVERY_JOINT_XML)
    n = 5
    sim = MujocoBackend(EVERY_JOINT_XML, n, num_threads=2)
    qpos, qvel = random_states(model, n, seed=2)
    qpos, qvel = qpos.astype(np.float32), qvel.astype(np.float32)
    ids = np.arange(model.nbody, dtype=np.int32)
    out = [np.zeros((n, model.nbody, k), np.float32) for k in (3, 4, 3, 3)]
    sim.reset_envs(np.arange(n), qpos, qvel)
    sim.copy_body_state_w(ids, *out)
    for got, want in zip(out, mujoco_body_states(model, qpos, qvel), strict=True):
        np.testing.assert_allclose(got, want, atol=2e-6)
    sim.step(3)
    sim.copy_body_state_w(ids, *out)
    final = sim._qpos.copy(), sim._qvel.copy()  # float64: float32 copies would round
    for got, want in zip(out, mujoco_body_states(model, *final), strict=True):
        np.testing.assert_allclose(got, want, atol=2e-6)
    sim.close()
