"""The values a configured number accepts, declared in its type annotation and checked with the
full key it came from.

Term parameters declare ranges in their signatures (see :mod:`fuselab_env_core.terms`); a task's
config sections are :class:`Section` dataclasses whose fields do the same, checked when one is
built (from a config or in Python; a field assigned later is not checked again)::

    @dataclass
    class CommandCfg(Section):
        KEY = "commands"
        resample_s: PositiveFloat = 4.0
        standing_fraction: Fraction = 0.1
        lin_vel_x: Interval = (-1.0, 1.0)

    CommandCfg(standing_fraction=2)  # or build_section(CommandCfg, {"standing_fraction": 2})
    # ValueError: commands.standing_fraction: expected >= 0 and <= 1, got 2

A new field gets its check by declaring its type; nothing else lists what is accepted. The
registry builds a task's sections from the config before it builds anything else.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import numpy as np


@dataclass(frozen=True)
class Range:
    """The values a number accepts: bounds ``gt`` / ``ge`` below, ``lt`` / ``le`` above (None:
    unbounded)."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def accepts(self, value: float) -> bool:
        return not (
            (self.gt is not None and not value > self.gt)
            or (self.ge is not None and not value >= self.ge)
            or (self.lt is not None and not value < self.lt)
            or (self.le is not None and not value <= self.le)
        )

    def describe(self) -> str:
        bounds = ((">", self.gt), (">=", self.ge), ("<", self.lt), ("<=", self.le))
        return " and ".join(f"{op} {b:g}" for op, b in bounds if b is not None) or "any value"


PositiveFloat = Annotated[float, Range(gt=0.0)]  # a std, a scale, a duration
NonNegativeFloat = Annotated[float, Range(ge=0.0)]  # a threshold, a limit, a margin
Fraction = Annotated[float, Range(ge=0.0, le=1.0)]  # a probability, a share
PositiveInt = Annotated[int, Range(ge=1)]  # a count, a number of steps
Interval = tuple[float, float]  # a sampling range [low, high]: low <= high
ScaleInterval = Annotated[Interval, Range(gt=0.0)]  # a range of factors on a physical value
NonNegativeInterval = Annotated[Interval, Range(ge=0.0)]  # a range of durations
StepInterval = Annotated[tuple[int, int], Range(ge=0)]  # a range of control steps (a delay)
LayerSizes = tuple[PositiveInt, ...]  # a network's hidden widths: a non-empty list


class Section:
    """Base of a config section's dataclass: once built, each field is checked against its
    declared type and converted (:func:`check_section`), errors naming ``KEY.field``."""

    KEY: ClassVar[str]  # the section's key in the config (``commands``, ``algo``, ...)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(getattr(cls, "KEY", None), str):
            raise TypeError(f"{cls.__name__}: a Section names its config key (KEY = '...')")

    def __post_init__(self) -> None:
        check_section(self, self.KEY)


AnySection = TypeVar("AnySection", bound=Section)


def build_section(cls: type[AnySection], values: Mapping[str, Any]) -> AnySection:
    """``cls(**values)``; a name that is not a field is a ValueError naming it and the accepted
    ones (a value out of its range, the field's, from the section's own check)."""
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ValueError(f"{cls.KEY}: unknown keys {unknown}; accepted: {sorted(fields)}")
    return cls(**values)


def check_section(section: Any, key: str) -> None:
    """Check each field of ``section`` (a dataclass) against its type (:func:`check_value`, the
    field's key is ``key.field``) and convert it in place."""
    hints = typing.get_type_hints(type(section), include_extras=True)
    for f in dataclasses.fields(section):  # type: ignore[arg-type]
        value = check_value(f"{key}.{f.name}", getattr(section, f.name), hints[f.name])
        setattr(section, f.name, value)


def check_value(key: str, value: Any, annotation: Any) -> Any:
    """``value`` as its annotation's type (a list becomes a tuple, an int a float) if it is one
    and lies in its range; else a ValueError naming ``key``, the value and what is accepted."""
    converted, accepted = _convert(value, annotation)
    if accepted is not None:
        raise ValueError(f"{key}: expected {accepted}, got {value!r}")
    return converted


def _convert(value: Any, annotation: Any) -> tuple[Any, str | None]:
    """(the value converted, None) if ``annotation`` accepts it, else (None, what it accepts)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):  # X | Y | None: the first arm that accepts
        arms = typing.get_args(annotation)
        if value is None and type(None) in arms:
            return None, None
        refusals = []
        for arm in (a for a in arms if a is not type(None)):
            converted, accepted = _convert(value, arm)
            if accepted is None:
                return converted, None
            refusals.append(accepted)
        return None, " or ".join(refusals + ["null"] * (type(None) in arms))
    if origin is Literal:
        choices = typing.get_args(annotation)
        return (value, None) if value in choices else (None, f"one of {', '.join(choices)}")
    base, rule = annotation, None
    if origin is Annotated:
        base, rule = typing.get_args(annotation)[:2]
    if typing.get_origin(base) is tuple:
        element = typing.get_args(base)
        if len(element) == 2 and element[1] is Ellipsis:  # tuple[X, ...]: a list of X
            return _sequence(value, element[0])
        integers = element == (int, int)
        if (
            _is_pair(value)
            and (not integers or all(float(v).is_integer() for v in value))
            and (not isinstance(rule, Range) or (rule.accepts(value[0]) and rule.accepts(value[1])))
        ):
            kind = int if integers else float
            return (kind(value[0]), kind(value[1])), None
        bound = f", each {rule.describe()}" if isinstance(rule, Range) else ""
        noun = "ints" if integers else "numbers"
        return None, f"[low, high], {noun} with low <= high{bound}"
    if base is float and _is_number(value) and math.isfinite(value):
        value = float(value)
    elif base is int and _is_number(value) and float(value).is_integer():
        value = int(value)
    elif base in (float, int):
        noun = "a finite number" if base is float else "an int"
        return None, f"{noun} {rule.describe()}" if isinstance(rule, Range) else noun
    elif base in (bool, str) and not isinstance(value, base):
        return None, f"a {base.__name__}"
    if isinstance(rule, Range) and not rule.accepts(value):
        return None, rule.describe()
    return value, None


def _sequence(value: Any, element: Any) -> tuple[Any, str | None]:
    """A non-empty list of ``element`` values, converted, as a tuple."""
    converted = []
    for item in value if isinstance(value, (list, tuple)) and value else [None]:
        item, accepted = _convert(item, element)
        if accepted is not None:
            return None, f"a non-empty list, each {accepted}"
        converted.append(item)
    return tuple(converted), None


def _is_pair(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(_is_number(v) and math.isfinite(v) for v in value)
        and value[0] <= value[1]
    )


def _is_number(value: Any) -> bool:
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.number))
