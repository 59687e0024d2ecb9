"""Terms: the small Numba-compatible functions a task is made of, and their registry.

A term is a plain function written once::

    @reward()
    def track_lin_vel_exp(i, root_lin_vel_b, command, std: float = 0.5):
        ex = command[i, 0] - root_lin_vel_b[i, 0]
        ey = command[i, 1] - root_lin_vel_b[i, 1]
        return math.exp(-(ex * ex + ey * ey) / (std * std))

Its first argument is the env index ``i``. Every other argument is either

* an *input*, found by name when the plan is resolved: ``dt`` (the control step), a state
  buffer the env declares (``actions``, ``body_pos_w``, ...) or a workspace field written by a
  preamble term; each is the whole batched array, indexed with ``i``;
* an input may also be a *task array* the env declares by name (unbatched kernel data: the
  robot's default pose, its soft joint limits, a motion clip's frames), indexed without ``i``;
* a *parameter*, marked by a type annotation (``float``, ``int``, ``bool``, ``str``,
  ``np.ndarray``, or a name of the env's bodies: :class:`Body`, :class:`Bodies`,
  :class:`ContactBodies`) and set from configuration, with the Python default as its default.
  Body names become their rows in the entity's buffers: compile-time constants. A number may
  declare the range it accepts, ``std: Annotated[float, Range(gt=0)]`` (or the aliases
  :data:`PositiveFloat`, :data:`NonNegativeFloat`, :data:`Fraction`, :data:`PositiveInt` of
  :mod:`fuselab_env_core.ranges`): every value configured or tuned is
  checked against it, with the parameter's full key in the error.

Kinds: a reward returns a float, a termination returns a bool, an observation writes ``size``
values into ``out[i, col:col + size]`` (``out`` and ``col`` are supplied by the plan), and a
preamble term writes shared quantities into the workspace fields it declares as ``outputs``.
A preamble term that keeps state from step to step (a timer) declares the value each of its
outputs takes when an episode starts (``reset``); it advances only when the env scores a step.
"""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numba
import numpy as np

from fuselab_env_core.ranges import Range

TermKind = Literal["preamble", "reward", "termination", "observation"]


class Body(str):
    """A parameter naming one of the entity's bodies: its row in ``body_*_w`` (an int constant)."""

    table = "body_names"


class Bodies(tuple):
    """A parameter naming some of the entity's bodies: their rows in ``body_*_w`` (a tuple of
    int constants)."""

    table = "body_names"


class ContactBodies(tuple):
    """A parameter naming some of the entity's contact bodies: their rows in ``contact_force_w``
    (a tuple of int constants)."""

    table = "contact_body_names"


NAME_TYPES: tuple[type, ...] = (Body, Bodies, ContactBodies)


PARAM_TYPES: tuple[type, ...] = (float, int, bool, str, np.ndarray, *NAME_TYPES)
OBSERVATION_ARGS = ("out", "col")

# Compile options of terms and of the fused kernel they are inlined into. Fast-math flags:
# reassociation (vectorized reductions), contraction (FMA), approximate functions; never
# nnan/ninf, so a term's NaN checks keep working. NumPy's error model: x / 0 gives inf or nan
# instead of a zero check and raise before every division.
FASTMATH = frozenset({"reassoc", "contract", "arcp", "nsz", "afn"})
ERROR_MODEL = "numpy"

