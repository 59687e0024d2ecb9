"""Configuration of a task's terms: explicit dataclasses that read like a table.

Each section maps an entry name to a term config; ``term`` defaults to the entry name. The
same structure can be given as plain dicts (e.g. composed by Hydra) via
:meth:`TaskTermsCfg.from_dict`, which rejects unknown keys with the nearest valid ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from fuselab_env_core.terms import did_you_mean


@dataclass
class TermCfg:
    term: str | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class RewardCfg(TermCfg):
    weight: float = 1.0


@dataclass
class TerminationCfg(TermCfg):
    time_out: bool = False
    """A time-out is a truncation (bootstrap the value), not a failure."""


@dataclass
class ObservationCfg(TermCfg):
    noise_std: float = 0.0
    """Std of the uniform noise the kernel adds to this term in a noisy group (a runtime slot).
    Only terms with noise_std > 0 are noisy: which terms are noisy is in the plan key."""
    history: int | None = None
    """Frames of this term the policy sees, oldest first (None: the group's, else 1)."""
    delay: int | None = None
    """Control steps by which those frames are late (None: the group's, else 0)."""


@dataclass
class ObservationGroupCfg:
    terms: dict[str, ObservationCfg] = field(default_factory=dict)
    noise: bool = False
    """In a noisy group the kernel adds noise to each term with noise_std > 0 (fuselab_env_core
    .noise: one draw per env step, a pure function of the env's seed, the step, row and column)."""
    history: int | None = None
    """Frames of every term that does not set its own (term-major: each term's frames side by
    side, oldest first; a new episode's frames all hold its first observation)."""
    delay: int | None = None
    """Control steps every term that does not set its own is late by."""


@dataclass
class TaskTermsCfg:
    preamble: dict[str, TermCfg] = field(default_factory=dict)
    rewards: dict[str, RewardCfg] = field(default_factory=dict)
    terminations: dict[str, TerminationCfg] = field(default_factory=dict)
    observations: dict[str, ObservationGroupCfg] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskTermsCfg:
        _check_keys("terms", data, cls)
        return cls(
            preamble=_entries("preamble", data.get("preamble"), TermCfg),
            rewards=_entries("rewards", data.get("rewards"), RewardCfg),
            terminations=_entries("terminations", data.get("terminations"), TerminationCfg),
            observations={
                group: _group(f"observations.{group}", spec)
                for group, spec in (data.get("observations") or {}).items()
            },
        )


def _check_keys(where: str, data: Any, cls: type) -> None:
    if not isinstance(data, Mapping):
        raise TypeError(f"{where}: expected a mapping, got {type(data).__name__}")
    accepted = [f.name for f in fields(cls)]
    for key in data:
        if key not in accepted:
            raise KeyError(f"{where}: unknown key {key!r}{did_you_mean(str(key), accepted)}")


def _entries(section: str, data: Mapping[str, Any] | None, cls: type) -> dict:
    entries = {}
    for name, spec in (data or {}).items():
        if spec is None:  # an entry set to null is off (a variant removing a term)
            continue
        _check_keys(f"{section}.{name}", spec, cls)
        entries[name] = cls(**{**spec, "params": dict(spec.get("params") or {})})
    return entries


def _group(where: str, spec: Mapping[str, Any]) -> ObservationGroupCfg:
    _check_keys(where, spec, ObservationGroupCfg)
    return ObservationGroupCfg(
        terms=_entries(f"{where}.terms", spec.get("terms"), ObservationCfg),
        noise=bool(spec.get("noise", False)),
        history=spec.get("history"),
        delay=spec.get("delay"),
    )
