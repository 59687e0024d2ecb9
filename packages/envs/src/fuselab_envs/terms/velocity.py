"""Terms of velocity-command tasks: the command (vx, vy in m/s, wz in rad/s, base frame)."""

from __future__ import annotations

import math

import numba

from fuselab_env_core.ranges import PositiveFloat
from fuselab_env_core.terms import observation, reward


@numba.njit(inline="always")
def command_speed(command, i, yaw_rate_weight):
    """The speed env i's command asks for: |v_xy| + ``yaw_rate_weight`` x |wz| (mjlab's gait
    terms use weight 1: a turn in place moves too)."""
    planar = math.sqrt(command[i, 0] ** 2 + command[i, 1] ** 2)
    return planar + yaw_rate_weight * abs(command[i, 2])


@reward()
def track_lin_vel_xy_exp(i, command, base_lin_vel_b, std: PositiveFloat = 0.5):
    ex = command[i, 0] - base_lin_vel_b[i, 0]
    ey = command[i, 1] - base_lin_vel_b[i, 1]
    return math.exp(-(ex * ex + ey * ey) / (std * std))


@reward()
def track_ang_vel_z_exp(i, command, base_ang_vel_b, std: PositiveFloat = 0.5):
    ez = command[i, 2] - base_ang_vel_b[i, 2]
    return math.exp(-(ez * ez) / (std * std))


@observation(size=3, mirror="velocity_command")
def velocity_command(i, out, col, command):
    for k in range(3):
        out[i, col + k] = command[i, k]
