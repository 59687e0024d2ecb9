"""The gait clock: phases that advance, wrap and hold pi to stand; its terms against their NumPy
twins; its observation's left-right mirror."""

import math

import numpy as np
import pytest
from envs_term_twins import gait_foot_height  # also attaches the NumPy twins
from omegaconf import OmegaConf

import fuselab_envs
from fuselab_env_core.numpy_runtime import NumpyTerms
from fuselab_env_core.runtime import FusedTerms

TASK = "g1_walk_flat_gait"


def make(num_envs=16, *overrides):
    return fuselab_envs.make(TASK, ["env.randomize=false", *overrides], num_envs=num_envs)


def wrap(angle):
    return np.mod(angle + np.pi, 2 * np.pi) - np.pi


def test_the_phases_advance_half_a_cycle_apart_and_wrap():
    env = make()
    clock, velocity = env.commands["gait"], env.commands["velocity"]
    velocity.hold(np.tile([0.5, 0.0, 0.0], (env.num_envs, 1)).astype(np.float32))
    left = clock._left.copy()
    hz = clock._rate / (2 * math.pi * env.step_dt)
    assert (hz >= 0.8).all() and (hz <= 1.2).all() and hz.std() > 0  # 1 / period_s +- 0.2
    assert len(np.unique(np.round(left, 4))) == env.num_envs  # random starts
    running = np.ones(env.num_envs, np.bool_)  # rows whose episode goes on (a reset restarts)
    for step in range(1, 61):
        result = env.step(np.zeros((env.num_envs, env.action_dim), np.float32))
        running[result.info["reset_envs"]] = False
        expected = wrap(left + step * clock._rate)[running]
        np.testing.assert_allclose(clock.gait_phase[running, 0], expected, atol=1e-4)
        np.testing.assert_allclose(clock.gait_phase[running, 1], wrap(expected + np.pi), atol=1e-4)
    assert running.sum() > env.num_envs // 2
    assert (np.abs(clock.gait_phase) <= np.pi + 1e-6).all()
    env.close()


def test_standing_commands_hold_both_feet_down_and_walking_resumes_mid_cycle():
    env = make(4)
    clock, velocity = env.commands["gait"], env.commands["velocity"]
    commands = np.array([[0, 0, 0], [0.5, 0, 0], [0, 0, 0.4], [0.004, 0.0, 0.0]], np.float32)
    velocity.hold(commands)
    zeros = np.zeros((4, env.action_dim), np.float32)
    env.step(zeros)
    standing = [True, False, False, True]  # below 0.01 on every axis
    np.testing.assert_allclose(clock.gait_phase[standing], math.pi)
    assert not np.isclose(clock.gait_phase[1:3], math.pi).all()
    assert gait_foot_height(np.array(math.pi), 0.09) == pytest.approx(0.0)  # both feet down
    running = clock._left[0]
    velocity.hold(np.tile([0.5, 0.0, 0.0], (4, 1)).astype(np.float32))
    env.step(zeros)
    assert clock.gait_phase[0, 0] == pytest.approx(wrap(running + clock._rate[0]), abs=1e-5)
    env.close()


def test_a_clock_without_its_velocity_command_is_refused():
    with pytest.raises(ValueError, match=r"commands.gait.params.velocity_command: expected a "):
        make(2, "commands.gait.params.velocity_command=walk")
    with pytest.raises(ValueError, match=r"frequency_spread_hz: expected < 1 / period_s = 1 Hz"):
        make(2, "commands.gait.params.frequency_spread_hz=1.5")


def test_the_gait_terms_match_their_numpy_twins():
    cfg = fuselab_envs.compose(TASK)
    terms = {
        s: OmegaConf.to_container(cfg[s], resolve=True)
        for s in ("preamble", "rewards", "terminations", "observations")
    }
    keep = {"rewards": ["feet_gait"], "observations": None}
    terms = {
        "preamble": terms["preamble"],
        "rewards": {k: v for k, v in terms["rewards"].items() if k in keep["rewards"]},
        "observations": {
            "actor": {"terms": {"gait": terms["observations"]["actor"]["terms"]["gait"]}}
        },
    }
    rng = np.random.default_rng(0)
    n, bodies = 256, tuple(cfg.entity.bodies)
    quat = rng.normal(size=(n, 4, 4)).astype(np.float32)
    state = {
        "gait_phase": rng.uniform(-np.pi, np.pi, (n, 2)).astype(np.float32),
        "body_pos_w": rng.uniform(0.0, 0.15, (n, 4, 3)).astype(np.float32),
        "body_quat_w": quat / np.linalg.norm(quat, axis=-1, keepdims=True),
        "body_lin_vel_w": rng.normal(size=(n, 4, 3)).astype(np.float32),
        "body_ang_vel_w": rng.normal(size=(n, 4, 3)).astype(np.float32),
        "contact_force_w": rng.normal(0, 50, (n, 6, 3)).astype(np.float32),
    }
    state["gait_phase"][:8] = np.pi  # standing rows: both feet asked to be down
    names = {"body_names": bodies, "contact_body_names": tuple(cfg.entity.contact_bodies)}
    fused = FusedTerms.build(terms, state, dt=0.02, names=names)
    oracle = NumpyTerms(fused.plan, state)
    fused()
    oracle()
    np.testing.assert_allclose(fused.buffers.reward_terms, oracle.buffers.reward_terms, atol=1e-6)
    np.testing.assert_allclose(fused.buffers.obs["actor"], oracle.buffers.obs["actor"], atol=1e-6)
    assert fused.buffers.reward_terms.std() > 0.1 * 0.02  # the feet heights matter (weight x dt)


def test_the_clock_observation_mirrors_left_onto_right():
    env = make(2)
    columns = env.terms.plan.observations["actor"].slices()["gait"]
    perm, sign = env.observation_mirror("actor")
    first = columns.start
    assert list(perm[columns]) == [first + 2, first + 3, first, first + 1]
    assert (sign[columns] == 1).all()
    env.close()
