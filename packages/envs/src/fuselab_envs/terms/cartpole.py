"""Cart-pole terms: joint 0 is the cart's slider (m), joint 1 the pole's hinge (rad, 0 = up)."""

from __future__ import annotations

import math

from fuselab_env_core.ranges import PositiveFloat
from fuselab_env_core.terms import observation, reward, termination


@reward()
def pole_upright(i, joint_pos):
    """cos of the pole angle: 1 upright, 0 horizontal."""
    return math.cos(joint_pos[i, 1])


@reward()
def cart_position_l2(i, joint_pos):
    return joint_pos[i, 0] ** 2


@reward()
def joint_vel_l2(i, joint_vel):
    return joint_vel[i, 0] ** 2 + joint_vel[i, 1] ** 2


@termination()
def pole_fell(i, joint_pos, limit_rad: PositiveFloat = 0.8):
    return abs(joint_pos[i, 1]) > limit_rad


@termination()
def cart_out_of_bounds(i, joint_pos, limit_m: PositiveFloat = 2.4):
    return abs(joint_pos[i, 0]) > limit_m


@observation(size=4)
def cart_pole_state(i, out, col, joint_pos, joint_vel):
    """Cart position, pole angle, cart velocity, pole angular velocity."""
    out[i, col] = joint_pos[i, 0]
    out[i, col + 1] = joint_pos[i, 1]
    out[i, col + 2] = joint_vel[i, 0]
    out[i, col + 3] = joint_vel[i, 1]
