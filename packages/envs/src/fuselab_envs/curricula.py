"""The curricula tasks name in their ``curriculum:`` table (registered on import)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fuselab_env_core.curriculum import Curriculum, CurriculumContext, curriculum
from fuselab_env_core.ranges import Fraction, PositiveFloat
from fuselab_envs.commands.velocity import AXES, UniformVelocityCommand

if TYPE_CHECKING:
    from fuselab_env_core.env import FusedEnv

log = logging.getLogger(__name__)


@curriculum("velocity_command_levels")
class VelocityCommandLevels(Curriculum):
    """A velocity command's ``axes`` are drawn from ``start`` of their configured ranges; each
    time the envs earn ``threshold`` of ``reward``'s most (weight x dt a step: a reward whose
    value is at most 1, as the exp kernels' is) averaged over ``window_s``, the ranges widen by
    ``step`` of the configured ones, up to all of them (unitree_rl_lab's ``lin_vel_cmd_levels``).
    The policy's progress sets the pace, not a step count: a slower seed widens later."""

    def __init__(
        self,
        context: CurriculumContext,
        command: str = "velocity",
        reward: str = "track_lin_vel",
        axes: tuple[str, ...] = ("lin_vel_x", "lin_vel_y"),
        start: Fraction = 0.25,
        step: Fraction = 0.25,
        threshold: Fraction = 0.7,
        window_s: PositiveFloat = 5.0,
    ):
        where = context.where
        generator = context.commands.get(command)
        if not isinstance(generator, UniformVelocityCommand):
            velocity = [
                n for n, c in context.commands.items() if isinstance(c, UniformVelocityCommand)
            ]
            raise ValueError(
                f"{where}.command: expected a uniform_velocity command of the task "
                f"({velocity or 'it has none'}), got {command!r}"
            )
        unknown = [a for a in axes if a not in AXES]
        if not axes or unknown:
            raise ValueError(f"{where}.axes: expected names among {list(AXES)}, got {list(axes)}")
        if step <= 0.0:
            raise ValueError(f"{where}.step: expected a fraction > 0, got {step}")
        self.where, self.generator, self.reward, self.axes = where, generator, reward, axes
        self.step, self.threshold = step, threshold
        self._window_steps = max(1, round(window_s / context.step_dt))
        self._earned, self._steps = 0.0, 0
        self.set_level(start)

    def bind(self, env: FusedEnv) -> None:
        rewards = [call.entry for call in env.terms.plan.rewards]
        if self.reward not in rewards:
            raise ValueError(f"{self.where}.reward: expected one of {rewards}, got {self.reward!r}")
        self._column = rewards.index(self.reward)
        self._weight = f"rewards.{self.reward}.weight"  # a runtime scalar: read when used
        weight = env.terms.scalar(self._weight)
        if weight <= 0.0:
            raise ValueError(
                f"{self.where}.reward: {self.reward!r} has weight {weight:g}; a level is earned "
                "by a share of a positive reward's most"
            )

    def advance(self, env: FusedEnv) -> None:
        if self.level >= 1.0:
            return
        self._earned += env.reward_means[self._column]
        self._steps += 1
        if self._steps < self._window_steps:
            return
        share = self._earned / self._steps / (env.terms.scalar(self._weight) * env.step_dt)
        self._earned, self._steps = 0.0, 0
        if share >= self.threshold:
            self.set_level(self.level + self.step)
            log.info(
                "%s: %s earned %.2f of its most; %s at %.2f of their ranges",
                self.where.removesuffix(".params"),
                self.reward,
                share,
                ", ".join(self.axes),
                self.level,
            )

    def set_level(self, level: float) -> None:
        self.level = min(float(level), 1.0)
        self.generator.scale_ranges(self.axes, self.level)
