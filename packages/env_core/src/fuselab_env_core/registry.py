"""What a task's configuration names outside the kernel: events, commands and action mappings.

Each is registered under a name and configured, like a term, with keyword parameters that its
signature declares by annotation (types and ranges of :mod:`fuselab_env_core.ranges`). The
model's bodies, geoms, joints and actuators are named, never numbered: a parameter annotated
:class:`BodyNames`, :class:`GeomNames`, :class:`JointNames` or :class:`ActuatorNames` takes
names or full-match regular expressions (``".*_ankle_roll_link"``) and reaches the function as
the int64 ids of the matches, in the model's order, resolved once when the task is built.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from fuselab_env_core.backend import ModelFacts
from fuselab_env_core.ranges import check_value
from fuselab_env_core.terms import did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    """Names -> registered objects of one kind; an unknown name lists the nearest ones."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        previous = self._items.get(name)
        if previous is not None and previous is not item and _origin(previous) != _origin(item):
            raise ValueError(f"{self.kind} {name!r} is already registered by {_origin(previous)}")
        self._items[name] = item
        return item

    def get(self, name: str, where: str) -> T:
        if name not in self._items:
            raise KeyError(
                f"{where}: unknown {self.kind} {name!r}{did_you_mean(name, self._items)}"
            )
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)


class ModelNames(tuple):
    """A parameter naming elements of the model: a name or pattern, or a list of them."""

    table: str  # the ModelFacts field the names resolve against
    noun: str


class BodyNames(ModelNames):
    table, noun = "body_names", "bodies"


class GeomNames(ModelNames):
    table, noun = "geom_names", "geoms"


class JointNames(ModelNames):
    table, noun = "joint_names", "joints"


class ActuatorNames(ModelNames):
    table, noun = "actuator_names", "actuators"


def resolve_names(where: str, patterns: Any, kind: type[ModelNames], facts: ModelFacts):
    """Ids (int64, model order) of the elements that ``patterns`` (a name or a list of names,
    each a full-match regular expression) match; a pattern that matches nothing is an error
    naming it and the model's names."""
    names = getattr(facts, kind.table)
    patterns = [patterns] if isinstance(patterns, str) else list(patterns or [])
    if not patterns or not all(isinstance(p, str) for p in patterns):
        raise ValueError(f"{where}: expected a name or a list of names, got {patterns!r}")
    matched = np.zeros(len(names), np.bool_)
    for pattern in patterns:
        try:
            rule = re.compile(pattern)
        except re.error as error:
            raise ValueError(f"{where}: {pattern!r} is not a regular expression: {error}") from None
        hits = [k for k, name in enumerate(names) if rule.fullmatch(name)]
        if not hits:
            hint = did_you_mean(pattern, names, list_known=False)
            raise KeyError(
                f"{where}: {pattern!r} matches none of the model's {kind.noun}{hint} "
                f"(the model's {kind.noun}: {', '.join(names)})"
            )
        matched[hits] = True
    return np.flatnonzero(matched).astype(np.int64)


@dataclass(frozen=True)
class Signature:
    """A registered function's or class's keyword parameters: name -> (annotation, default)."""

    owner: str
    params: Mapping[str, tuple[Any, Any]]

    @classmethod
    def of(cls, fn: Callable, skip: int) -> Signature:
        """The annotated parameters of ``fn`` after its first ``skip`` arguments (annotations
        written as strings are evaluated in ``fn``'s module)."""
        params = {}
        for p in list(inspect.signature(fn).parameters.values())[skip:]:
            annotation = p.annotation
            if annotation is inspect.Parameter.empty:
                raise TypeError(f"{fn.__qualname__}: parameter {p.name!r} needs an annotation")
            if isinstance(annotation, str):
                annotation = eval(annotation, fn.__globals__)  # noqa: S307 - our own modules
            params[p.name] = (annotation, p.default)
        return cls(fn.__qualname__, params)

    def bind(self, where: str, given: Mapping[str, Any] | None, facts: ModelFacts | None) -> dict:
        """``given`` checked and completed with defaults: an unknown or missing key, a value
        out of its range or a name the model lacks is an error naming ``where.key``. Without
        ``facts`` (a check before the model is loaded) names stay names."""
        given = dict(given or {})
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            hint = did_you_mean(unknown[0], self.params)
            raise ValueError(f"{where}: unknown parameter {unknown[0]!r}{hint}")
        bound = {}
        for name, (annotation, default) in self.params.items():
            key = f"{where}.{name}"
            if name not in given and default is inspect.Parameter.empty:
                raise ValueError(f"{key}: required, not given")
            value = given.get(name, default)
            if isinstance(annotation, type) and issubclass(annotation, ModelNames):
                bound[name] = (
                    check_value(key, [value] if isinstance(value, str) else value, tuple[str, ...])
                    if facts is None
                    else resolve_names(key, value, annotation, facts)
                )
            else:
                bound[name] = check_value(key, value, annotation)
        return bound


def _origin(item: Any) -> str:
    return (
        f"{getattr(item, '__module__', '?')}.{getattr(item, '__qualname__', type(item).__name__)}"
    )


def joint_values(
    where: str, value: Any, joints: list[str], robot: Mapping[str, float] | None
) -> np.ndarray:
    """float32 per joint of ``joints`` from a number, ``robot`` (the robot's own values by
    joint name) or ``{pattern: number}`` (each joint matched by exactly one pattern)."""
    if value == "robot":
        if robot is None:
            raise ValueError(f"{where}: 'robot', but this robot has no per-joint values")
        value = {name: robot[name] for name in joints}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return np.full(len(joints), value, np.float32)
    if not isinstance(value, Mapping):
        raise ValueError(
            f"{where}: expected a number, 'robot' or {{joint pattern: number}}, got {value!r}"
        )
    out = np.zeros(len(joints), np.float32)
    for k, joint in enumerate(joints):
        hits = [p for p in value if re.fullmatch(str(p), joint)]
        if len(hits) != 1:
            what = "no pattern" if not hits else f"patterns {hits}"
            raise ValueError(
                f"{where}: joint {joint!r} is matched by {what}; expected exactly one"
                f"{did_you_mean(joint, value, list_known=False)}"
            )
        number = value[hits[0]]
        if (
            isinstance(number, bool)
            or not isinstance(number, (int, float))
            or not math.isfinite(number)
        ):
            raise ValueError(f"{where}.{hits[0]}: expected a finite number, got {number!r}")
        out[k] = number
    return out
