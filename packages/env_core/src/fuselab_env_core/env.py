"""FusedEnv: the batched env lifecycle on a SimBackend, an Entity and fused terms.

One :meth:`FusedEnv.step`, in DESIGN.md's order::

    apply actions -> physics substeps (decimation) -> fused copy of the bound body states
    -> fused update_state kernel (preamble, rewards, terminations, observations)
    -> failure statistics -> reference advance (hook) -> reset of done envs, keeping the
    terminal observation of each reset row -> observations

A task subclasses it for what is task-specific: the reset state (:meth:`reset_state`), and
optionally commands or a motion reference (:meth:`advance`, :meth:`on_reset`); it sets what
those hooks need before calling ``FusedEnv.__init__``, which resets every env. Everything
per env runs in the backend and the fused kernel; the Python here touches whole arrays only.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fuselab_env_core.backend import SimBackend
from fuselab_env_core.config import TaskTermsCfg
from fuselab_env_core.entity import Entity
from fuselab_env_core.runtime import FusedTerms
from fuselab_env_core.terms import termination

log = logging.getLogger(__name__)


@termination(name="time_out")
def time_out(i, episode_step, max_episode_steps):
    """The episode reached its length: a truncation (configure it with ``time_out: true``)."""
    return episode_step[i] >= max_episode_steps[i]


time_out.numpy(lambda episode_step, max_episode_steps: episode_step >= max_episode_steps)


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
        num_threads: int | None = None,
        seed: int = 0,
    ):
        started = time.perf_counter()
        n, nu = backend.num_envs, backend.model.nu
        if isinstance(decimation, bool) or not isinstance(decimation, int) or decimation < 1:
            raise ValueError(f"decimation: expected a positive int, got {decimation!r}")
        self.backend, self.robot = backend, robot
        self.num_envs, self.decimation = n, decimation
        self.step_dt = backend.model.physics_dt * decimation
        if not episode_length_s > 0:
            raise ValueError(f"episode_length_s: expected > 0, got {episode_length_s!r}")
        self.default_controls = _vector("default_controls", default_controls, nu)
        self.action_scale = _vector("action_scale", action_scale, nu)
        self.rng = np.random.default_rng(seed)

        self.actions = np.zeros((n, nu), np.float32)
        self.last_actions = np.zeros((n, nu), np.float32)
        self.episode_step = np.zeros(n, np.int32)
        self.max_episode_steps = np.full(n, math.ceil(episode_length_s / self.step_dt), np.int32)
        self._controls = np.zeros((n, nu), np.float32)
        self._finite = np.ones(n, np.bool_)  # rows whose actions were finite
        self._state_finite = np.ones(n, np.bool_)  # rows whose physics did not diverge
        robot.update()
        state = {
            **robot.state(),
            "actions": self.actions,
            "last_actions": self.last_actions,
            "episode_step": self.episode_step,
            "max_episode_steps": self.max_episode_steps,
            **(extra_state or {}),
        }
        self.terms = FusedTerms.build(terms, state, dt=self.step_dt, num_threads=num_threads)
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
        """After the kernel: advance commands or a motion reference (called every step)."""

    def on_reset(self, env_ids: np.ndarray) -> None:
        """After ``env_ids`` were reset in the backend, before their observations are built."""

    # -- lifecycle -------------------------------------------------------------------------------

    def reset_all(self) -> dict[str, np.ndarray]:
        self._reset(np.arange(self.num_envs))
        self.robot.update()
        self.terms.sample_noise(self.rng)
        self._refresh_observations()
        return self.terms.buffers.obs

    def step(self, actions: np.ndarray) -> StepResult:
        self._apply(actions)
        self.backend.step(self.decimation)
        self.robot.update()
        self.episode_step += 1
        self._check_state()
        self._run_terms()
        b = self.terms.buffers
        np.copyto(self.reward, b.reward)
        np.logical_or(b.terminated, ~self._finite, out=self.terminated)
        if not self._state_finite.all():  # a diverged env ends as a failure that earns nothing
            self.terminated |= ~self._state_finite
            self.reward[~self._state_finite] = 0.0
        np.copyto(self.truncated, b.truncated)
        self.episode_return += self.reward
        info = self._statistics()
        self.advance()
        done = np.flatnonzero(self.terminated | self.truncated)
        if done.size:
            for group, obs in b.obs.items():
                self.terminal_obs[group][done] = obs[done]
            info["episode_return"] = float(self.episode_return[done].mean())
            info["episode_length"] = float(self.episode_step[done].mean())
            self._reset(done)
            self.robot.update()
            self._refresh_observations()
        info["reset_envs"] = done
        info["terminal_obs"] = self.terminal_obs
        return StepResult(b.obs, self.reward, self.terminated, self.truncated, info)

    # -- internals -------------------------------------------------------------------------------

    def _apply(self, actions: np.ndarray) -> None:
        if not isinstance(actions, np.ndarray) or actions.shape != self.actions.shape:
            raise ValueError(
                f"actions: expected an array of shape {self.actions.shape}, got "
                f"{getattr(actions, 'shape', type(actions).__name__)}"
            )
        np.copyto(self.last_actions, self.actions)
        np.copyto(self.actions, actions, casting="same_kind")
        np.isfinite(self.actions).all(axis=1, out=self._finite)
        if not self._finite.all():  # such rows hold still this step and end as failures
            self.actions[~self._finite] = 0.0
        np.multiply(self.actions, self.action_scale, out=self._controls)
        self._controls += self.default_controls
        self.backend.set_controls(self._controls)

    def _check_state(self) -> None:
        """Rows whose physics state went non-finite (a diverged simulation; the backends leave
        such rows as they are until a reset)."""
        np.isfinite(self.robot.qvel).all(axis=1, out=self._state_finite)
        self._state_finite &= np.isfinite(self.robot.qpos).all(axis=1)

    def _run_terms(self) -> None:
        self.terms.sample_noise(self.rng)
        self.terms()

    def _refresh_observations(self) -> None:
        """Run the kernel again for the reset rows' fresh observations, with dt = 0: the step's
        rewards are already copied out, and timers kept by preamble terms tick once per step.
        The step's noise is reused: other rows get the observations they already had, and a
        reset row's new episode owes nothing to its last one (sampling is the costly part)."""
        self.terms.run_without_time()

    def _reset(self, env_ids: np.ndarray) -> None:
        qpos, qvel = self.reset_state(env_ids)
        self.backend.reset_envs(env_ids, qpos, qvel)
        self.actions[env_ids] = 0.0
        self.last_actions[env_ids] = 0.0
        self.episode_step[env_ids] = 0
        self.episode_return[env_ids] = 0.0
        self.on_reset(env_ids)

    def _statistics(self) -> dict[str, Any]:
        b, plan = self.terms.buffers, self.terms.plan
        return {
            "reward_terms": {
                c.entry: float(b.reward_terms[:, k].mean()) for k, c in enumerate(plan.rewards)
            },
            "terminations": {
                c.entry: float(b.termination_terms[:, k].mean())
                for k, c in enumerate(plan.terminations)
            },
            "non_finite_actions": np.flatnonzero(~self._finite),
            "non_finite_states": np.flatnonzero(~self._state_finite),
        }


def _vector(name: str, values: Any, size: int) -> np.ndarray:
    array = np.asarray(values, dtype=np.float32)
    if array.shape != (size,) or not np.isfinite(array).all():
        raise ValueError(
            f"{name}: expected {size} finite values (one per actuator), got {array.shape}"
        )
    return array
