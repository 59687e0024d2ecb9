"""What both G1 tasks take from the robot: per-joint task arrays in the model's joint order."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fuselab_env_core.backend import ModelFacts
from fuselab_envs.g1 import DEFAULT_JOINT_POS

SOFT_LIMIT_FRACTION = 0.9  # joint_pos_limits penalizes the outer 10% of each range


def joint_array(values: Mapping[str, float], facts: ModelFacts) -> np.ndarray:
    """float32 ``values[name]`` of every joint of the model, in its joint order."""
    return np.array([values[name] for name in facts.joint_names], np.float32)


def g1_task_arrays(facts: ModelFacts) -> dict[str, np.ndarray]:
    """The task arrays G1 terms read by name: the default joint pose and the soft joint limits
    (the middle SOFT_LIMIT_FRACTION of each joint's range)."""
    low, high = facts.joint_ranges[:, 0], facts.joint_ranges[:, 1]
    middle, half = (low + high) / 2, (high - low) / 2 * SOFT_LIMIT_FRACTION
    return {
        "default_joint_pos": joint_array(DEFAULT_JOINT_POS, facts),
        "soft_joint_pos_lower": (middle - half).astype(np.float32),
        "soft_joint_pos_upper": (middle + half).astype(np.float32),
    }
