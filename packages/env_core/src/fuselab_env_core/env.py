"""FusedEnv: the batched env lifecycle on a SimBackend, an Entity and fused terms.

One :meth:`FusedEnv.step`, in DESIGN.md's order (mjlab's: rewards and terminations, resets,
commands and events, observations)::

    apply actions -> physics substeps (decimation) -> fused copy of the bound body states
    -> score (fused: preamble, rewards, terminations) -> failure statistics
    -> advance (hook: commands, motion frame, clip end, events)
    -> observe the done rows (their terminal observations) -> reset the done rows
    -> copy of the rows advance or a reset wrote -> observe every row

so a row's observation never depends on what other rows do in the step: it always shows the
state after advance (the next command, the next reference frame), whether or not another row
reset. Two full kernel passes a step (score, observe) plus the done rows' terminal pass.

A task subclasses it for what is task-specific: the reset state (:meth:`reset_state`), and
optionally commands or a motion reference (:meth:`advance`, :meth:`on_reset`); it sets what
those hooks need before calling ``FusedEnv.__init__``, which resets every env. Its named task
arrays (default pose, joint limits, a clip's frames) go to ``arrays``: terms read them by name.
Everything per env runs in the backend and the fused kernels; the Python here touches whole
arrays only.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np

from fuselab_env_core.backend import SimBackend
from fuselab_env_core.config import TaskTermsCfg
from fuselab_env_core.entity import Entity
from fuselab_env_core.ranges import PositiveFloat, PositiveInt, Section, check_value
from fuselab_env_core.runtime import FusedTerms
from fuselab_env_core.terms import termination

log = logging.getLogger(__name__)


@termination(name="time_out")
def time_out(i, episode_step, max_episode_steps):
    """The episode reached its length: a truncation (configure it with ``time_out: true``)."""
    return episode_step[i] >= max_episode_steps[i]


time_out.numpy(lambda episode_step, max_episode_steps: episode_step >= max_episode_steps)


@dataclass
class EnvCfg(Section):
    """The ``env`` section of a task config: FusedEnv's own settings (a task may add some)."""

    KEY = "env"

    decimation: PositiveInt = 4  # physics steps per control step
    episode_length_s: PositiveFloat = 20.0


@dataclass
class StepResult:
    """What one step returns. Arrays are the env's own buffers: copy what you keep."""

    obs: dict[str, np.ndarray]
    reward: np.ndarray  # (N,) float32
    terminated: np.ndarray  # (N,) bool: failures (and rows with non-finite actions or state)
    truncated: np.ndarray  # (N,) bool: time-outs, bootstrap from the terminal observation
    info: dict[str, Any] = field(default_factory=dict)


