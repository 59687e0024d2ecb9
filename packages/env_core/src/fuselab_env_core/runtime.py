"""Runtime: the buffers of a plan and its fused kernels bound to an env's state.

``FusedTerms.build`` is the whole start-up pipeline, one INFO line with milliseconds per step:
resolve plan -> key -> classify cache -> generate -> compile or load -> bind buffers -> warm up.
After that, :meth:`FusedTerms.score` runs the preamble, rewards and terminations of every env
and :meth:`FusedTerms.observe` the observations, each one parallel kernel, no Python per env.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import numba
import numpy as np

from fuselab_env_core.codegen import KernelArg, kernel_args
from fuselab_env_core.compiler import BuildReport, FusedKernels, compile_plan
from fuselab_env_core.config import TaskTermsCfg
from fuselab_env_core.history import ObservationMemory
from fuselab_env_core.noise import stream_key
from fuselab_env_core.plan import BufferSpec, Plan, PlanError, resolve_plan
from fuselab_env_core.timing import elapsed_ms

log = logging.getLogger(__name__)


class TermBuffers:
    """Everything the kernel reads or writes besides the env's state, allocated once."""

    def __init__(self, plan: Plan, num_envs: int):
        n = num_envs
        self.num_envs = n
        self.scalars = plan.slot_values.copy()
        self.workspace = {k: np.zeros((n, *s.shape), s.dtype) for k, s in plan.workspace.items()}
        self.reward = np.zeros(n, np.float32)
        self.reward_terms = np.zeros((n, len(plan.rewards)), np.float32)
        self.terminated = np.zeros(n, np.bool_)
        self.truncated = np.zeros(n, np.bool_)
        self.termination_terms = np.zeros((n, len(plan.terminations)), np.bool_)
        groups = plan.observations.values()
        # What the kernel writes (each term's current value) and what a group outputs: the same
        # array unless the group keeps past frames (fuselab_env_core.history).
        self.fresh = {g.name: np.zeros((n, g.width), np.float32) for g in groups}
        self.obs = {
            g.name: np.zeros((n, g.output_width), np.float32) if g.remembers else self.fresh[g.name]
            for g in groups
        }
        self.obs_finite = np.ones(n, np.bool_)  # rows whose observations are all finite
        self.noise_key = np.zeros(2, np.uint64)  # observation noise: (stream key, draw)


