"""What both G1 tasks take from the robot: per-joint arrays in the model's joint order, and the
task config's ``robot_arrays`` filled with them (YAML cannot hold a model's per-joint arrays)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fuselab_env_core.backend import ModelFacts
from fuselab_envs.g1 import DEFAULT_JOINT_POS

SOFT_LIMIT_FRACTION = 0.9  # joint_pos_limits penalizes the outer 10% of each range


def joint_array(values: Mapping[str, float], facts: ModelFacts) -> np.ndarray:
    """float32 ``values[name]`` of every joint of the model, in its joint order."""
    return np.array([values[name] for name in facts.joint_names], np.float32)


def g1_robot_arrays(facts: ModelFacts) -> dict[str, np.ndarray]:
    """The arrays G1 terms ask for: soft joint limits and the default joint pose."""
    return {
        **soft_joint_limits(facts.joint_ranges),
        "default_joint_pos": joint_array(DEFAULT_JOINT_POS, facts),
    }


def soft_joint_limits(joint_ranges: np.ndarray) -> dict[str, np.ndarray]:
    """``lower`` and ``upper``: the middle SOFT_LIMIT_FRACTION of each joint's range."""
    low, high = joint_ranges[:, 0], joint_ranges[:, 1]
    middle, half = (low + high) / 2, (high - low) / 2 * SOFT_LIMIT_FRACTION
    return {
        "lower": (middle - half).astype(np.float32),
        "upper": (middle + half).astype(np.float32),
    }


def with_robot_arrays(terms: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> dict:
    """A copy of ``terms`` whose entries get the robot's arrays for the parameters they name
    in ``robot_arrays: [name, ...]`` (YAML cannot hold per-joint arrays of a model)."""
    filled = {}
    for section, entries in terms.items():
        if section == "observations":
            filled[section] = {
                group: {
                    **spec,
                    "terms": _fill(f"observations.{group}", spec.get("terms", {}), arrays),
                }
                for group, spec in entries.items()
            }
        else:
            filled[section] = _fill(section, entries, arrays)
    return filled


def _fill(where: str, entries: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> dict:
    filled = {}
    for name, spec in entries.items():
        spec = dict(spec or {})
        wanted = spec.pop("robot_arrays", [])
        params = dict(spec.get("params") or {})
        for array in wanted:
            if array not in arrays:
                raise KeyError(
                    f"{where}.{name}.robot_arrays: unknown robot array {array!r}; "
                    f"the robot provides: {', '.join(sorted(arrays))}"
                )
            params[array] = arrays[array]
        filled[name] = {**spec, "params": params}
    return filled