# A shape or size may depend on the env's state layout (per-env shapes; task arrays whole) and
# the term's parameters.
ShapeRule = Callable[[Mapping[str, tuple[int, ...]], Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Param:
    name: str
    type: type
    default: Any = inspect.Parameter.empty
    range: Range | None = None  # numbers only: the values accepted

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty


@dataclass(frozen=True, eq=False)  # identity: one registered object per term
class Term:
    """A registered term: the Python function, its Numba dispatcher and its signature split."""

    name: str
    kind: TermKind
    py_func: Callable
    inputs: tuple[str, ...]
    params: tuple[Param, ...]
    outputs: Mapping[str, tuple[int, ...] | ShapeRule] = field(default_factory=dict)
    reset: Mapping[str, float] = field(default_factory=dict)  # persistent outputs: start values
    size: int | ShapeRule | None = None
    # observations: how the term's values change when the robot is mirrored left-right
    # (fuselab_env_core.symmetry.MIRRORS); None: not declared (no symmetric training)
    mirror: str | None = None
    numpy_impl: Callable | None = field(default=None, compare=False)
    jit: Any = field(default=None, compare=False, repr=False)

    @property
    def persistent(self) -> bool:
        """A preamble term whose outputs carry over from step to step (see :func:`preamble`)."""
        return bool(self.reset)

    @property
    def module(self) -> str:
        return self.py_func.__module__

    @property
    def qualname(self) -> str:
        return self.py_func.__qualname__

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def values(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every parameter's value: the given one, else its default."""
        return {p.name: given.get(p.name, p.default) for p in self.params}

    def numpy(self, fn: Callable) -> Callable:
        """Attach a vectorized NumPy twin (same arguments minus ``i``) used by the NumPy runtime.

        Rewards return (N,), terminations (N,) bool, observations (N, size); preamble twins
        write their workspace outputs in place. Twins are oracles for tests and debugging.
        """
        object.__setattr__(self, "numpy_impl", fn)
        return fn

    def __call__(self, *args):
        return self.jit(*args)


_REGISTRY: dict[str, Term] = {}


def registered_terms(kind: TermKind | None = None) -> dict[str, Term]:
    return {n: t for n, t in _REGISTRY.items() if kind is None or t.kind == kind}


def get_term(name: str) -> Term:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown term {name!r}{did_you_mean(name, _REGISTRY)}") from None


def did_you_mean(name: str, choices, cutoff: float = 0.6, list_known: bool = True) -> str:
    """``"; did you mean 'x'?"`` with the nearest of ``choices``, else ``"; known: ..."`` (or
    nothing, without ``list_known``): the one suggestion helper of every name lookup in fuselab
    (terms, config keys, bodies, tasks, overrides)."""
    choices = [str(c) for c in choices]
    close = difflib.get_close_matches(str(name), choices, n=3, cutoff=cutoff)
    if close:
        return f"; did you mean {' or '.join(repr(c) for c in close)}?"
    if not list_known:
        return ""
    return f"; known: {', '.join(sorted(choices)) or '(none)'}"


def _split_signature(fn: Callable, kind: TermKind) -> tuple[tuple[str, ...], tuple[Param, ...]]:
    where = f"term {fn.__name__!r}"
    signature = inspect.signature(fn)
    names = list(signature.parameters)
    if not names or names[0] != "i":
        raise TypeError(f"{where}: the first argument must be the env index 'i', got {names[:1]}")
    inputs: list[str] = []
    params: list[Param] = []
    for p in list(signature.parameters.values())[1:]:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise TypeError(f"{where}: argument {p.name!r} must be a plain positional argument")
        annotation = _resolve_annotation(fn, p.annotation)
        annotation, accepted = _range_of(where, p.name, annotation)
        if annotation is inspect.Parameter.empty:
            inputs.append(p.name)
        elif annotation in PARAM_TYPES:
            params.append(Param(p.name, annotation, p.default, accepted))
        else:
            raise TypeError(
                f"{where}: parameter {p.name!r} is annotated {annotation!r}; accepted: "
                "float, int, bool, str, np.ndarray, Body, Bodies, ContactBodies "
                "(leave inputs unannotated)"
            )
    if kind == "observation" and tuple(inputs[:2]) != OBSERVATION_ARGS:
        raise TypeError(f"{where}: an observation term takes (i, out, col, ...), got {names[:3]}")
    return tuple(inputs), tuple(params)


def _range_of(where: str, name: str, annotation: Any) -> tuple[Any, Range | None]:
    """(the base type, its Range) of ``Annotated[float, Range(...)]``; others pass through."""
    if typing.get_origin(annotation) is not Annotated:
        return annotation, None
    base, *extras = typing.get_args(annotation)
    ranges = [e for e in extras if isinstance(e, Range)]
    if base not in (float, int) or len(ranges) != 1:
        raise TypeError(
            f"{where}: parameter {name!r}: Annotated takes float or int and one Range, "
            f"got {annotation!r}"
        )
    return base, ranges[0]


def _resolve_annotation(fn: Callable, annotation: Any) -> Any:
    """Annotations may be strings under ``from __future__ import annotations``."""
    if isinstance(annotation, str):
        namespace = {
            "float": float,
            "int": int,
            "bool": bool,
            "str": str,
            "np": np,
            "Annotated": Annotated,
            "Range": Range,
            **{t.__name__: t for t in NAME_TYPES},
            **fn.__globals__,
        }
        return eval(annotation, namespace)  # noqa: S307 - annotations of our own term modules
    return annotation


def _register(kind: TermKind, name: str | None, **extra) -> Callable[[Callable], Term]:
    def decorate(fn: Callable) -> Term:
        inputs, params = _split_signature(fn, kind)
        term = Term(
            name=name or fn.__name__,
            kind=kind,
            py_func=fn,
            inputs=inputs,
            params=params,
            jit=numba.njit(fn, fastmath=set(FASTMATH), error_model=ERROR_MODEL, inline="always"),
            **extra,
        )
        previous = _REGISTRY.get(term.name)
        if previous is not None and (previous.module, previous.qualname) != (
            term.module,
            term.qualname,
        ):
            raise ValueError(
                f"term name {term.name!r} is already registered by "
                f"{previous.module}.{previous.qualname}"
            )
        _REGISTRY[term.name] = term
        return term

    return decorate


def reward(name: str | None = None) -> Callable[[Callable], Term]:
    """Register a reward term: returns a float; the kernel adds value * weight * dt."""
    return _register("reward", name)


def termination(name: str | None = None) -> Callable[[Callable], Term]:
    """Register a termination term: returns True where the episode ends."""
    return _register("termination", name)


def observation(
    size: int | ShapeRule, name: str | None = None, mirror: str | None = None
) -> Callable[[Callable], Term]:
    """Register an observation term writing ``size`` values at ``out[i, col:]``; ``mirror``
    says how they change when the robot is mirrored left-right (see
    :mod:`fuselab_env_core.symmetry`)."""
    return _register("observation", name, size=size, mirror=mirror)


def preamble(
    outputs: Mapping[str, tuple[int, ...] | ShapeRule],
    name: str | None = None,
    reset: Mapping[str, float] | None = None,
) -> Callable[[Callable], Term]:
    """Register a preamble term writing the per-env workspace fields named in ``outputs``.

    Each output is also an argument of the term (by name), like any other input. A term whose
    outputs persist from step to step (timers, filters) gives every output's value at the start
    of an episode in ``reset``: the env writes it into the rows it resets, and the term runs
    only when a step is scored, never when observations are refreshed. A term without ``reset``
    is a pure function of the state: it runs again wherever its outputs are read.
    """
    reset = dict(reset or {})
    if reset and set(reset) != set(outputs):
        raise TypeError(
            f"preamble {name or '?'}: reset names {sorted(reset)}, expected a start value for "
            f"every output {sorted(outputs)}"
        )
    return _register("preamble", name, outputs=dict(outputs), reset=reset)
