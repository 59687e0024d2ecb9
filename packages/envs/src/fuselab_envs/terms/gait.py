"""Gait terms: what the ``gait_clock`` command's phases (``gait_phase``, left and right foot, rad)
ask of the feet, and the clock as an observation."""

from __future__ import annotations

import math

import numba

from fuselab_env_core.ranges import NonNegativeFloat, PositiveFloat
from fuselab_env_core.terms import Bodies, observation, reward


@numba.njit(inline="always")
def _cubic_bezier(start, end, x):
    return start + (end - start) * (x * x * x + 3.0 * x * x * (1.0 - x))


@numba.njit(inline="always")
def gait_foot_height(phase, swing_height_m):
    """The height a foot is asked for at ``phase``: up to ``swing_height_m`` over the first half
    of the cycle, back to the floor over the second, on the floor at +-pi (MuJoCo Playground's
    cubic profile)."""
    x = (phase + math.pi) / (2.0 * math.pi)
    if x <= 0.5:
        return _cubic_bezier(0.0, swing_height_m, 2.0 * x)
    return _cubic_bezier(swing_height_m, 0.0, 2.0 * x - 1.0)


@reward()
def feet_gait_height_exp(
    i,
    gait_phase,
    body_pos_w,
    foot_bodies: Bodies,
    swing_height_m: NonNegativeFloat = 0.09,
    rest_height_m: NonNegativeFloat = 0.035,
    std_m: PositiveFloat = 0.09,
):
    """exp(-sum over the feet of (height - asked)^2 / std^2): the feet (left, right, the order
    of ``gait_phase``) follow the clock. A foot's height is its body origin's above
    ``rest_height_m`` (where it stands flat)."""
    error = 0.0
    for f in range(2):
        height = body_pos_w[i, foot_bodies[f], 2] - rest_height_m
        d = height - gait_foot_height(gait_phase[i, f], swing_height_m)
        error += d * d
    return math.exp(-error / (std_m * std_m))


@observation(size=4, mirror="left_right_halves")
def gait_phase_sin_cos(i, out, col, gait_phase):
    """sin and cos of the left foot's phase, then of the right's."""
    for f in range(2):
        out[i, col + 2 * f] = math.sin(gait_phase[i, f])
        out[i, col + 2 * f + 1] = math.cos(gait_phase[i, f])
