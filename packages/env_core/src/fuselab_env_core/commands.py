"""Commands: per-env targets a task's terms read by name (a velocity to walk at, a motion frame
to imitate), generated outside the kernel.

A task's ``commands:`` table names its generators::

    commands:
      velocity: {term: uniform_velocity, params: {resample_s: 4.0, lin_vel_x: [-1.0, 1.0]}}

A generator is a :class:`Command` subclass registered with :func:`command`; its keyword
constructor parameters (after the :class:`CommandContext`) are checked like any configured
value. It owns per-env state buffers (``state``: terms read them as inputs, e.g. ``command``)
and may hand the kernel task arrays (``arrays``: a clip's frames). The env calls it on new
episodes (:meth:`Command.reset`, with the reset state being built, which a reference-state
command overwrites) and once a step after scoring (:meth:`Command.advance`); both work on whole
arrays of env ids. What a generator reads of the env it resolves once (:meth:`Command.bind`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from fuselab_env_core.backend import ModelFacts
from fuselab_env_core.registry import Registry, Signature

if TYPE_CHECKING:
    from fuselab_env_core.env import FusedEnv


@dataclass(frozen=True)
class CommandContext:
    """What every generator is built with: where it is configured, the env's size and rate."""

    where: str  # its config key (``commands.velocity.params``), for errors
    facts: ModelFacts
    num_envs: int
    step_dt: float
    init_qpos: np.ndarray  # (nq,) the robot's initial pose
    mjcf: Path | None = None  # the robot's model file (kinematics of a clip's lead frames)


class Command:
    """A command generator (see the module docstring)."""

    state: dict[str, np.ndarray]  # per-env buffers terms read by name
    arrays: dict[str, np.ndarray] = {}  # task arrays terms read by name

    def bind(self, env: FusedEnv) -> None:
        """Resolve what it reads of the env (another command's buffers), once, before the first
        reset."""

    def reset(self, env: FusedEnv, env_ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray):
        """New episodes in ``env_ids``; ``qpos``/``qvel`` are their reset state, not yet written
        (after the reset events): a generator may read or overwrite it."""

    def advance(self, env: FusedEnv) -> None:
        """After a step is scored, before resets: advance the targets (``env.terminated`` and
        ``env.truncated`` hold the step's outcome; a generator may truncate rows)."""

    def describe(self) -> dict[str, Any]:
        """What a robot-side program needs to know of the command (ranges, layout)."""
        return {}


COMMANDS: Registry[type[Command]] = Registry("command")


CommandType = TypeVar("CommandType", bound="type[Command]")


def command(name: str) -> Callable[[CommandType], CommandType]:
    """Register a :class:`Command` subclass under ``name`` (the class is returned as it is)."""

    def decorate(cls: CommandType) -> CommandType:
        COMMANDS.register(name, cls)
        return cls

    return decorate


def build_commands(table: Mapping[str, Any] | None, context: CommandContext) -> dict[str, Command]:
    """The task's generators from its ``commands`` table, each checked; the state buffers and
    task arrays of different generators must not share a name."""
    commands: dict[str, Command] = {}
    owners: dict[str, str] = {}
    for name, spec in (table or {}).items():
        where = f"commands.{name}"
        if not isinstance(spec, Mapping) or set(spec) - {"term", "params"}:
            raise ValueError(f"{where}: expected {{term: ..., params: {{...}}}}, got {spec!r}")
        cls = COMMANDS.get(spec.get("term") or name, f"{where}.term")
        params = Signature.of(cls.__init__, skip=2).bind(
            f"{where}.params", spec.get("params"), context.facts
        )
        generator = cls(replace(context, where=f"{where}.params"), **params)
        for buffer in (*generator.state, *generator.arrays):
            if buffer in owners:
                raise ValueError(f"{where}: {buffer!r} is already commands.{owners[buffer]}'s")
            owners[buffer] = name
        commands[name] = generator
    return commands