class FusedEnv:
    """A batch of ``backend.num_envs`` episodes of one task."""

    def __init__(
        self,
        backend: SimBackend,
        robot: Entity,
        terms: TaskTermsCfg | Mapping[str, Any],
        *,
        decimation: int,
        episode_length_s: float,
        default_controls: np.ndarray,
        action_scale: np.ndarray,
        extra_state: Mapping[str, np.ndarray] | None = None,
        arrays: Mapping[str, np.ndarray] | None = None,
        num_threads: int | None = None,
        seed: int = 0,
    ):
        started = time.perf_counter()
        n, nu = backend.num_envs, backend.model.nu
        decimation = check_value("env.decimation", decimation, PositiveInt)
        episode_length_s = check_value("env.episode_length_s", episode_length_s, PositiveFloat)
        self.backend, self.robot = backend, robot
        self.num_envs, self.decimation = n, decimation
        self.step_dt = backend.model.physics_dt * decimation
        self.default_controls = _vector("default_controls", default_controls, nu)
        self.action_scale = _vector("action_scale", action_scale, nu)
        self.rng = np.random.default_rng(seed)

        self.actions = np.zeros((n, nu), np.float32)
        self.last_actions = np.zeros((n, nu), np.float32)
        self.episode_step = np.zeros(n, np.int32)
        self.max_episode_steps = np.full(n, math.ceil(episode_length_s / self.step_dt), np.int32)
        self._controls = np.zeros((n, nu), np.float32)
        self._finite = np.ones(n, np.bool_)  # rows whose actions were finite
        self._reward_finite = np.ones(n, np.bool_)  # rows whose reward did not overflow
        self._done = np.zeros(n, np.bool_)
        self._stale_rows = np.zeros(n, np.bool_)  # physics state written since the last copy
        robot.update()
        state = {
            **robot.state(),
            "actions": self.actions,
            "last_actions": self.last_actions,
            "episode_step": self.episode_step,
            "max_episode_steps": self.max_episode_steps,
            **(extra_state or {}),
        }
        # What body parameters of terms resolve against: the rows of the entity's buffers.
        self.name_tables = {
            "body_names": robot.body_names,
            "contact_body_names": robot.contact_body_names,
        }
        self.terms = FusedTerms.build(
            terms,
            state,
            dt=self.step_dt,
            num_threads=num_threads,
            arrays=arrays,
            names=self.name_tables,
        )
        for call in self.terms.plan.terminations:
            if call.term is time_out and not call.time_out:
                raise ValueError(
                    f"terminations.{call.entry}: the time_out term is a truncation; "
                    "set time_out: true"
                )

        buffers = self.terms.buffers
        self.reward = np.zeros(n, np.float32)
        self.terminated = np.zeros(n, np.bool_)
        self.truncated = np.zeros(n, np.bool_)
        self.terminal_obs = {g: np.zeros_like(o) for g, o in buffers.obs.items()}
        self.episode_return = np.zeros(n, np.float32)
        self._reward_means = np.zeros(len(self.terms.plan.rewards), np.float64)
        self._termination_rates = np.zeros(len(self.terms.plan.terminations), np.float64)
        self._no_rows = np.zeros(0, np.intp)
        self.terms.seed_noise(seed)
        self.reset_all()
        log.info(
            "env ready: %d envs, step %.3f s (decimation %d), %d steps per episode (%.1f ms)",
            n,
            self.step_dt,
            decimation,
            self.max_episode_steps[0],
            (time.perf_counter() - started) * 1e3,
        )

    # -- task hooks ------------------------------------------------------------------------------

    def reset_state(self, env_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(qpos, qvel) float32 for the envs being reset. Tasks override it."""
        raise NotImplementedError

    def advance(self) -> None:
        """After scoring, before resets: advance commands or a motion reference, fire events
        (called every step; ``terminated`` and ``truncated`` hold this step's outcome, and a
        task may truncate rows here)."""

    def on_reset(self, env_ids: np.ndarray) -> None:
        """After ``env_ids`` were reset in the backend, before their observations are built."""

    def write_state(self, env_ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Set the physics state of ``env_ids`` (a push, a teleport onto a reference); the bound
        body states of those rows are copied again before the step's observations. Tasks write
        physics state only through here: a row written past it would keep its old copy."""
        self.backend.reset_envs(env_ids, qpos, qvel)
        self._stale_rows[env_ids] = True

    # -- lifecycle -------------------------------------------------------------------------------

    def reset_all(self) -> dict[str, np.ndarray]:
        self._reset(self.terms.all_rows)
        self._copy_bodies_if_stale()
        self.terms.next_noise_draw()
        self.terms.observe()
        return self.terms.buffers.obs

    def step(self, actions: np.ndarray) -> StepResult:
        self._apply(actions)
        self.backend.step(self.decimation)
        self.robot.update()
        self._stale_rows.fill(False)  # every row is fresh
        self.episode_step += 1
        self.terms.next_noise_draw()  # one draw for the step's observations, terminal ones too
        self.terms.score()
        self._outcome()
        info = self._statistics()
        self.advance()
        np.logical_or(self.terminated, self.truncated, out=self._done)
        done = np.flatnonzero(self._done)
        if done.size:
            self._keep_terminal_observations(done)
            info["episode_return"] = float(self.episode_return[done].mean())
            info["episode_length"] = float(self.episode_step[done].mean())
            self._reset(done)
        self._copy_bodies_if_stale()
        self.terms.observe()
        broken = self._rows_where_not(self.terms.buffers.obs_finite)  # the kernel's flags
        info["non_finite_observations"] = broken
        if broken.size:
            done = self._end_broken_rows(broken, done)
        info["reset_envs"] = done
        info["terminal_obs"] = self.terminal_obs
        b = self.terms.buffers
        return StepResult(b.obs, self.reward, self.terminated, self.truncated, info)

    # -- internals -------------------------------------------------------------------------------

    def _apply(self, actions: np.ndarray) -> None:
        if not isinstance(actions, np.ndarray) or actions.shape != self.actions.shape:
            raise ValueError(
                f"actions: expected an array of shape {self.actions.shape}, got "
                f"{getattr(actions, 'shape', type(actions).__name__)}"
            )
        if not np.can_cast(actions.dtype, np.float32, "same_kind"):
            raise ValueError(f"actions: expected a float or int array, got {actions.dtype}")
        _take_actions(
            actions,
            self.actions,
            self.last_actions,
            self.action_scale,
            self.default_controls,
            self._controls,
            self._finite,
        )
        self.backend.set_controls(self._controls)

    def _outcome(self) -> None:
        """The step's reward, failures and time-outs from the scored kernel outputs; rows with
        non-finite actions fail; a diverged row, or one whose reward overflowed (extreme but
        finite state), fails and earns nothing."""
        b = self.terms.buffers
        np.copyto(self.reward, b.reward)
        np.logical_not(self._finite, out=self.terminated)
        self.terminated |= b.terminated
        np.isfinite(self.reward, out=self._reward_finite)
        for finite in (self.robot.state_finite, self._reward_finite):
            if not finite.all():
                self.terminated |= ~finite
                self.reward[~finite] = 0.0
        np.copyto(self.truncated, b.truncated)
        self.episode_return += self.reward

    def _keep_terminal_observations(self, done: np.ndarray) -> None:
        """What the done rows observe at the end of their episode (after advance, as every row
        does), kept before the reset replaces them."""
        self.terms.observe(done)
        for group, obs in self.terms.buffers.obs.items():
            self.terminal_obs[group][done] = obs[done]

    def _end_broken_rows(self, broken: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Rows whose observations went non-finite on a finite state (a term overflowed):
        like a diverged row, the step fails and earns nothing; the terminal observation is
        zeroed where it was not finite, the row starts over and observes again. Returns the
        rows reset this step."""
        self.reward[broken] = 0.0
        self.terminated[broken] = True
        self.truncated[broken] = False
        for group, obs in self.terms.buffers.obs.items():
            self.terminal_obs[group][broken] = np.nan_to_num(obs[broken], posinf=0, neginf=0)
        self._reset(broken)
        self._copy_bodies_if_stale()
        self.terms.observe(broken)
        return np.union1d(done, broken)

    def _copy_bodies_if_stale(self) -> None:
        """Copy again the rows whose physics state was written since the step's copy (resets,
        pushes): the others hold what the backend holds."""
        if self._stale_rows.all():  # reset_all
            self.robot.update()
        elif self._stale_rows.any():
            self.robot.update(np.flatnonzero(self._stale_rows))
        self._stale_rows.fill(False)

    def _reset(self, env_ids: np.ndarray) -> None:
        qpos, qvel = self.reset_state(env_ids)
        self.write_state(env_ids, qpos, qvel)
        self.actions[env_ids] = 0.0
        self.last_actions[env_ids] = 0.0
        self.episode_step[env_ids] = 0
        self.episode_return[env_ids] = 0.0
        self.terms.reset_rows(env_ids)
        self.on_reset(env_ids)

    def _statistics(self) -> dict[str, Any]:
        b, plan = self.terms.buffers, self.terms.plan
        _column_means(b.reward_terms, self._reward_means)
        _column_means(b.termination_terms, self._termination_rates)
        return {
            "reward_terms": {
                c.entry: float(m) for c, m in zip(plan.rewards, self._reward_means, strict=True)
            },
            "terminations": {
                c.entry: float(r)
                for c, r in zip(plan.terminations, self._termination_rates, strict=True)
            },
            "non_finite_actions": self._rows_where_not(self._finite),
            "non_finite_states": self._rows_where_not(self.robot.state_finite),
            "non_finite_rewards": self._rows_where_not(self._reward_finite),
        }

    def _rows_where_not(self, flags: np.ndarray) -> np.ndarray:
        return self._no_rows if flags.all() else np.flatnonzero(~flags)


@numba.njit(cache=True)
def _column_means(values, out):
    """``out[j]``: the mean of column ``j`` of (N, C) ``values``, summed in float64 (a serial
    pass: for the few columns of term values, cheaper than NumPy's reduction or a thread team)."""
    out[:] = 0.0
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            out[j] += values[i, j]
    out /= values.shape[0]


@numba.njit(parallel=True, cache=True)
def _take_actions(given, actions, last_actions, scale, offset, controls, finite):
    """One pass over rows: ``last_actions`` <- ``actions`` <- ``given`` (as float32), and the
    controls ``offset + scale * actions``. A row with a non-finite action (overflowed float32
    included) holds still this step: its actions are zeros and ``finite[i]`` is False."""
    for i in numba.prange(actions.shape[0]):
        row_sum = 0.0
        for j in range(actions.shape[1]):
            last_actions[i, j] = actions[i, j]
            actions[i, j] = given[i, j]
            row_sum += actions[i, j]
        finite[i] = math.isfinite(row_sum)  # a float64 sum of float32s overflows never
        if not finite[i]:
            actions[i, :] = 0.0
        for j in range(actions.shape[1]):
            controls[i, j] = offset[j] + scale[j] * actions[i, j]


def _vector(name: str, values: Any, size: int) -> np.ndarray:
    array = np.asarray(values, dtype=np.float32)
    if array.shape != (size,) or not np.isfinite(array).all():
        raise ValueError(
            f"{name}: expected {size} finite values (one per actuator), got {array.shape}"
        )
    return array
