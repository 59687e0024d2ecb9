"""Small terms for env_core's tests: cheap to compile, each with a NumPy twin."""

import math

import numpy as np

from fuselab_env_core.terms import observation, preamble, reward, termination


@preamble(outputs={"speed_sq": ()})
def planar_speed_sq(i, vel, speed_sq):
    speed_sq[i] = vel[i, 0] * vel[i, 0] + vel[i, 1] * vel[i, 1]


@planar_speed_sq.numpy
def _(vel, speed_sq):
    speed_sq[:] = vel[:, 0] ** 2 + vel[:, 1] ** 2


@reward()
def speed_exp(i, speed_sq, std: float = 0.5):
    return math.exp(-speed_sq[i] / (std * std))


speed_exp.numpy(lambda speed_sq, std: np.exp(-speed_sq / (std * std)))


@reward()
def not_a_number(i, vel):
    return math.nan


not_a_number.numpy(lambda vel: np.full(len(vel), np.nan, np.float32))


@termination()
def too_fast(i, speed_sq, limit: float = 1.0):
    return speed_sq[i] > limit * limit


too_fast.numpy(lambda speed_sq, limit: speed_sq > limit * limit)


@termination()
def episode_over(i, step, max_steps: int = 10):
    return step[i] >= max_steps


episode_over.numpy(lambda step, max_steps: step >= max_steps)


@observation(size=3)
def scaled_velocity(i, out, col, vel, scale: float = 1.0):
    for k in range(3):
        out[i, col + k] = vel[i, k] * scale


scaled_velocity.numpy(lambda vel, scale: vel * scale)


@observation(size=lambda shapes, params: shapes["vel"][0] - 1)
def wrong_width_twin(i, out, col, vel):
    out[i, col] = vel[i, 0]
    out[i, col + 1] = vel[i, 1]


wrong_width_twin.numpy(lambda vel: vel)  # returns 3 columns for a 2-column term


def terms_cfg(std=0.5, weight=2.0, limit=1.0, scale=1.0, nan_weight=0.0):
    return {
        "preamble": {"speed": {"term": "planar_speed_sq"}},
        "rewards": {
            "speed": {"term": "speed_exp", "weight": weight, "params": {"std": std}},
            "nan": {"term": "not_a_number", "weight": nan_weight},
        },
        "terminations": {
            "too_fast": {"params": {"limit": limit}},
            "time_out": {"term": "episode_over", "time_out": True, "params": {"max_steps": 10}},
        },
        "observations": {
            "actor": {
                "noise": True,
                "terms": {
                    "vel": {"term": "scaled_velocity", "noise_std": 0.1, "params": {"scale": scale}}
                },
            },
            "critic": {"terms": {"vel": {"term": "scaled_velocity", "params": {"scale": scale}}}},
        },
    }


def random_state(num_envs, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "vel": rng.normal(0, 1, (num_envs, 3)).astype(np.float32),
        "step": rng.integers(0, 20, num_envs).astype(np.int32),
    }
