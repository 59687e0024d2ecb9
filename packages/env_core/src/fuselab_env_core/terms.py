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
* a *parameter*, marked by a type annotation (``float``, ``int``, ``bool``, ``str`` or
  ``np.ndarray``) and set from configuration, with the Python default as its default.

Kinds: a reward returns a float, a termination returns a bool, an observation writes ``size``
values into ``out[i, col:col + size]`` (``out`` and ``col`` are supplied by the plan), and a
preamble term writes shared quantities into the workspace fields it declares as ``outputs``.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numba
import numpy as np

TermKind = Literal["preamble", "reward", "termination", "observation"]
PARAM_TYPES: tuple[type, ...] = (float, int, bool, str, np.ndarray)
OBSERVATION_ARGS = ("out", "col")

# Compile options of terms and of the fused kernel they are inlined into. Fast-math flags:
# reassociation (vectorized reductions), contraction (FMA), approximate functions; never
# nnan/ninf, so a term's NaN checks keep working. NumPy's error model: x / 0 gives inf or nan
# instead of a zero check and raise before every division.
FASTMATH = frozenset({"reassoc", "contract", "arcp", "nsz", "afn"})
ERROR_MODEL = "numpy"

# A shape or size may depend on the env's state layout and the term's parameters.
ShapeRule = Callable[[Mapping[str, tuple[int, ...]], Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Param:
    name: str
    type: type
    default: Any = inspect.Parameter.empty

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
    size: int | ShapeRule | None = None
    numpy_impl: Callable | None = field(default=None, compare=False)
    jit: Any = field(default=None, compare=False, repr=False)

    @property
    def module(self) -> str:
        return self.py_func.__module__

    @property
    def qualname(self) -> str:
        return self.py_func.__qualname__

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

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


def did_you_mean(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)
    if close:
        return f"; did you mean {' or '.join(repr(c) for c in close)}?"
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
        if annotation is inspect.Parameter.empty:
            inputs.append(p.name)
        elif annotation in PARAM_TYPES:
            params.append(Param(p.name, annotation, p.default))
        else:
            raise TypeError(
                f"{where}: parameter {p.name!r} is annotated {annotation!r}; accepted: "
                "float, int, bool, str, np.ndarray (leave inputs unannotated)"
            )
    if kind == "observation" and tuple(inputs[:2]) != OBSERVATION_ARGS:
        raise TypeError(f"{where}: an observation term takes (i, out, col, ...), got {names[:3]}")
    return tuple(inputs), tuple(params)


def _resolve_annotation(fn: Callable, annotation: Any) -> Any:
    """Annotations may be strings under ``from __future__ import annotations``."""
    if isinstance(annotation, str):
        namespace = {
            "float": float,
            "int": int,
            "bool": bool,
            "str": str,
            "np": np,
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


def observation(size: int | ShapeRule, name: str | None = None) -> Callable[[Callable], Term]:
    """Register an observation term writing ``size`` values at ``out[i, col:]``."""
    return _register("observation", name, size=size)


def preamble(
    outputs: Mapping[str, tuple[int, ...] | ShapeRule], name: str | None = None
) -> Callable[[Callable], Term]:
    """Register a preamble term writing the per-env workspace fields named in ``outputs``.

    Each output is also an argument of the term (by name), like any other input.
    """
    return _register("preamble", name, outputs=dict(outputs))
