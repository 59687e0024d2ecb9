"""Resolve a task's term configuration into a plan: the ordered, fully bound form of its terms.

Resolution binds every argument of every term to where its value comes from (:class:`Input`,
:class:`Slot`, :class:`Const` or :class:`Data`), which is *parameter lowering*:

* float scalars, reward weights and ``dt`` -> a slot in one float32 runtime scalar buffer;
* ints, bools and strings -> compile-time constants of the generated kernel;
* body names (``Body``, ``Bodies``, ``ContactBodies``) -> their rows in the entity's buffers,
  compile-time constants (no integer body index is ever configured);
* arrays -> kernel data arguments: arrays given in configuration, and the env's task arrays
  (default pose, joint limits, a motion clip), which terms read by name like state buffers.

Every error names the entry, the term, the argument and what was expected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fuselab_env_core.config import (
    ObservationCfg,
    ObservationGroupCfg,
    RewardCfg,
    TaskTermsCfg,
    TerminationCfg,
)
from fuselab_env_core.ranges import Range
from fuselab_env_core.terms import (
    NAME_TYPES,
    Body,
    Param,
    Term,
    TermKind,
    did_you_mean,
    get_term,
)

DT_SLOT_NAME = "dt"


@dataclass(frozen=True)
class BufferSpec:
    """A batched float/int/bool array: per-env shape (the leading num_envs is implied)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @classmethod
    def of(cls, shape: tuple[int, ...] | int, dtype: Any = np.float32) -> BufferSpec:
        shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        return cls(shape, np.dtype(dtype))


# How one argument of a term call is supplied.
@dataclass(frozen=True)
class Input:
    source: str  # "state", "workspace", "dt", "obs_out", "obs_col"
    name: str


@dataclass(frozen=True)
class Slot:
    index: int


@dataclass(frozen=True)
class Const:
    value: int | bool | str | float | tuple[int, ...]  # float only when baking floats


@dataclass(frozen=True)
class Data:
    index: int


Binding = Input | Slot | Const | Data


@dataclass(frozen=True)
class TermCall:
    """One term of the plan with all its arguments bound (after ``i``)."""

    section: str
    entry: str
    term: Term
    args: tuple[Binding, ...]
    weight_slot: int | None = None  # rewards
    time_out: bool = False  # terminations
    group: str | None = None  # observations
    col: int = 0
    size: int = 0
    noise_slot: int | None = None  # observations in a noisy group: the runtime slot of its std
    history: int = 1  # observations: frames the policy sees (oldest first)
    delay: int = 0  # observations: control steps those frames are late by

    @property
    def label(self) -> str:
        return f"{self.section}.{self.entry}"


@dataclass(frozen=True)
class ObservationGroup:
    """A group's terms: the kernel writes each term's current value at ``col`` of a row of
    ``width`` columns; the group's output holds ``history`` frames of each term, ``delay``
    steps late, term-major (each term's frames side by side, oldest first)."""

    name: str
    width: int
    noise: bool
    terms: tuple[TermCall, ...]

    def slices(self) -> dict[str, slice]:
        """Each term's columns in the group's output."""
        starts = self.output_columns()
        return {
            t.entry: slice(starts[t.entry], starts[t.entry] + t.size * t.history)
            for t in self.terms
        }

    def output_columns(self) -> dict[str, int]:
        """Where each term's frames start in the group's output."""
        starts, col = {}, 0
        for t in self.terms:
            starts[t.entry] = col
            col += t.size * t.history
        return starts

    @property
    def output_width(self) -> int:
        return sum(t.size * t.history for t in self.terms)

    @property
    def remembers(self) -> bool:
        """Whether the output keeps past frames (history or delay): then it is not the row
        the kernel writes."""
        return any(t.history > 1 or t.delay > 0 for t in self.terms)

    def noisy_terms(self) -> tuple[TermCall, ...]:
        """Terms the kernel adds noise to: whether a term is noisy is structure, its std is a
        runtime slot."""
        return tuple(t for t in self.terms if t.noise_slot is not None)

    def column_noise_std(self, scalars: np.ndarray) -> np.ndarray:
        """The std of the noise on each column of the group's output (0 on clean columns), from
        the runtime scalar buffer ``scalars``."""
        std = np.zeros(self.output_width, np.float32)
        starts = self.output_columns()
        for t in self.noisy_terms():
            std[starts[t.entry] : starts[t.entry] + t.size * t.history] = scalars[t.noise_slot]
        return std


