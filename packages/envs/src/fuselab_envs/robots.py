"""The robots tasks run on: each one's embedded model, initial pose and per-joint facts.

A task names its robot (``robot.name: g1``) and may swap the model for the user's own
(``robot.mjcf=PATH``): the robot's ``check`` then says what the model must have (the G1's joints
by name, an actuator per joint). A new task on a known robot needs no Python; a new robot is a
line here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fuselab_env_core.backend import ModelFacts
from fuselab_env_core.registry import Registry
from fuselab_env_core.symmetry import Mirror, joint_mirror_by_name
from fuselab_env_core.terms import did_you_mean

SOFT_LIMIT_FRACTION = 0.9  # joint_pos_limits penalizes the outer 10% of each range


@dataclass(frozen=True)
class Robot:
    model: Callable[[], Path]  # the embedded MJCF
    base_pos: tuple[float, float, float] | None  # the floating base's start (None: fixed base)
    joint_pos: Mapping[str, float] = field(default_factory=dict)  # initial pose by name; else 0
    # The robot's own per-joint action scale (``actions...scale: robot``), by joint name.
    action_scale: Mapping[str, float] | None = None
    check: Callable[[ModelFacts, str], None] | None = None  # (facts, task) -> raises
    # (joint names) -> the left-right joint mirror (permutation, sign); None: no symmetry
    mirror: Callable[[tuple[str, ...]], Mirror] | None = None

    def init_qpos(self, facts: ModelFacts) -> np.ndarray:
        """(nq,) float32: the base at ``base_pos``, upright, and the joints at ``joint_pos``."""
        qpos = np.zeros(facts.nq, np.float32)
        if self.base_pos is not None:
            qpos[0:3] = self.base_pos
            qpos[3] = 1.0
        for k, name in enumerate(facts.joint_names):
            qpos[facts.joint_qpos_adr[k]] = self.joint_pos.get(name, 0.0)
        return qpos


def joint_task_arrays(facts: ModelFacts, init_qpos: np.ndarray) -> dict[str, np.ndarray]:
    """The per-joint task arrays every task has: the initial (default) joint pose and the soft
    joint limits (the middle SOFT_LIMIT_FRACTION of each joint's range)."""
    low, high = facts.joint_ranges[:, 0], facts.joint_ranges[:, 1]
    limited = np.isfinite(low) & np.isfinite(high)  # an unlimited joint's soft limits: +-inf
    low, high = np.where(limited, low, 0.0), np.where(limited, high, 0.0)  # (no inf - inf)
    middle = (low + high) / 2
    half = np.where(limited, (high - low) / 2 * SOFT_LIMIT_FRACTION, np.inf)
    return {
        "default_joint_pos": init_qpos[facts.joint_qpos_adr].astype(np.float32),
        "soft_joint_pos_lower": (middle - half).astype(np.float32),
        "soft_joint_pos_upper": (middle + half).astype(np.float32),
    }


def check_g1_robot(facts: ModelFacts, task: str) -> None:
    """A model for a G1 task (``robot.mjcf``) must have the G1's joints, by name and in any
    order, and one position actuator per joint in joint order, named as its joint without
    ``_joint`` (the embedded model's convention): what breaks the rule is named."""
    from fuselab_envs.g1 import JOINT_NAMES

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


def check_cartpole(facts: ModelFacts, task: str) -> None:
    if facts.joint_names != ("slider", "hinge") or facts.nu != 1:
        raise ValueError(
            f"robot: {task} expects the joints ('slider', 'hinge') and one actuator, got "
            f"joints {facts.joint_names} and {facts.nu} actuators"
        )


def _g1_model() -> Path:
    from fuselab_envs.g1 import G1_XML_PATH

    return G1_XML_PATH


def _cartpole_model() -> Path:
    from fuselab_envs.cartpole import CARTPOLE_XML_PATH

    return CARTPOLE_XML_PATH


def _g1() -> Robot:
    from fuselab_envs.g1 import ACTION_SCALE, DEFAULT_JOINT_POS, STANDING_PELVIS_HEIGHT

    return Robot(
        _g1_model,
        base_pos=(0.0, 0.0, STANDING_PELVIS_HEIGHT),
        joint_pos=DEFAULT_JOINT_POS,
        action_scale=ACTION_SCALE,
        check=check_g1_robot,
        mirror=joint_mirror_by_name,
    )


ROBOTS: Registry[Callable[[], Robot]] = Registry("robot")
ROBOTS.register("g1", _g1)  # knees bent, arms relaxed; 0.25 x effort limit / kp per joint
ROBOTS.register("cartpole", lambda: Robot(_cartpole_model, None, check=check_cartpole))


def robot(name: str) -> Robot:
    return ROBOTS.get(name, "robot.name")()
