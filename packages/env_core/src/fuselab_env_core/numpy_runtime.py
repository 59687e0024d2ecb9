"""NumPy Tier-1 runtime: the same plan, executed term by term with vectorized NumPy.

It is the reference the fused kernel is tested against, and a debugging aid; it is never on a
production hot path. Each term needs a NumPy twin (``@term.numpy``, or ``twins={name: fn}``)
taking the term's arguments without ``i`` (and without ``out``/``col`` for observations).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from fuselab_env_core.noise import UNIFORM_STD_TO_HALF_WIDTH, uniform_noise
from fuselab_env_core.plan import Const, Data, Input, Plan, PlanError, Slot, TermCall
from fuselab_env_core.runtime import TermBuffers, num_envs_of


class NumpyTerms:
    def __init__(
        self,
        plan: Plan,
        state: Mapping[str, np.ndarray],
        twins: Mapping[str, Callable] | None = None,
    ):
        self.plan = plan
        self.state = dict(state)
        self.num_envs = num_envs_of(state)
        self.buffers = TermBuffers(plan, self.num_envs)
        self._twins = dict(twins or {})
        for call in plan.terms():
            self._twin(call)  # fail now, not mid-step, when a twin is missing

    def __call__(self) -> None:
        self.score()
        self.observe()

    def score(self) -> None:
        """The fused ``score`` kernel's work: preamble, rewards, terminations."""
        b = self.buffers
        dt = b.scalars[0]
        for call in self.plan.preamble:
            self._run(call)
        for k, call in enumerate(self.plan.rewards):
            weight = b.scalars[call.weight_slot]
            value = self._checked(call, self._run(call), ())
            b.reward_terms[:, k] = 0.0 if weight == 0 else value * weight * dt
        b.reward[:] = b.reward_terms.sum(axis=1)
        for k, call in enumerate(self.plan.terminations):
            b.termination_terms[:, k] = self._checked(call, self._run(call), ())
        time_outs = [call.time_out for call in self.plan.terminations]
        b.terminated[:] = b.termination_terms[:, [not t for t in time_outs]].any(axis=1)
        b.truncated[:] = b.termination_terms[:, time_outs].any(axis=1)

    def observe(self, rows: np.ndarray | None = None) -> None:
        """The fused ``observe`` kernel's work: the observed preamble, then the observations
        (computed for every env, written to ``rows`` only) into each group's fresh row; the
        history pass is not repeated here (it is tested against its own twin)."""
        b = self.buffers
        rows = slice(None) if rows is None else rows
        for call in self.plan.observed_preamble():
            self._run(call)
        envs, noise_columns = np.arange(self.num_envs), self.plan.noise_columns()
        for group in self.plan.observations.values():
            out = np.zeros_like(b.fresh[group.name])
            for call in group.terms:
                out[:, call.col : call.col + call.size] = self._checked(
                    call, self._run(call), (call.size,)
                )
            for call in group.noisy_terms():
                start = noise_columns[group.name] + call.col
                noise = uniform_noise(b.noise_key, envs, np.arange(start, start + call.size))
                half_width = b.scalars[call.noise_slot] * UNIFORM_STD_TO_HALF_WIDTH
                out[:, call.col : call.col + call.size] += half_width * noise
            b.fresh[group.name][rows] = out[rows]
        magnitude = np.zeros(self.num_envs)  # a plan may have no observations
        for obs in b.fresh.values():
            magnitude += np.abs(obs.astype(np.float64)).sum(axis=1)
        b.obs_finite[rows] = (magnitude <= np.finfo(np.float32).max)[rows]

    def reset_rows(self, rows: np.ndarray) -> None:
        for name, value in self.plan.reset_values().items():
            self.buffers.workspace[name][rows] = value

    def _run(self, call: TermCall):
        args = [self._value(binding) for binding in call.args]
        if call.term.kind == "observation":
            args = args[2:]  # the twin returns its slice instead of writing out[i, col:]
        return self._twin(call)(*args)

    def _value(self, binding):
        if isinstance(binding, Input):
            if binding.source == "dt":
                return self.buffers.scalars[0]
            if binding.source == "state":
                return self.state[binding.name]
            if binding.source == "workspace":
                return self.buffers.workspace[binding.name]
            return None  # out / col: not used by twins
        if isinstance(binding, Slot):
            return self.buffers.scalars[binding.index]
        if isinstance(binding, Const):
            return binding.value
        if isinstance(binding, Data):
            return self.plan.data[binding.index]
        raise TypeError(f"unknown binding {binding!r}")

    def _twin(self, call: TermCall) -> Callable:
        twin = self._twins.get(call.term.name) or call.term.numpy_impl
        if twin is None:
            raise PlanError(f"{call.label}: term {call.term.name!r} has no NumPy twin")
        return twin

    def _checked(self, call: TermCall, value, per_env_shape: tuple[int, ...]) -> np.ndarray:
        value = np.asarray(value)
        expected = (self.num_envs, *per_env_shape)
        if value.shape != expected:
            raise PlanError(
                f"{call.label}: NumPy twin of {call.term.name!r} returned shape {value.shape}, "
                f"expected {expected}"
            )
        return value
