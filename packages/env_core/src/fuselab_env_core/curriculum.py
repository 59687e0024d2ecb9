"""Curricula: task settings that follow the policy's progress (mjlab's and Isaac Lab's
curriculum terms), e.g. command ranges that widen as the commands are followed.

A task's ``curriculum:`` table names them::

    curriculum:
      walk_speeds: {term: velocity_command_levels, params: {reward: track_lin_vel}}

A curriculum is a :class:`Curriculum` subclass registered with :func:`curriculum`; its keyword
constructor parameters (after the :class:`CurriculumContext`) are checked like any configured
value, and one of them is ``start``, the level it begins at (a resumed run's is its
checkpoint's). It is built with the task's command generators, which it may change (their
ranges, from their next draw), bound to the env once the terms are built
(:meth:`Curriculum.bind`: names resolved once) and called once a step after scoring, before the
commands advance (:meth:`Curriculum.advance`). Its ``level`` (in [0, 1]; 1: the task as
configured) is in every step's ``info["curriculum"]``; a trainer logs it, and a resumed run goes
on from it. Evaluations and rollouts of a trained policy build the task without its curriculum.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from fuselab_env_core.commands import Command
from fuselab_env_core.registry import Registry, Signature

if TYPE_CHECKING:
    from fuselab_env_core.env import FusedEnv


@dataclass(frozen=True)
class CurriculumContext:
    """What every curriculum is built with: where it is configured, the env's rate and the
    task's command generators."""

    where: str  # its config key (``curriculum.walk_speeds.params``), for errors
    step_dt: float
    commands: Mapping[str, Command]


class Curriculum:
    """A curriculum (see the module docstring)."""

    level: float = 1.0

    def bind(self, env: FusedEnv) -> None:
        """Resolve what it reads of the env (a reward's column), once, before the first step."""

    def advance(self, env: FusedEnv) -> None:
        """After a step is scored (``env.reward_means`` holds its reward terms' means), before
        the commands advance."""


CURRICULA: Registry[type[Curriculum]] = Registry("curriculum")

CurriculumType = TypeVar("CurriculumType", bound="type[Curriculum]")


def curriculum(name: str) -> Callable[[CurriculumType], CurriculumType]:
    """Register a :class:`Curriculum` subclass under ``name`` (the class is returned as it is)."""

    def decorate(cls: CurriculumType) -> CurriculumType:
        if "start" not in inspect.signature(cls.__init__).parameters:
            raise TypeError(f"curriculum {name!r}: its constructor must take start (a level)")
        CURRICULA.register(name, cls)
        return cls

    return decorate


def build_curricula(
    table: Mapping[str, Any] | None, context: CurriculumContext
) -> dict[str, Curriculum]:
    """The task's curricula from its ``curriculum`` table, each checked; an entry set to null
    is off."""
    curricula: dict[str, Curriculum] = {}
    for name, spec in (table or {}).items():
        if spec is None:
            continue
        cls, params = bind_curriculum(name, spec)
        curricula[name] = cls(replace(context, where=f"curriculum.{name}.params"), **params)
    return curricula


def bind_curriculum(name: str, spec: Any) -> tuple[type[Curriculum], dict[str, Any]]:
    """Entry ``name`` of the table checked: its keys, its registered class and parameters."""
    where = f"curriculum.{name}"
    if not isinstance(spec, Mapping) or set(spec) - {"term", "params"}:
        raise ValueError(f"{where}: expected {{term: ..., params: {{...}}}}, got {spec!r}")
    cls = CURRICULA.get(spec.get("term") or name, f"{where}.term")
    return cls, Signature.of(cls.__init__, skip=2).bind(f"{where}.params", spec.get("params"), None)
