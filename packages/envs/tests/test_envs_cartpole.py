"""Cartpole: the terms against NumPy twins, and the env's episodes on MuJoCo."""

import numpy as np

import fuselab_envs
from fuselab_env_core.numpy_runtime import NumpyTerms
from fuselab_env_core.runtime import FusedTerms
from fuselab_envs.registry import _terms
from fuselab_envs.terms import cartpole

cartpole.pole_upright.numpy(lambda q: np.cos(q[:, 1]))
cartpole.cart_position_l2.numpy(lambda q: q[:, 0] ** 2)
cartpole.joint_vel_l2.numpy(lambda v: v[:, 0] ** 2 + v[:, 1] ** 2)
cartpole.pole_fell.numpy(lambda q, limit: np.abs(q[:, 1]) > limit)
cartpole.cart_out_of_bounds.numpy(lambda q, limit: np.abs(q[:, 0]) > limit)
cartpole.cart_pole_state.numpy(lambda q, v: np.concatenate([q, v], axis=1))


def test_terms_match_their_numpy_twins():
    from fuselab_env_core.env import time_out

    time_out.numpy(lambda step, max_steps: step >= max_steps)
    rng = np.random.default_rng(0)
    n = 128
    state = {
        "joint_pos": rng.normal(0, 1.5, (n, 2)).astype(np.float32),
        "joint_vel": rng.normal(0, 2, (n, 2)).astype(np.float32),
        "episode_step": rng.integers(0, 600, n).astype(np.int32),
        "max_episode_steps": np.full(n, 500, np.int32),
    }
    fused = FusedTerms.build(_terms(fuselab_envs.compose("cartpole")), state, dt=0.02)
    oracle = NumpyTerms(fused.plan, state)
    fused.seed_noise(0)
    fused.next_step()
    oracle.buffers.noise_key[:] = fused.buffers.noise_key
    fused()
    oracle()
    np.testing.assert_allclose(fused.buffers.reward, oracle.buffers.reward, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(fused.buffers.terminated, oracle.buffers.terminated)
    np.testing.assert_array_equal(fused.buffers.truncated, oracle.buffers.truncated)
    for group in ("actor", "critic"):
        np.testing.assert_allclose(fused.buffers.obs[group], oracle.buffers.obs[group], rtol=1e-6)


def test_the_pole_falls_without_control_and_the_episode_restarts():
    env = fuselab_envs.make("cartpole", num_envs=8, num_threads=1)
    assert env.terms.buffers.obs["actor"].shape == (8, 4)
    noise = fuselab_envs.compose("cartpole").events.reset.params  # the reset event's offsets
    assert np.abs(env.robot.joint_pos).max() <= max(np.abs(noise.position_rad)) + 1e-6
    assert np.abs(env.robot.joint_vel).max() <= max(np.abs(noise.velocity_radps)) + 1e-6
    assert np.abs(env.robot.joint_pos).min() > 0.0  # drawn, not the initial state
    fell = np.zeros(8, bool)
    for _ in range(200):
        result = env.step(np.zeros((8, 1), np.float32))
        fell |= result.terminated
        assert np.isfinite(result.obs["actor"]).all()
    assert fell.all()  # an uncontrolled pole tips past 0.8 rad within 4 s
    assert np.abs(env.robot.joint_pos[:, 1]).max() < 0.8  # every fallen env was reset


def test_a_pd_controller_keeps_the_pole_up_for_a_whole_episode():
    env = fuselab_envs.make("cartpole", num_envs=4, num_threads=1, **{"env.episode_length_s": 2.0})
    returns = []
    for _ in range(env.max_episode_steps[0]):
        x, theta, v, omega = (
            env.robot.joint_pos[:, 0],
            env.robot.joint_pos[:, 1],
            *env.robot.joint_vel.T,
        )
        push = 2.0 * theta + 0.5 * omega + 0.05 * x + 0.1 * v
        result = env.step(np.clip(push, -1, 1)[:, None].astype(np.float32))
        assert not result.terminated.any()
        if "episode_return" in result.info:
            returns.append(result.info["episode_return"])
    assert result.truncated.all()
    assert returns[-1] > 0.9 * 2.0  # upright ~1 per second, for 2 s