@dataclass
class Plan:
    state: dict[str, BufferSpec]
    workspace: dict[str, BufferSpec]
    slot_names: list[str]
    slot_values: np.ndarray  # float32 initial values of the runtime scalar buffer
    data: list[np.ndarray]
    data_names: list[str] = field(default_factory=list)  # a task array's name, or a param's field
    slot_ranges: dict[int, Range] = field(default_factory=dict)  # what tuning a slot may set
    preamble: list[TermCall] = field(default_factory=list)
    rewards: list[TermCall] = field(default_factory=list)
    terminations: list[TermCall] = field(default_factory=list)
    observations: dict[str, ObservationGroup] = field(default_factory=dict)

    def terms(self) -> list[TermCall]:
        groups = [t for g in self.observations.values() for t in g.terms]
        return [*self.preamble, *self.rewards, *self.terminations, *groups]

    def reset_values(self) -> dict[str, float]:
        """Persistent workspace fields and the value each takes when an episode starts."""
        return {name: v for call in self.preamble for name, v in call.term.reset.items()}

    def observed_preamble(self) -> list[TermCall]:
        """The preamble terms the observations need recomputed, in plan order: those writing a
        field an observation reads (or a term so needed reads), except persistent ones, whose
        outputs are read as the last scored step left them."""
        needed = {name for g in self.observations.values() for t in g.terms for name in reads(t)}
        calls = []
        for call in reversed(self.preamble):
            if call.term.persistent or not needed & set(call.term.outputs):
                continue
            calls.append(call)
            needed |= reads(call)
        return calls[::-1]

    def noise_columns(self) -> dict[str, int]:
        """Where each group's columns start in an env's noise stream: the groups side by
        side, in plan order (a column's noise is the same whichever groups are noisy)."""
        starts, col = {}, 0
        for group in self.observations.values():
            starts[group.name] = col
            col += group.width
        return starts

    def slot(self, name: str) -> int:
        try:
            return self.slot_names.index(name)
        except ValueError:
            raise KeyError(
                f"unknown runtime scalar {name!r}{did_you_mean(name, self.slot_names)}"
            ) from None


def reads(call: TermCall) -> set[str]:
    """Workspace fields a term call reads (a preamble term's own outputs excluded)."""
    fields = {b.name for b in call.args if isinstance(b, Input) and b.source == "workspace"}
    return fields - set(call.term.outputs)


class PlanError(ValueError):
    """A task's term configuration cannot be resolved."""


def resolve_plan(
    cfg: TaskTermsCfg | Mapping[str, Any],
    state: Mapping[str, BufferSpec],
    dt: float,
    *,
    arrays: Mapping[str, np.ndarray] | None = None,
    names: Mapping[str, Sequence[str]] | None = None,
) -> Plan:
    """Resolve ``cfg`` against the env's state buffers into a :class:`Plan`.

    ``arrays``: the env's task arrays (unbatched), read by terms by name. ``names``: the name
    tables body parameters resolve against (``body_names``, ``contact_body_names``: the
    entity's bodies in the order of its buffers' rows).
    """
    if not isinstance(cfg, TaskTermsCfg):
        cfg = TaskTermsCfg.from_dict(cfg)
    resolver = _Resolver(dict(state), dt, arrays or {}, names or {})
    return resolver.run(cfg)


