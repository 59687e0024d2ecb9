"""FusedEnv on the MuJoCo backend: resets, terminal observations, time-outs, NaN action rows."""

import dataclasses
import math
from pathlib import Path

import mujoco
import numpy as np
import pytest

from fuselab_env_core.actions import build_action
from fuselab_env_core.entity import Entity
from fuselab_env_core.env import FusedEnv
from fuselab_env_core.events import EventManager, event
from fuselab_env_core.terms import observation, reward, termination
from fuselab_sim_backends.mujoco_cpu import MujocoBackend

WALKER_XML = (Path(__file__).parents[1] / "packages/sim_backends/tests/walker.xml").read_text()

N = 8


@reward(name="walker_upright")
def upright(i, body_quat_w):
    x, y = body_quat_w[i, 0, 1], body_quat_w[i, 0, 2]
    return 1.0 - 2.0 * (x * x + y * y)  # z component of the torso's z axis


@reward(name="walker_joint_speed_exp")
def joint_speed_exp(i, joint_vel):
    """exp of the first joint's speed: overflows to inf past ~89 rad/s (float32)."""
    return math.exp(abs(joint_vel[i, 0]))


@observation(size=1, name="walker_joint_speed_exp_obs")
def joint_speed_exp_obs(i, out, col, joint_vel):
    """exp of the first joint's speed: overflows to inf past ~89 rad/s (float32)."""
    out[i, col] = math.exp(abs(joint_vel[i, 0]))


@termination(name="walker_fell")
def fell(i, body_pos_w, min_height_m: float = 0.4):
    return body_pos_w[i, 0, 2] < min_height_m


@observation(size=1, name="walker_height")
def height(i, out, col, body_pos_w):
    out[i, col] = body_pos_w[i, 0, 2]


@observation(size=lambda shapes, params: shapes["joint_pos"][0], name="walker_joint_pos")
def joint_pos(i, out, col, joint_pos):
    for j in range(joint_pos.shape[1]):
        out[i, col + j] = joint_pos[i, j]


TERMS = {
    "rewards": {"upright": {"term": "walker_upright", "weight": 1.0}},
    "terminations": {
        "fell": {"term": "walker_fell"},
        "time_out": {"term": "time_out", "time_out": True},
    },
    "observations": {
        "actor": {
            "terms": {"height": {"term": "walker_height"}, "joints": {"term": "walker_joint_pos"}}
        }
    },
}


class WalkerStand(FusedEnv):
    def __init__(
        self,
        episode_length_s=1.0,
        min_height_m=0.4,
        extra_rewards=None,
        extra_observations=None,
        **kwargs,
    ):
        backend = MujocoBackend(WALKER_XML, N, num_threads=2)
        self.model = mujoco.MjModel.from_xml_string(WALKER_XML)
        terms = {**TERMS, "terminations": {**TERMS["terminations"]}}
        terms["rewards"] = {**TERMS["rewards"], **(extra_rewards or {})}
        actor = TERMS["observations"]["actor"]["terms"]
        terms["observations"] = {"actor": {"terms": {**actor, **(extra_observations or {})}}}
        terms["terminations"]["fell"] = {
            "term": "walker_fell",
            "params": {"min_height_m": min_height_m},
        }
        super().__init__(
            backend,
            Entity(backend, ["torso"]),
            terms,
            **walker_parts(backend, self.model),
            decimation=4,
            episode_length_s=episode_length_s,
            **kwargs,
        )


def walker_parts(backend, model):
    """The walker's action mapping (position targets 0.5 x action around its initial pose), its
    initial state and a reset event that jitters its joints by up to 0.1 rad."""
    facts = backend.model
    action = build_action(
        {"joint_pos": {"term": "joint_position", "params": {"scale": 0.5}}},
        facts,
        backend.num_envs,
        model.qpos0[facts.joint_qpos_adr].astype(np.float32),
    )
    reset = {
        "term": "reset_joints_by_offset",
        "mode": "reset",
        "params": {"position_rad": [-0.1, 0.1]},
    }
    events = EventManager({"reset_joints": reset}, backend, facts.physics_dt * 4)
    return {"action": action, "init_qpos": model.qpos0, "events": events}


def test_200_random_steps_reset_and_keep_shapes():
    env = WalkerStand(episode_length_s=0.5)
    rng = np.random.default_rng(0)
    resets = 0
    for _ in range(200):
        result = env.step(rng.uniform(-1, 1, (N, 6)).astype(np.float32))
        assert result.obs["actor"].shape == (N, 7) and result.obs["actor"].dtype == np.float32
        assert result.reward.shape == (N,) and result.terminated.dtype == np.bool_
        assert np.isfinite(result.obs["actor"]).all() and np.isfinite(result.reward).all()
        resets += len(result.info["reset_envs"])
    assert resets >= N * 200 // 25 - N  # every env times out every 25 steps at least


