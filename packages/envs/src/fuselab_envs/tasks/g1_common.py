"""What both G1 tasks take from the robot: per-joint task arrays in the model's joint order."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fuselab_env_core.backend import ModelFacts
from fuselab_env_core.terms import did_you_mean
from fuselab_envs.g1 import DEFAULT_JOINT_POS, JOINT_NAMES

SOFT_LIMIT_FRACTION = 0.9  # joint_pos_limits penalizes the outer 10% of each range


def check_g1_robot(facts: ModelFacts, task: str) -> None:
    """A model for a G1 task (``robot.mjcf``) must have the G1's joints, by name and in any
    order, and one position actuator per joint in joint order, named as its joint without
    ``_joint`` (the embedded model's convention): what breaks the rule is named."""
    missing = [name for name in JOINT_NAMES if name not in facts.joint_names]
    if missing:
        unknown = [name for name in facts.joint_names if name not in JOINT_NAMES]
        raise ValueError(
            f"robot: {task} needs the G1's joints by name; the model has no joint "
            f"{missing[0]!r}{did_you_mean(missing[0], unknown, list_known=False)} "
            f"({len(missing)} of {len(JOINT_NAMES)} missing: {missing})"
        )
    actuators = facts.actuator_names
    for k, joint in enumerate(facts.joint_names):
        expected = joint.removesuffix("_joint")
        found = actuators[k] if k < len(actuators) else None
        if found != expected:
            raise ValueError(
                f"robot: {task} drives joint k with actuator k, named as the joint without "
                f"'_joint'; joint {k} is {joint!r}, so actuator {k} must be {expected!r}, "
                f"found {found!r} (actuators: {list(actuators)})"
            )
    if len(actuators) != len(facts.joint_names):
        raise ValueError(
            f"robot: {task} expects {len(facts.joint_names)} actuators (one per joint), the "
            f"model has {len(actuators)}: {list(actuators)}"
        )


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
