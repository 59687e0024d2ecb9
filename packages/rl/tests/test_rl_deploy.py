"""The deploy contract: policy.onnx describes itself, a robot-side observation module that
imports nothing of fuselab's env gives the policy the env's inputs, and sim2sim runs it."""

import ast
import inspect

import mujoco
import numpy as np
import pytest

import fuselab_envs
from fuselab_envs.robots import robot
from fuselab_rl import robot_observations
from fuselab_rl.deploy import describe_policy, flat_keys
from fuselab_rl.robot_observations import ObservationBuilder, RobotState, joint_columns

CLEAN = ["env.randomize=false", "observations.actor.noise=false"]


def robot_state(env, model, data, row, doc):
    """What a robot-side program has at env row ``row``: its MjData, last action, command or
    the clip's reference at the row's frame."""
    data.qpos[:] = env.robot.qpos[row]
    data.qvel[:] = env.robot.qvel[row]
    mujoco.mj_kinematics(model, data)
    qpos_cols, qvel_cols = joint_columns(model, doc["joints"]["names"])
    inputs = {}
    if "velocity" in env.commands:
        inputs["command"] = env.commands["velocity"].command[row]
    if "gait" in env.commands:
        inputs["gait_phase"] = env.commands["gait"].gait_phase[row]
    if "motion" in env.commands:
        motion = env.commands["motion"]
        f = motion.motion_frame[row]
        inputs["reference"] = {
            "ref_joint_pos": motion.arrays["motion_joint_pos"][f],
            "ref_joint_vel": motion.arrays["motion_joint_vel"][f],
            "ref_body_pos_w": motion.arrays["motion_body_pos_w"][f],
            "ref_body_quat_w": motion.arrays["motion_body_quat_w"][f],
        }
        inputs["body_ids"] = {
            name: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
            for name in motion.body_names
        }
    return RobotState(data, qpos_cols, qvel_cols, env.actions[row].copy(), **inputs)


@pytest.mark.parametrize(
    "task, extra",
    [
        ("g1_walk_flat", []),
        ("g1_walk_flat_privileged", ["+observations.actor.history=3"]),
        ("g1_walk_flat_gait", []),
        ("g1_motion_tracking", []),
        ("g1_motion_tracking_privileged", []),
    ],
)
def test_the_robot_side_observations_equal_the_envs(task, extra):
    overrides = [*CLEAN, *extra]
    cfg = fuselab_envs.compose(task, overrides)
    env = fuselab_envs.make(task, overrides, num_envs=3)
    try:
        doc = describe_policy(env, cfg)
        model = mujoco.MjModel.from_xml_path(str(robot("g1").model()))
        data = mujoco.MjData(model)
        builders = [ObservationBuilder(doc) for _ in range(env.num_envs)]
        rng = np.random.default_rng(0)
        obs, reset = env.terms.buffers.obs["actor"], np.arange(env.num_envs)  # after reset_all
        for step in range(12):
            for row in range(env.num_envs):
                if row in reset:  # a new episode: the program starts its history over
                    builders[row].reset()
                got = builders[row](robot_state(env, model, data, row, doc))
                np.testing.assert_allclose(got, obs[row], rtol=0, atol=1e-5, err_msg=f"step {step}")
            result = env.step(rng.uniform(-0.5, 0.5, (3, env.action_dim)).astype(np.float32))
            obs, reset = result.obs["actor"], result.info["reset_envs"]
    finally:
        env.close()


def test_the_robot_side_gait_clock_runs_the_documents_rule():
    cfg = fuselab_envs.compose("g1_walk_flat_gait", CLEAN)
    env = fuselab_envs.make("g1_walk_flat_gait", CLEAN, num_envs=1)
    doc = describe_policy(env, cfg)
    env.close()
    clock = robot_observations.GaitClock(doc)
    walk, stand = np.array([0.5, 0.0, 0.0]), np.zeros(3)
    np.testing.assert_allclose(clock.phase(walk), [0.0, -np.pi])
    for _ in range(30):
        clock.advance()
    left = (30 * 2 * np.pi * doc["control_dt"] / 1.0 + np.pi) % (2 * np.pi) - np.pi
    np.testing.assert_allclose(clock.phase(walk), [left, left + np.pi], atol=1e-9)  # (left < 0)
    np.testing.assert_allclose(clock.phase(stand), [np.pi, np.pi])
    clock.reset()
    assert clock.phase(walk)[0] == 0.0


def test_the_document_holds_what_a_robot_needs():
    cfg = fuselab_envs.compose("g1_walk_flat", CLEAN)
    env = fuselab_envs.make("g1_walk_flat", CLEAN, num_envs=2)
    try:
        doc = describe_policy(env, cfg)
    finally:
        env.close()
    assert doc["control_dt"] == pytest.approx(0.02) and doc["decimation"] == 4
    assert len(doc["joints"]["names"]) == 29 and len(doc["joints"]["kp"]) == 29
    assert doc["joints"]["names"][0] == "left_hip_pitch_joint"
    assert doc["joints"]["kp"][0] == pytest.approx(40.1792, rel=1e-3)  # in joint order
    assert [t["name"] for t in doc["observations"]["terms"]][:2] == [
        "base_ang_vel",
        "projected_gravity",
    ]
    assert "def base_ang_vel" in doc["observations"]["terms"][0]["source"]
    assert doc["commands"]["velocity"]["ranges"]["lin_vel_x"] == [-1.0, 1.0]
    keys = flat_keys(doc)
    assert keys["joint_names"].split(",")[0] == "left_hip_pitch_joint"
    assert len(keys["action_scale"].split(",")) == 29


def test_the_robot_side_module_imports_no_env_code():
    tree = ast.parse(inspect.getsource(robot_observations))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert imported <= {"__future__", "collections", "dataclasses", "typing", "mujoco", "numpy"}