def test_after_resets_the_bound_state_equals_a_full_copy():
    # The step copies again only the rows a reset wrote; every buffer must match a full copy.
    env = WalkerStand(episode_length_s=0.1)  # 5 steps: rows reset at different steps
    rng = np.random.default_rng(1)
    resets = 0
    for _ in range(30):
        result = env.step(rng.uniform(-1, 1, (N, 6)).astype(np.float32))
        resets += len(result.info["reset_envs"])
        copied = {name: array.copy() for name, array in env.robot.state().items()}
        env.robot.update()
        for name, array in env.robot.state().items():
            np.testing.assert_array_equal(copied[name], array, err_msg=name)
    assert resets >= N * 30 // 5


def test_time_outs_are_truncations_and_reset_rows_get_fresh_observations():
    env = WalkerStand(episode_length_s=0.2, min_height_m=0.0)  # 10 steps, nobody can fall
    zeros = np.zeros((N, 6), np.float32)
    for step in range(1, 11):
        result = env.step(zeros)
        if step < 10:
            assert not result.truncated.any() and not result.terminated.any()
    assert result.truncated.all() and not result.terminated.any()
    assert set(result.info["reset_envs"]) == set(range(N))
    heights = result.obs["actor"][:, 0]
    np.testing.assert_allclose(heights, env.model.qpos0[2], atol=1e-6)  # the reset pose
    terminal = result.info["terminal_obs"]["actor"][:, 0]
    assert np.all(terminal < env.model.qpos0[2] - 1e-3)  # where each episode ended, settled lower
    assert (env.episode_step == 0).all()


def test_failures_end_episodes_and_are_counted():
    env = WalkerStand(episode_length_s=10.0, min_height_m=0.73)  # the walker settles below
    failed = np.zeros(N, bool)
    for _ in range(20):
        result = env.step(np.zeros((N, 6), np.float32))
        failed |= result.terminated
        assert not result.truncated.any()
    assert failed.all()
    assert "fell" in result.info["terminations"] and "upright" in result.info["reward_terms"]


def test_non_finite_action_rows_are_reported_and_reset_alone():
    env = WalkerStand(episode_length_s=10.0, min_height_m=0.0)
    actions = np.zeros((N, 6), np.float32)
    env.step(actions)
    actions[3, 2] = np.nan
    result = env.step(actions)
    assert list(result.info["non_finite_actions"]) == [3]
    assert result.terminated[3] and not result.terminated[[0, 1, 2, 4, 5, 6, 7]].any()
    assert list(result.info["reset_envs"]) == [3]
    assert np.isfinite(result.obs["actor"]).all()


def test_float64_actions_beyond_float32_count_as_non_finite_and_controls_follow_the_rest():
    env = WalkerStand(episode_length_s=10.0, min_height_m=0.0)
    actions = np.full((N, 6), 0.25)  # float64, cast to the env's float32 actions
    env.step(actions)
    actions[5, 0] = 1e39  # finite in float64, inf in float32
    result = env.step(actions)
    assert list(result.info["non_finite_actions"]) == [5]
    assert (env._controls[5] == env.action.offset).all()  # it held still, then reset
    assert (np.delete(env.last_actions, 5, axis=0) == np.float32(0.25)).all()
    expected = env.action.offset + env.action.scale * np.float32(0.25)
    assert np.array_equal(np.delete(env._controls, 5, axis=0), np.tile(expected, (N - 1, 1)))


def test_a_diverged_env_ends_as_a_failure_that_earns_nothing_and_is_reset_alone():
    env = WalkerStand(episode_length_s=10.0, min_height_m=0.0)
    actions = np.zeros((N, 6), np.float32)
    env.step(actions)
    qpos = env.model.qpos0[None].astype(np.float32)
    env.backend.reset_envs(np.array([5]), qpos, np.full((1, env.model.nv), 1e30, np.float32))
    result = env.step(actions)
    assert list(result.info["non_finite_states"]) == [5]
    assert result.terminated[5] and not np.delete(result.terminated, 5).any()
    assert result.reward[5] == 0.0 and np.isfinite(result.reward).all()
    assert list(result.info["reset_envs"]) == [5]
    assert np.isfinite(result.obs["actor"]).all()
    assert list(env.step(actions).info["non_finite_states"]) == []