class _Resolver:
    def __init__(
        self,
        state: dict[str, BufferSpec],
        dt: float,
        arrays: Mapping[str, np.ndarray] | None = None,
        names: Mapping[str, Sequence[str]] | None = None,
    ):
        for name, spec in state.items():
            if not isinstance(spec, BufferSpec):
                raise PlanError(f"state buffer {name!r}: expected a BufferSpec, got {spec!r}")
        self.arrays = dict(arrays or {})
        for name in self.arrays:
            if name in state:
                raise PlanError(f"task array {name!r}: a state buffer has the same name")
        self.names = {table: list(values) for table, values in (names or {}).items()}
        self._array_index: dict[str, int] = {}  # task array name -> its data index
        self.plan = Plan(state, {}, [], np.zeros(0, np.float32), [])
        self.slot_values: list[float] = []
        self._new_slot(DT_SLOT_NAME, _positive_float("dt", dt))
        self.plan.slot_ranges[0] = Range(gt=0.0)

    def run(self, cfg: TaskTermsCfg) -> Plan:
        plan = self.plan
        for entry, tc in cfg.preamble.items():
            plan.preamble.append(self._call("preamble", entry, tc, "preamble"))
        for entry, rc in cfg.rewards.items():
            plan.rewards.append(self._reward(entry, rc))
        for entry, tc in cfg.terminations.items():
            plan.terminations.append(self._termination(entry, tc))
        for group, gc in cfg.observations.items():
            where = f"observations.{group}"
            if not isinstance(gc.noise, bool):
                raise PlanError(f"{where}.noise: expected true or false, got {gc.noise!r}")
            calls, col = [], 0
            for entry, oc in gc.terms.items():
                call = self._observation(group, entry, oc, col, gc)
                calls.append(call)
                col += call.size
            plan.observations[group] = ObservationGroup(group, col, gc.noise, tuple(calls))
        plan.slot_values = np.asarray(self.slot_values, dtype=np.float32)
        return plan

    # -- sections --------------------------------------------------------------------------

    def _reward(self, entry: str, rc: RewardCfg) -> TermCall:
        weight = _float(f"rewards.{entry}.weight", rc.weight)
        weight_slot = self._new_slot(f"rewards.{entry}.weight", weight)
        call = self._call("rewards", entry, rc, "reward")
        return replace(call, weight_slot=weight_slot)

    def _termination(self, entry: str, tc: TerminationCfg) -> TermCall:
        if not isinstance(tc.time_out, bool):
            raise PlanError(
                f"terminations.{entry}.time_out: expected true or false, got {tc.time_out!r}"
            )
        call = self._call("terminations", entry, tc, "termination")
        return replace(call, time_out=tc.time_out)

    def _observation(
        self, group: str, entry: str, oc: ObservationCfg, col: int, gc: ObservationGroupCfg
    ) -> TermCall:
        section = f"observations.{group}"
        call = self._call(section, entry, oc, "observation")
        term = call.term
        size = term.size
        if callable(size):
            size = size(self._shapes(), self._param_values(call))
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size <= 0:
            raise PlanError(
                f"{section}.{entry}: term {term.name!r} declares observation size {size!r}; "
                "expected a positive int"
            )
        noise_std = _float(f"{section}.{entry}.noise_std", oc.noise_std)
        if noise_std < 0:
            raise PlanError(f"{section}.{entry}.noise_std: expected >= 0, got {noise_std}")
        noise_slot = None
        if gc.noise and noise_std > 0:
            noise_slot = self._new_slot(f"{section}.{entry}.noise_std", noise_std)
            self.plan.slot_ranges[noise_slot] = Range(ge=0.0)
        history = _count(f"{section}.{entry}.history", _first(oc.history, gc.history, 1), 1)
        delay = _count(f"{section}.{entry}.delay", _first(oc.delay, gc.delay, 0), 0)
        return replace(
            call,
            group=group,
            col=col,
            size=int(size),
            noise_slot=noise_slot,
            history=history,
            delay=delay,
        )

    # -- one term --------------------------------------------------------------------------

    def _call(self, section: str, entry: str, tc, kind: TermKind) -> TermCall:
        where = f"{section}.{entry}"
        term_name = tc.term or entry
        try:
            term = get_term(term_name)
        except KeyError as e:
            raise PlanError(f"{where}: {e.args[0]}") from None
        if term.kind != kind:
            raise PlanError(
                f"{where}: term {term.name!r} is a {term.kind} term; "
                f"this section takes {kind} terms"
            )
        if not isinstance(tc.params, Mapping):
            raise PlanError(f"{where}.params: expected a mapping, got {type(tc.params).__name__}")
        for given in tc.params:
            if term.param(given) is None:
                accepted = [p.name for p in term.params]
                raise PlanError(
                    f"{where}: term {term.name!r} has no parameter {given!r}"
                    f"{did_you_mean(str(given), accepted)}"
                )
        self._declare_outputs(where, term, tc.params)
        args: list[Binding] = []
        for arg in term.inputs:
            args.append(self._input(where, term, arg))
        for param in term.params:
            args.append(self._param(where, term, param, tc.params))
        return TermCall(section=section, entry=entry, term=term, args=tuple(args))

    def _declare_outputs(self, where: str, term: Term, params: Mapping[str, Any]) -> None:
        values = term.values(params)
        for name, shape in term.outputs.items():
            if name in self.plan.state or name in self.plan.workspace or name in self.arrays:
                owner = (
                    "a state buffer"
                    if name in self.plan.state
                    else "a task array"
                    if name in self.arrays
                    else "already a workspace field"
                )
                raise PlanError(f"{where}: workspace output {name!r} is {owner} (duplicate name)")
            if callable(shape):
                shape = shape(self._shapes(), values)
            self.plan.workspace[name] = BufferSpec.of(shape)

    def _input(self, where: str, term: Term, arg: str) -> Input:
        if arg == "dt":
            return Input("dt", arg)
        if term.kind == "observation" and arg == "out":
            return Input("obs_out", arg)
        if term.kind == "observation" and arg == "col":
            return Input("obs_col", arg)
        if arg in self.plan.state:
            return Input("state", arg)
        if arg in self.plan.workspace:
            return Input("workspace", arg)
        if arg in self.arrays:
            if arg not in self._array_index:
                self._array_index[arg] = self._new_data(arg, self.arrays[arg])
            return Data(self._array_index[arg])
        known = ["dt", *self.plan.state, *self.plan.workspace, *self.arrays]
        raise PlanError(
            f"{where}: term {term.name!r} reads {arg!r}, which is no state buffer, task array "
            f"or workspace field written by an earlier preamble term{did_you_mean(arg, known)} "
            "(annotate it if it is a parameter)"
        )

    def _param(self, where: str, term: Term, param: Param, given: Mapping[str, Any]) -> Binding:
        field_name = f"{where}.params.{param.name}"
        if param.name not in given and param.required:
            raise PlanError(
                f"{field_name}: missing parameter of term {term.name!r} "
                f"(expected {param.type.__name__})"
            )
        value = given.get(param.name, param.default)
        if param.type in NAME_TYPES:
            return Const(self._body_rows(field_name, param.type, value))
        if param.type is float:
            value = _in_range(field_name, _float(field_name, value), param.range)
            slot = self._new_slot(f"{where}.{param.name}", value)
            if param.range is not None:
                self.plan.slot_ranges[slot] = param.range
            return Slot(slot)
        if param.type is np.ndarray:
            return Data(self._new_data(field_name, value))
        if (
            param.type is int
            and isinstance(value, (int, np.integer))
            and not isinstance(value, bool)
        ):
            return Const(int(_in_range(field_name, int(value), param.range)))
        if param.type is bool and isinstance(value, (bool, np.bool_)):
            return Const(bool(value))
        if param.type is str and isinstance(value, str):
            return Const(value)
        raise PlanError(f"{field_name}: expected {param.type.__name__}, got {value!r}")

    def _body_rows(self, field_name: str, kind: type, value: Any) -> int | tuple[int, ...]:
        """A body name (or list of names) as its row (rows) in the entity's buffers."""
        table = kind.table  # type: ignore[attr-defined]
        if table not in self.names:
            raise PlanError(f"{field_name}: names bodies, but the env binds no {table}")
        known = self.names[table]
        single = kind is Body
        if single and not isinstance(value, str):
            raise PlanError(f"{field_name}: expected one body name, got {value!r}")
        if not single and (isinstance(value, str) or not isinstance(value, Sequence) or not value):
            raise PlanError(f"{field_name}: expected a non-empty list of body names, got {value!r}")
        rows = []
        for name in [value] if single else value:
            if name not in known:
                raise PlanError(
                    f"{field_name}: {name!r} is not among the entity's {table}"
                    f"{did_you_mean(str(name), known)} (they are: {', '.join(known)})"
                )
            rows.append(known.index(name))
        return rows[0] if single else tuple(rows)

    # -- lowering targets ------------------------------------------------------------------

    def _new_slot(self, name: str, value: float) -> int:
        self.plan.slot_names.append(name)
        self.slot_values.append(value)
        return len(self.slot_values) - 1

    def _new_data(self, field_name: str, value: Any) -> int:
        array = np.ascontiguousarray(value)
        if array.dtype.kind not in "biuf" or array.ndim == 0:
            raise PlanError(
                f"{field_name}: expected a numeric array with at least one dimension, got {value!r}"
            )
        self.plan.data.append(array)
        self.plan.data_names.append(field_name)
        return len(self.plan.data) - 1

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        """What shape rules see: per-env shapes of state and workspace fields (num_envs left
        out) and the whole shapes of task arrays."""
        shapes = {n: s.shape for n, s in (self.plan.state | self.plan.workspace).items()}
        return shapes | {n: a.shape for n, a in self.arrays.items()}

    def _param_values(self, call: TermCall) -> dict[str, Any]:
        values = {}
        for param, binding in zip(
            call.term.params, call.args[len(call.term.inputs) :], strict=True
        ):
            if isinstance(binding, Slot):
                values[param.name] = self.slot_values[binding.index]
            elif isinstance(binding, Const):
                values[param.name] = binding.value
            elif isinstance(binding, Data):
                values[param.name] = self.plan.data[binding.index]
        return values


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def _count(field_name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise PlanError(f"{field_name}: expected an int >= {minimum}, got {value!r}")
    return int(value)


def _float(field_name: str, value: Any) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise PlanError(f"{field_name}: expected a float, got {value!r}")
    if not np.isfinite(value):
        raise PlanError(f"{field_name}: expected a finite float, got {value!r}")
    return float(value)


def _in_range(field_name: str, value: float, accepted: Range | None) -> float:
    if accepted is not None and not accepted.accepts(value):
        raise PlanError(f"{field_name}: expected {accepted.describe()}, got {value!r}")
    return value


def _positive_float(field_name: str, value: Any) -> float:
    value = _float(field_name, value)
    if value <= 0:
        raise PlanError(f"{field_name}: expected > 0, got {value}")
    return value