class FusedTerms:
    """A task's terms compiled into two parallel kernels and bound to an env's buffers."""

    def __init__(
        self,
        plan: Plan,
        kernels: FusedKernels,
        report: BuildReport,
        state: Mapping[str, np.ndarray],
        num_threads: int | None = None,
    ):
        self.plan = plan
        self.kernels = kernels
        self.report = report
        self.num_envs = num_envs_of(state)
        self.num_threads = _thread_budget(num_threads)
        self.state = dict(state)
        self.buffers = TermBuffers(plan, self.num_envs)
        self.all_rows = np.arange(self.num_envs, dtype=np.intp)
        self._args = tuple(self._bind(arg) for arg in kernel_args(plan))
        self._reset_values = plan.reset_values()
        self.memories = {
            g.name: ObservationMemory(g, self.num_envs)
            for g in plan.observations.values()
            if g.remembers
        }
        if self.memories and "episode_step" not in self.state:
            raise PlanError(
                f"observations.{next(iter(self.memories))}: history and delay need the env's "
                "'episode_step' state buffer (a new episode's frames are filled at step 0)"
            )

    @classmethod
    def build(
        cls,
        cfg: TaskTermsCfg | Mapping[str, Any],
        state: Mapping[str, np.ndarray],
        dt: float,
        num_threads: int | None = None,
        *,
        arrays: Mapping[str, np.ndarray] | None = None,
        names: Mapping[str, Any] | None = None,
    ) -> FusedTerms:
        """Resolve, compile (or fetch from a cache), bind and warm up a task's terms.

        ``arrays``: the env's task arrays, read by terms by name; ``names``: the entity's name
        tables (``body_names``, ``contact_body_names``) body parameters resolve against."""
        timings: dict[str, float] = {}
        started = time.perf_counter()
        plan = resolve_plan(cfg, state_specs(state), dt, arrays=arrays, names=names)
        timings["resolve"] = elapsed_ms(started)
        log.info(
            "resolve plan: %.1f ms (%d terms, %d runtime scalars)",
            timings["resolve"],
            len(plan.terms()),
            len(plan.slot_names),
        )
        kernels, report = compile_plan(plan, timings)
        started = time.perf_counter()
        fused = cls(plan, kernels, report, state, num_threads)
        timings["bind"] = elapsed_ms(started)
        if report.cache != "in-process":  # first run in this process: thread pool start-up
            started = time.perf_counter()
            fused.observe()  # advances nothing: no timer a preamble term keeps
            timings["warm up"] = elapsed_ms(started)
        log.info(
            "bind: %.1f ms, warm up: %.1f ms (%d envs, %d Numba threads); build %s in %.1f ms",
            timings["bind"],
            timings.get("warm up", 0.0),
            fused.num_envs,
            fused.num_threads,
            report.cache,
            report.total_ms,
        )
        return fused

    def score(self) -> None:
        """Preamble, rewards and terminations of every env: the one pass per step in which
        persistent preamble outputs (timers) advance."""
        self._use_thread_budget()
        self.kernels.score(*self._args)

    def observe(self, rows: np.ndarray | None = None) -> None:
        """Observations (and the preamble terms they read) of the env ``rows`` (intp, default
        every env), from the state as it is now; nothing persistent advances (the frame kept
        for history is this step's, written again if a row is observed twice)."""
        self._use_thread_budget()
        rows = self.all_rows if rows is None else rows
        self.kernels.observe(rows, *self._args)
        for name, memory in self.memories.items():
            b = self.buffers
            memory.update(rows, b.fresh[name], b.obs[name], self.state["episode_step"])

    def __call__(self) -> None:
        """Score, then observe, every env."""
        self.score()
        self.observe()

    def reset_rows(self, rows: np.ndarray) -> None:
        """Start new episodes in ``rows``: persistent preamble outputs take their reset values."""
        workspace = self.buffers.workspace
        for name, value in self._reset_values.items():
            workspace[name][rows] = value

    def _use_thread_budget(self) -> None:
        if numba.get_num_threads() != self.num_threads:
            numba.set_num_threads(self.num_threads)  # Numba's pool only; thread-local setting

    # -- runtime scalars: tuning never recompiles --------------------------------------------

    def set_scalar(self, name: str, value: float) -> None:
        """Tune a runtime scalar (a float parameter, a weight, dt): no recompilation. The value
        must lie in the parameter's declared range."""
        index = self.plan.slot(name)
        if isinstance(value, (bool, np.bool_)) or not np.isfinite(value):
            raise PlanError(f"runtime scalar {name!r}: expected a finite float, got {value!r}")
        accepted = self.plan.slot_ranges.get(index)
        if accepted is not None and not accepted.accepts(float(value)):
            raise PlanError(
                f"runtime scalar {name!r}: expected {accepted.describe()}, got {value!r}"
            )
        self.buffers.scalars[index] = value

    def scalar(self, name: str) -> float:
        return float(self.buffers.scalars[self.plan.slot(name)])

    def seed_noise(self, seed: int) -> None:
        """Start the observation noise stream of ``seed`` at its first draw."""
        self.buffers.noise_key[:] = (stream_key(seed), 0)

    def next_step(self) -> None:
        """Move the observation noise to its next draw and the history to its next frame: an
        env calls it once per step, before scoring, so every observation of the step (terminal
        ones too) sees the same noise and fills the same frame."""
        self.buffers.noise_key[1] += np.uint64(1)
        for memory in self.memories.values():
            memory.next_step()

    def observation_noise_std(self, group: str) -> np.ndarray:
        """The std of the noise the kernel adds to each column of a group's observations (0 on
        clean columns; all 0 for a group without noise)."""
        if group not in self.plan.observations:
            raise KeyError(f"observation group {group!r}: accepted {list(self.plan.observations)}")
        return self.plan.observations[group].column_noise_std(self.buffers.scalars)

    # -- binding -----------------------------------------------------------------------------

    def _bind(self, arg: KernelArg) -> np.ndarray:
        b = self.buffers
        if arg.source == "scalars":
            return b.scalars
        key = arg.key
        if arg.source == "data":
            assert isinstance(key, int)  # data arrays are bound by index
            return self.plan.data[key]
        assert isinstance(key, str)  # every other source is bound by name
        if arg.source == "state":
            return _checked(f"state buffer {key!r}", self.state[key], arg, self.num_envs)
        if arg.source == "noise_key":
            return b.noise_key
        sources = {"workspace": b.workspace, "obs": b.fresh}
        if arg.source in sources:
            return sources[arg.source][key]
        return getattr(b, key)