def _step_with_a_spinning_joint(env, row, actions):
    """One step, then ``row``'s first hinge joint set spinning at 300 rad/s (extreme but
    finite), then the step that sees it."""
    env.step(actions)
    qvel = np.zeros((1, env.model.nv), np.float32)
    qvel[0, 6] = 300.0  # the first hinge joint
    env.backend.reset_envs(np.array([row]), env.model.qpos0[None].astype(np.float32), qvel)
    return env.step(actions)


def test_a_row_whose_reward_overflows_ends_as_a_failure_that_earns_nothing():
    """Extreme but finite state (a joint at 300 rad/s): the reward term overflows to inf in
    that row only; the row fails, earns 0, is reported and reset alone."""
    speed = {"speed": {"term": "walker_joint_speed_exp", "weight": 1e-3}}
    env = WalkerStand(episode_length_s=10.0, min_height_m=0.0, extra_rewards=speed)
    actions = np.zeros((N, 6), np.float32)
    result = _step_with_a_spinning_joint(env, row=2, actions=actions)
    assert list(result.info["non_finite_rewards"]) == [2]
    assert list(result.info["non_finite_states"]) == []
    assert result.terminated[2] and not np.delete(result.terminated, 2).any()
    assert result.reward[2] == 0.0 and np.isfinite(result.reward).all()
    assert list(result.info["reset_envs"]) == [2]
    assert list(env.step(actions).info["non_finite_rewards"]) == []


def test_a_row_whose_observation_overflows_ends_as_a_failure_and_observes_again_finite():
    """Extreme but finite state (a joint at 300 rad/s): an observation term overflows to inf in
    that row only; the row fails, earns 0, is reported, its terminal observation is finite, and
    it is reset alone and observes a finite start."""
    speed = {"speed": {"term": "walker_joint_speed_exp_obs"}}
    env = WalkerStand(episode_length_s=10.0, min_height_m=0.0, extra_observations=speed)
    actions = np.zeros((N, 6), np.float32)
    result = _step_with_a_spinning_joint(env, row=4, actions=actions)
    assert list(result.info["non_finite_observations"]) == [4]
    assert list(result.info["non_finite_states"]) == list(result.info["non_finite_rewards"]) == []
    assert result.terminated[4] and not np.delete(result.terminated, 4).any()
    assert result.reward[4] == 0.0
    assert list(result.info["reset_envs"]) == [4]
    assert np.isfinite(result.obs["actor"]).all()
    assert np.isfinite(result.info["terminal_obs"]["actor"][4]).all()
    assert list(env.step(actions).info["non_finite_observations"]) == []


def test_actions_drive_their_joints_clipped_and_delayed_per_env_and_the_rest_hold_still():
    """An action mapping over some joints (hip pitch and knee, a scale per joint pattern, clip
    0.5): the other actuators hold the initial pose; env 1's actions arrive a step late."""
    backend = MujocoBackend(WALKER_XML, N, num_threads=2)
    model = mujoco.MjModel.from_xml_string(WALKER_XML)
    params = {
        "joints": [".*_hip_pitch", ".*_knee"],
        "scale": {".*_hip_pitch": 0.5, ".*_knee": 0.25},
        "clip": 0.5,
    }
    facts = backend.model
    init_joint_pos = model.qpos0[facts.joint_qpos_adr].astype(np.float32)
    action = build_action(
        {"legs": {"term": "joint_position", "params": params}}, facts, N, init_joint_pos
    )
    env = FusedEnv(
        backend, Entity(backend, ["torso"]), TERMS, action=action, init_qpos=model.qpos0,
        decimation=4, episode_length_s=10.0,
    )  # fmt: skip
    assert env.action_dim == 4 and env.actions.shape == (N, 4)
    driven = [facts.actuator_names.index(n) for n in ("left_hip_pitch", "left_knee")]
    driven += [facts.actuator_names.index(n) for n in ("right_hip_pitch", "right_knee")]
    held = [a for a in range(facts.nu) if a not in driven]
    scale = np.array([0.5, 0.25, 0.5, 0.25], np.float32)
    np.testing.assert_array_equal(action.actuators, driven)
    np.testing.assert_array_equal(action.scale, scale)
    action.set_delay(np.array([1]), np.array([1]))
    first, second = np.full((N, 4), 0.8, np.float32), np.full((N, 4), -0.2, np.float32)
    env.step(first)
    others = np.delete(np.arange(N), 1)
    np.testing.assert_array_equal(env.actions, first)  # the policy's actions, unclipped
    np.testing.assert_array_equal(
        env._controls[np.ix_(others, driven)], np.tile(scale * 0.5, (N - 1, 1))
    )
    np.testing.assert_array_equal(env._controls[1, driven], 0.0)  # nothing arrived yet
    np.testing.assert_array_equal(env._controls[:, held], 0.0)  # the initial pose
    env.step(second)
    np.testing.assert_array_equal(env.last_actions, first)
    np.testing.assert_allclose(
        env._controls[np.ix_(others, driven)], np.tile(scale * -0.2, (N - 1, 1))
    )
    np.testing.assert_array_equal(env._controls[1, driven], scale * 0.5)  # a step late
    np.testing.assert_array_equal(env._controls[:, held], 0.0)


