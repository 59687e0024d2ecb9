"""``gait_clock``: a stepping rhythm the feet follow (MuJoCo Playground's and holosoma's clock).

Each env has a phase per foot, left and right half a cycle apart, in radians in [-pi, pi); it
advances by 2 pi f dt a step, f drawn per episode around ``1 / period_s`` (``frequency_spread_hz``
each way), from a random start. Terms read it as the state buffer ``gait_phase`` (N, 2): the
``gait_phase`` observation gives its sine and cosine, the ``feet_gait_height_exp`` reward the
foot heights it asks for (lifted through the cycle, on the floor at +-pi). While the velocity
command named ``velocity_command`` asks to stand, both phases read pi (both feet down); the
clock keeps running underneath, so walking resumes mid-cycle.

A robot-side program runs the same clock: the deploy document gives the period and the rule.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fuselab_env_core.commands import Command, CommandContext, command
from fuselab_env_core.ranges import NonNegativeFloat, PositiveFloat


@command("gait_clock")
class GaitClock(Command):
    def __init__(
        self,
        context: CommandContext,
        period_s: PositiveFloat = 1.0,
        frequency_spread_hz: NonNegativeFloat = 0.2,
        velocity_command: str = "velocity",
        standing_speed: NonNegativeFloat = 0.01,  # m/s and rad/s: below both, stand
    ):
        if frequency_spread_hz >= 1.0 / period_s:
            raise ValueError(
                f"{context.where}.frequency_spread_hz: expected < 1 / period_s = "
                f"{1.0 / period_s:g} Hz, got {frequency_spread_hz}"
            )
        n = context.num_envs
        self.where, self.step_dt = context.where, context.step_dt
        self.period_s, self.frequency_spread_hz = period_s, frequency_spread_hz
        self.velocity_command, self.standing_speed = velocity_command, standing_speed
        self.gait_phase = np.zeros((n, 2), np.float32)
        self.state = {"gait_phase": self.gait_phase}
        self._left = np.zeros(n)  # the left foot's phase (rad), running even while standing
        self._rate = np.zeros(n)  # rad per step
        self._velocity: np.ndarray | None = None  # the velocity command's (N, 3), once bound

    def bind(self, env):
        self._velocity = self._command(env)

    def reset(self, env, env_ids, qpos, qvel):
        rng, k = env.rng, len(env_ids)
        self._left[env_ids] = rng.uniform(-math.pi, math.pi, k)
        frequency = 1.0 / self.period_s
        spread = self.frequency_spread_hz
        hz = rng.uniform(frequency - spread, frequency + spread, k) if spread else frequency
        self._rate[env_ids] = 2.0 * math.pi * self.step_dt * hz
        self._publish(env_ids)

    def advance(self, env):
        self._left += self._rate
        self._left[:] = np.mod(self._left + math.pi, 2.0 * math.pi) - math.pi
        self._publish(env.all_envs)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "gait_clock",
            "layout": ["left_phase_rad", "right_phase_rad"],
            "period_s": self.period_s,
            "rule": "left advances 2 pi control_dt / period_s a step, wrapped to [-pi, pi); "
            "right = left + pi (wrapped); both read pi while the velocity command is below "
            f"{self.standing_speed} (m/s, rad/s)",
            "velocity_command": self.velocity_command,
            "standing_speed": self.standing_speed,
        }

    def _publish(self, rows: np.ndarray) -> None:
        """``gait_phase`` of ``rows``: the running clock, or pi for envs told to stand."""
        left = self._left[rows]
        self.gait_phase[rows, 0] = left
        self.gait_phase[rows, 1] = np.mod(left + 2.0 * math.pi, 2.0 * math.pi) - math.pi
        assert self._velocity is not None, "the env binds its commands first"
        command = self._velocity[rows]
        standing = (np.abs(command[:, :2]).max(axis=1) < self.standing_speed) & (
            np.abs(command[:, 2]) < self.standing_speed
        )
        self.gait_phase[rows[standing]] = math.pi

    def _command(self, env) -> np.ndarray:
        generator = env.commands.get(self.velocity_command)
        if generator is None or "command" not in generator.state:
            raise ValueError(
                f"{self.where}.velocity_command: expected a velocity command of the task, listed "
                f"before this clock; got {self.velocity_command!r} of {list(env.commands)}"
            )
        return generator.state["command"]
