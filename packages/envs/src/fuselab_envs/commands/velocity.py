"""``uniform_velocity``: body-frame velocity commands (vx, vy in m/s, wz in rad/s) per env.

Commands are drawn uniformly in their ranges and drawn again every ``resample_s``; a
``standing_fraction`` of them is zero, a ``turning_fraction`` turns in place (vx = vy = 0), a
``straight_fraction`` walks without turning (wz = 0), a ``sideways_fraction`` steps sideways
(vx = wz = 0: the lateral skill, which mixed commands barely ask for); a ``heading_fraction`` of
the others steer to a heading drawn in [-pi, pi) instead of holding a yaw rate (mjlab's heading
commands): wz = ``heading_stiffness`` x heading error, clipped to ``ang_vel_z``, every step.
Terms read the command as the state buffer ``command`` (N, 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fuselab_env_core.commands import Command, CommandContext, command
from fuselab_env_core.ranges import Fraction, Interval, PositiveFloat
from fuselab_env_core.rotations import np_wrap_angle, np_yaw

AXES = ("lin_vel_x", "lin_vel_y", "ang_vel_z")  # the command's columns, by their range's name
# The command kinds, their shares stacked on [0, 1) in this order, and the axes (columns) each
# holds at zero; a draw above the last share walks and turns (every axis drawn).
KIND_ZERO_AXES = {
    "standing": (0, 1, 2),
    "turning": (0, 1),  # turn in place
    "straight": (2,),  # walk without turning
    "sideways": (0, 2),  # step sideways
}


@command("uniform_velocity")
class UniformVelocityCommand(Command):
    def __init__(
        self,
        context: CommandContext,
        resample_s: PositiveFloat = 4.0,
        standing_fraction: Fraction = 0.1,
        turning_fraction: Fraction = 0.0,
        straight_fraction: Fraction = 0.0,
        sideways_fraction: Fraction = 0.0,
        heading_fraction: Fraction = 0.0,
        heading_stiffness: PositiveFloat = 0.5,  # rad/s of wz per rad of heading error
        lin_vel_x: Interval = (-1.0, 1.0),  # m/s
        lin_vel_y: Interval = (-0.5, 0.5),  # m/s
        ang_vel_z: Interval = (-1.0, 1.0),  # rad/s
    ):
        shares = (standing_fraction, turning_fraction, straight_fraction, sideways_fraction)
        self.shares = dict(zip(KIND_ZERO_AXES, shares, strict=True))  # kind: its share
        if sum(shares) > 1.0:
            names = " + ".join(f"{context.where}.{kind}_fraction" for kind in KIND_ZERO_AXES)
            raise ValueError(f"{names}: expected <= 1, got {' + '.join(map(str, shares))}")
        n = context.num_envs
        self.resample_s, self.heading_stiffness = resample_s, heading_stiffness
        self.heading_fraction = heading_fraction
        self.limits = (lin_vel_x, lin_vel_y, ang_vel_z)  # the configured ranges
        self.ranges = list(self.limits)  # what is drawn from (a curriculum narrows them)
        self.command = np.zeros((n, 3), np.float32)
        self.state = {"command": self.command}
        self.steering = np.zeros(n, np.bool_)  # the commands that steer to a heading
        self.heading_target = np.zeros(n, np.float32)  # their headings (rad, world frame)
        self._resample_steps = max(1, round(resample_s / context.step_dt))
        self._steps_to_resample = np.zeros(n, np.int32)

    def reset(self, env, env_ids, qpos, qvel):
        self.resample(env.rng, env_ids)
        steering = self.steering[env_ids]
        if steering.any():
            rows = env_ids[steering]
            error = np_wrap_angle(self.heading_target[rows] - np_yaw(qpos[steering, 3:7]))
            self.command[rows, 2] = self._steer(error)

    def advance(self, env):
        self._steps_to_resample -= 1
        due = np.flatnonzero(self._steps_to_resample <= 0)
        if due.size:
            self.resample(env.rng, due)
        if self.heading_fraction > 0.0:
            error = np_wrap_angle(self.heading_target - np_yaw(env.robot.qpos[:, 3:7]))
            np.copyto(self.command[:, 2], self._steer(error), where=self.steering)

    def resample(self, rng: np.random.Generator, env_ids: np.ndarray) -> None:
        k = len(env_ids)
        for axis, (low, high) in enumerate(self.ranges):
            self.command[env_ids, axis] = rng.uniform(low, high, k)
        draw = rng.random(k)  # which kind: where it falls among the stacked shares
        start = 0.0
        for kind, axes in KIND_ZERO_AXES.items():
            end = start + self.shares[kind]
            self.command[np.ix_(env_ids[(draw >= start) & (draw < end)], axes)] = 0.0
            start = end
        if self.heading_fraction > 0.0:  # (drawn only then: without it the stream is unchanged)
            walking = draw >= start
            self.steering[env_ids] = walking & (rng.random(k) < self.heading_fraction)
            self.heading_target[env_ids] = rng.uniform(-np.pi, np.pi, k)
        self._steps_to_resample[env_ids] = self._resample_steps

    def hold(self, commands: np.ndarray) -> None:
        """Hold ``commands`` (N, 3) from now on: no resampling, no heading steering (what an
        evaluation or a joystick does)."""
        self.command[:] = commands
        self._steps_to_resample[:] = np.iinfo(np.int32).max
        self.steering[:] = False

    def scale_ranges(self, axes: Sequence[str], fraction: float) -> None:
        """Draw ``axes`` (names of :data:`AXES`) from ``fraction`` of their configured ranges,
        from the next draw on."""
        for name in axes:
            axis = AXES.index(name)
            low, high = self.limits[axis]
            self.ranges[axis] = (fraction * low, fraction * high)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "velocity",
            "layout": ["lin_vel_x_mps", "lin_vel_y_mps", "ang_vel_z_radps"],
            "frame": "base (heading of the pelvis)",
            "ranges": {name: list(limits) for name, limits in zip(AXES, self.limits, strict=True)},
        }

    def _steer(self, heading_error: np.ndarray) -> np.ndarray:
        """The yaw-rate command that turns toward the heading: proportional, within ang_vel_z."""
        return np.clip(self.heading_stiffness * heading_error, *self.ranges[2])