def test_an_action_reaches_its_joints_farther_limit_within_its_clip():
    """``reach``: the action whose position target lies on the joint's farther limit (the
    walker's hips -1.2..1.2 and -0.5..0.5, knees 0..2 from a pose of zeros), 1 for an unlimited
    joint and for a motor, never past ``clip``."""
    backend = MujocoBackend(WALKER_XML, N, num_threads=2)
    facts = backend.model
    pose = np.zeros(len(facts.joint_names), np.float32)
    scale = {".*_hip_pitch": 0.5, ".*_hip_roll": 0.25, ".*_knee": 0.2}
    legs = {"joints": ["left_.*"], "scale": scale, "clip": 9.0}
    action = build_action({"legs": {"term": "joint_position", "params": legs}}, facts, N, pose)
    np.testing.assert_allclose(action.reach, [1.2 / 0.5, 0.5 / 0.25, 9.0])  # knee: 10, clipped
    unlimited = facts.joint_ranges.copy()
    unlimited[facts.joint_names.index("left_hip_roll")] = -np.inf, np.inf
    facts_unlimited = dataclasses.replace(facts, joint_ranges=unlimited)
    action = build_action(
        {"legs": {"term": "joint_position", "params": legs}}, facts_unlimited, N, pose
    )
    np.testing.assert_allclose(action.reach, [1.2 / 0.5, 1.0, 9.0])
    motors = {"joints": ["left_.*"], "scale": 30.0, "clip": 0.5}
    action = build_action({"legs": {"term": "joint_effort", "params": motors}}, facts, N, pose)
    np.testing.assert_allclose(action.reach, [0.5, 0.5, 0.5])


def test_events_run_in_their_modes_on_whole_arrays_of_envs():
    """A startup event once for every env, a reset event for the envs that start an episode,
    an interval event for the envs whose timer ran out (not those ending the step)."""
    calls = []

    @event("startup", "reset", "interval", name="test_fused_env_record")
    def record(env, env_ids, label: str = "") -> None:
        calls.append((label, env.episode_step[env_ids].copy(), env_ids.copy()))

    backend = MujocoBackend(WALKER_XML, N, num_threads=2)
    model = mujoco.MjModel.from_xml_string(WALKER_XML)
    table = {
        mode: {"term": "test_fused_env_record", "mode": mode, "params": {"label": mode}}
        for mode in ("startup", "reset")
    }
    table["interval"] = {
        "term": "test_fused_env_record",
        "mode": "interval",
        "interval_s": [0.1, 0.1],  # every 5 control steps (0.02 s each)
        "params": {"label": "interval"},
    }
    parts = walker_parts(backend, model)
    parts["events"] = EventManager(table, backend, step_dt=0.02)
    standing = {**TERMS, "terminations": {"time_out": TERMS["terminations"]["time_out"]}}
    env = FusedEnv(
        backend, Entity(backend, ["torso"]), standing, **parts, decimation=4,
        episode_length_s=0.2,
    )  # fmt: skip
    assert [(label, list(ids)) for label, _, ids in calls] == [
        ("startup", list(range(N))),
        ("reset", list(range(N))),
    ]
    calls.clear()
    zeros = np.zeros((N, 6), np.float32)
    for _ in range(10):  # 10 steps: the episodes time out at the 10th
        env.step(zeros)
    labels = [(label, list(ids)) for label, _, ids in calls]
    assert labels == [("interval", list(range(N))), ("reset", list(range(N)))]
    assert (calls[0][1] == 5).all()  # fired after the 5th step

    env = WalkerStand()
    with pytest.raises(ValueError, match=r"actions: expected an array of shape \(8, 6\)"):
        env.step(np.zeros((N, 5), np.float32))
    with pytest.raises(ValueError, match="actions: expected a float or int array, got complex"):
        env.step(np.zeros((N, 6), np.complex64))
    bad = {**TERMS, "terminations": {"time_out": {"term": "time_out"}}}
    backend = MujocoBackend(WALKER_XML, N)
    with pytest.raises(
        ValueError, match="terminations.time_out: the time_out term is a truncation"
    ):
        FusedEnv(
            backend, Entity(backend, ["torso"]), bad, decimation=4, episode_length_s=1.0,
            **walker_parts(backend, mujoco.MjModel.from_xml_string(WALKER_XML)),
        )  # fmt: skip
