"""FusedEnv: the batched env lifecycle on a SimBackend, an Entity and fused terms.

One :meth:`FusedEnv.step`, in DESIGN.md's order (mjlab's: rewards and terminations, resets,
commands and events, observations)::

    apply actions -> physics substeps (decimation) -> fused copy of the bound body states
    -> score (fused: preamble, rewards, terminations) -> failure statistics
    -> advance (hook: curricula, commands, motion frame, clip end, events)
    -> observe the done rows (their terminal observations) -> reset the done rows
    -> copy of the rows advance or a reset wrote -> observe every row

so a row's observation never depends on what other rows do in the step: it always shows the
state after advance (the next command, the next reference frame), whether or not another row
reset. Two full kernel passes a step (score, observe) plus the done rows' terminal pass.

What is task-specific outside the kernel is configuration, built into components the env
calls at fixed points: the action mapping (:mod:`fuselab_env_core.actions`: actions ->
controls), the command generators (:mod:`fuselab_env_core.commands`: per-env targets terms read),
the events (:mod:`fuselab_env_core.events`: startup, reset and interval) and the curricula
(:mod:`fuselab_env_core.curriculum`: settings that follow the policy's progress). A reset
builds each row's state from the robot's initial state, then the reset events, then the
commands (a motion reference may replace it), and writes it once. Everything per env runs in
the backend, the fused kernels and those components' whole-array code; the Python here touches
whole arrays only.
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

from fuselab_env_core.actions import JointAction
from fuselab_env_core.backend import SimBackend
from fuselab_env_core.commands import Command
from fuselab_env_core.config import TaskTermsCfg
from fuselab_env_core.curriculum import Curriculum
from fuselab_env_core.entity import Entity
from fuselab_env_core.events import EventManager
from fuselab_env_core.ranges import PositiveFloat, PositiveInt, Section, check_value
from fuselab_env_core.runtime import FusedTerms
from fuselab_env_core.symmetry import Mirror, group_mirror
from fuselab_env_core.terms import termination
from fuselab_env_core.timing import elapsed_ms

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
    physics_dt: PositiveFloat | None = None  # seconds per physics step; None: the model's own
    episode_length_s: PositiveFloat = 20.0
    # False: the nominal task, only the events that set the reset state run (no randomized
    # physics, sensors, delays or pushes)
    randomize: bool = True


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
        action: JointAction,
        init_qpos: np.ndarray,
        decimation: int,
        episode_length_s: float,
        commands: Mapping[str, Command] | None = None,
        events: EventManager | None = None,
        curricula: Mapping[str, Curriculum] | None = None,
        arrays: Mapping[str, np.ndarray] | None = None,
        joint_mirror: Mirror | None = None,
        num_threads: int | None = None,
        seed: int = 0,
    ):
        """``joint_mirror``: the robot's left-right mirror of its joints (permutation and sign,
        in the model's joint order), which :meth:`observation_mirror` and
        :meth:`action_mirror` build on; None: the robot has none."""
        started = time.perf_counter()
        facts, n = backend.model, backend.num_envs
        decimation = check_value("env.decimation", decimation, PositiveInt)
        episode_length_s = check_value("env.episode_length_s", episode_length_s, PositiveFloat)
        self.backend, self.robot, self.action = backend, robot, action
        self.commands = dict(commands or {})
        self.events = events
        self.curricula = dict(curricula or {})
        self.joint_mirror = joint_mirror
        self.num_envs, self.decimation = n, decimation
        self.step_dt = facts.physics_dt * decimation
        self.init_qpos = _vector("init_qpos", init_qpos, facts.nq)
        self.rng = np.random.default_rng(seed)
        self.all_envs = np.arange(n)

        self.action_dim = action.action_dim
        self.actions = np.zeros((n, self.action_dim), np.float32)
        self.last_actions = np.zeros((n, self.action_dim), np.float32)
        self.episode_step = np.zeros(n, np.int32)
        self.max_episode_steps = np.full(n, math.ceil(episode_length_s / self.step_dt), np.int32)
        # What the joint encoders add to the true joint positions (observations read it).
        self.encoder_bias = np.zeros_like(robot.joint_pos)
        self._controls = np.tile(action.controls0, (n, 1))
        self._finite = np.ones(n, np.bool_)  # rows whose actions were finite
        self._reward_finite = np.ones(n, np.bool_)  # rows whose reward did not overflow
        self._done = np.zeros(n, np.bool_)
        self._stale_rows = np.zeros(n, np.bool_)  # physics state written since the last copy
        self._reset_qpos = np.zeros((n, facts.nq), np.float32)  # the reset rows' state
        self._reset_qvel = np.zeros((n, facts.nv), np.float32)
        robot.update()
        state = {
            **robot.state(),
            "actions": self.actions,
            "last_actions": self.last_actions,
            "episode_step": self.episode_step,
            "max_episode_steps": self.max_episode_steps,
            "encoder_bias": self.encoder_bias,
        }
        task_arrays = dict(arrays or {})
        for generator in self.commands.values():
            state.update(generator.state)
            task_arrays.update(generator.arrays)
        self.task_arrays = task_arrays
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
            arrays=task_arrays,
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
        # each reward term's mean over the envs in the step just scored (value * weight * dt)
        self.reward_means = np.zeros(len(self.terms.plan.rewards), np.float64)
        self._termination_rates = np.zeros(len(self.terms.plan.terminations), np.float64)
        self._no_rows = np.zeros(0, np.intp)
        self.terms.seed_noise(seed)
        for component in (*self.commands.values(), *self.curricula.values()):
            component.bind(self)
        if events:
            events.startup(self)
        self.reset_all()
        log.info(
            "env ready: %d envs, step %.3f s (decimation %d), %d steps per episode (%.1f ms)",
            n,
            self.step_dt,
            decimation,
            self.max_episode_steps[0],
            elapsed_ms(started),
        )

    def close(self) -> None:
        """Release the backend (its threads, device memory)."""
        self.backend.close()

    # -- symmetry ---------------------------------------------------------------------------------

    def observation_mirror(self, group: str) -> Mirror:
        """(permutation, sign) that mirror a row of observation group ``group`` left-right."""
        perm, sign = self._joint_mirror()
        columns = self.robot.joint_columns(self.robot.joint_ids)
        entity = (columns[perm[self.robot.joint_ids]], sign[self.robot.joint_ids])
        return group_mirror(self.terms.plan.observations[group], entity, self.name_tables)

    def action_mirror(self) -> Mirror:
        """(permutation, sign) that mirror a row of actions left-right."""
        perm, sign = self._joint_mirror()
        joints = self.action.joints
        column = {int(j): k for k, j in enumerate(joints)}
        images = [int(perm[j]) for j in joints]
        if any(image not in column for image in images):
            raise ValueError("symmetry: the actions drive a joint whose mirror image they do not")
        return np.array([column[j] for j in images], np.int64), sign[joints].astype(np.float32)

    def _joint_mirror(self) -> Mirror:
        if self.joint_mirror is None:
            raise ValueError("symmetry: this robot has no left-right joint mirror")
        return self.joint_mirror

    # -- state ------------------------------------------------------------------------------------

    def write_state(self, env_ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Set the physics state of ``env_ids`` (a push, a teleport onto a reference); the bound
        body states of those rows are copied again before the step's observations. Commands and
        events write physics state only through here: a row written past it would keep its old
        copy."""
        self.backend.reset_envs(env_ids, qpos, qvel)
        self._stale_rows[env_ids] = True

    # -- lifecycle -------------------------------------------------------------------------------

    def reset_all(self) -> dict[str, np.ndarray]:
        self._reset(self.terms.all_rows)
        self._copy_bodies_if_stale()
        self.terms.next_step()
        self.terms.observe()
        return self.terms.buffers.obs

    def step(self, actions: np.ndarray) -> StepResult:
        self._apply(actions)
        self.backend.step(self.decimation)
        self.robot.update()
        self._stale_rows.fill(False)  # every row is fresh
        self.episode_step += 1
        self.terms.next_step()  # one draw for the step's observations, terminal ones too
        self.terms.score()
        self._outcome()
        info = self._statistics()
        self._advance()
        if self.curricula:
            info["curriculum"] = {name: c.level for name, c in self.curricula.items()}
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
        if not isinstance(actions, np.ndarray):
            raise TypeError(
                f"actions: expected a numpy array of shape {self.actions.shape}, got "
                f"{type(actions).__name__}"
            )
        if actions.shape != self.actions.shape:
            raise ValueError(
                f"actions: expected an array of shape {self.actions.shape}, got {actions.shape}"
            )
        if not np.can_cast(actions.dtype, np.float32, "same_kind"):
            raise ValueError(f"actions: expected a float or int array, got {actions.dtype}")
        self.action.apply(actions, self.actions, self.last_actions, self._controls, self._finite)
        self.backend.set_controls(self._controls)

    def _advance(self) -> None:
        """After scoring, before resets: the curricula, the commands, then the interval events."""
        for schedule in self.curricula.values():
            schedule.advance(self)
        for generator in self.commands.values():
            generator.advance(self)
        if self.events:
            self.events.advance(self)

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
        """New episodes: the rows' state from the initial state, the reset events and the
        commands, written once; their actions, step counts and persistent terms start over."""
        k = len(env_ids)
        qpos, qvel = self._reset_qpos[:k], self._reset_qvel[:k]
        qpos[:] = self.init_qpos
        qvel[:] = 0.0
        if self.events:
            self.events.reset(self, env_ids, qpos, qvel)
        for generator in self.commands.values():
            generator.reset(self, env_ids, qpos, qvel)
        self.write_state(env_ids, qpos, qvel)
        self.actions[env_ids] = 0.0
        self.last_actions[env_ids] = 0.0
        self.action.reset(env_ids)
        self.episode_step[env_ids] = 0
        self.episode_return[env_ids] = 0.0
        self.terms.reset_rows(env_ids)

    def _statistics(self) -> dict[str, Any]:
        b, plan = self.terms.buffers, self.terms.plan
        _column_means(b.reward_terms, self.reward_means)
        _column_means(b.termination_terms, self._termination_rates)
        return {
            "reward_terms": {
                c.entry: float(m) for c, m in zip(plan.rewards, self.reward_means, strict=True)
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


def _vector(name: str, values: Any, size: int) -> np.ndarray:
    array = np.asarray(values, dtype=np.float32)
    if array.shape != (size,) or not np.isfinite(array).all():
        raise ValueError(f"{name}: expected {size} finite values, got {array.shape}")
    return array
