"""Small terms for env_core's tests: cheap to compile, each with a NumPy twin."""

import math

import numpy as np

from fuselab_env_core.ranges import PositiveFloat
from fuselab_env_core.terms import (
    Bodies,
    Body,
    observation,
    preamble,
    reward,
    termination,
)


@preamble(outputs={"speed_sq": ()})
def planar_speed_sq(i, vel, speed_sq):
    speed_sq[i] = vel[i, 0] * vel[i, 0] + vel[i, 1] * vel[i, 1]


@planar_speed_sq.numpy
def _(vel, speed_sq):
    speed_sq[:] = vel[:, 0] ** 2 + vel[:, 1] ** 2


@reward()
def speed_exp(i, speed_sq, std: PositiveFloat = 0.5):
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


# -- named bodies, task arrays, a persistent preamble term --------------------------------------


DEFAULT_BODY = Body("b")


@reward()
def body_height_above(i, body_z, floor_m, body: Body = DEFAULT_BODY):
    """A body's height over a per-task floor (a task array indexed by body row)."""
    return body_z[i, body] - floor_m[body]


body_height_above.numpy(lambda body_z, floor_m, body: body_z[:, body] - floor_m[body])


@observation(size=lambda shapes, params: len(params["bodies"]))
def body_heights(i, out, col, body_z, bodies: Bodies):
    for k in range(len(bodies)):
        out[i, col + k] = body_z[i, bodies[k]]


body_heights.numpy(lambda body_z, bodies: body_z[:, list(bodies)])


@preamble(outputs={"elapsed_s": ()}, reset={"elapsed_s": 0.0})
def episode_clock(i, dt, elapsed_s):
    """Seconds since the episode started: persistent, it advances once per scored step."""
    elapsed_s[i] += dt


@episode_clock.numpy
def _(dt, elapsed_s):
    elapsed_s += dt


@observation(size=1)
def elapsed(i, out, col, elapsed_s):
    out[i, col] = elapsed_s[i]


elapsed.numpy(lambda elapsed_s: elapsed_s[:, None])


BODY_NAMES = ("a", "b", "c")


def named_cfg(body="b", bodies=("c", "a")):
    return {
        "preamble": {"clock": {"term": "episode_clock"}, "speed": {"term": "planar_speed_sq"}},
        "rewards": {"height": {"term": "body_height_above", "params": {"body": body}}},
        "observations": {
            "policy": {
                "terms": {
                    "heights": {"term": "body_heights", "params": {"bodies": list(bodies)}},
                    "elapsed": {"term": "elapsed"},
                }
            }
        },
    }


def named_state(num_envs, seed=0):
    rng = np.random.default_rng(seed)
    return {
        **random_state(num_envs, seed),
        "body_z": rng.normal(0, 1, (num_envs, 3)).astype(np.float32),
    }


NAMED_ARRAYS = {"floor_m": np.array([0.1, 0.2, 0.3], np.float32)}


@observation(size=1)
def speed_sq_observation(i, out, col, speed_sq):
    out[i, col] = speed_sq[i]


speed_sq_observation.numpy(lambda speed_sq: speed_sq[:, None])