def prefer_sleeping_omp_threads() -> bool:
    """Ask OpenMP threads to sleep, not spin, between parallel regions, unless the user chose
    otherwise; returns whether that policy is in effect.

    Physics threads (MuJoCo's rollout pool, Warp) run between two fused kernels on the same
    cores; OpenMP's default spin-wait keeps Numba's idle threads busy for milliseconds after
    each kernel and was measured to make a G1 env step 2x slower on 2 cores. torch's wheels and
    Numba load the same ``libgomp.so.1``, which reads the variable once, when it starts its
    threads: so it is set before Numba's pool starts and before torch is imported
    (importing ``fuselab_env_core`` calls this, which every fuselab package does first).
    """
    from numba.np.ufunc import parallel

    if "OMP_WAIT_POLICY" in os.environ:
        return os.environ["OMP_WAIT_POLICY"].upper() == "PASSIVE"
    if parallel._is_initialized or "torch" in sys.modules:
        log.warning(
            "OpenMP threads were started before fuselab could ask them to sleep between "
            "kernels (torch or a Numba kernel came first): they spin and compete with the "
            "physics threads; set OMP_WAIT_POLICY=PASSIVE before starting"
        )
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    log.info("OMP_WAIT_POLICY=PASSIVE for Numba's and torch's OpenMP threads (set it to override)")
    return True


def state_specs(state: Mapping[str, np.ndarray]) -> dict[str, BufferSpec]:
    return {name: BufferSpec.of(array.shape[1:], array.dtype) for name, array in state.items()}


def _checked(what: str, array: Any, arg: KernelArg, num_envs: int) -> np.ndarray:
    expected = (num_envs, *arg.shape)
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{what}: expected a numpy array, got {type(array).__name__}")
    if array.shape != expected or array.dtype != arg.dtype:
        raise PlanError(
            f"{what}: expected shape {expected} and dtype {arg.dtype}, "
            f"got {array.shape} {array.dtype}"
        )
    if not array.flags.c_contiguous:
        raise PlanError(f"{what}: expected a C-contiguous array")
    return array


def num_envs_of(state: Mapping[str, np.ndarray]) -> int:
    sizes = {name: np.shape(array)[0] if np.ndim(array) else None for name, array in state.items()}
    distinct = set(sizes.values())
    if len(distinct) != 1 or None in distinct:
        raise PlanError(f"state buffers must share a leading num_envs dimension, got {sizes}")
    size = distinct.pop()
    assert size is not None  # ruled out above
    return int(size)


def _thread_budget(num_threads: int | None) -> int:
    # numba.config sets its options through globals() at import, so pyright cannot see them
    available = numba.config.NUMBA_NUM_THREADS  # pyright: ignore[reportAttributeAccessIssue]
    if num_threads is None:
        return available
    if isinstance(num_threads, bool) or not isinstance(num_threads, int):
        raise PlanError(f"num_threads: expected an int in 1..{available}, got {num_threads!r}")
    if not 1 <= num_threads <= available:
        raise PlanError(
            f"num_threads: expected 1..{available} (NUMBA_NUM_THREADS), got {num_threads}"
        )
    return num_threads
