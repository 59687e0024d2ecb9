"""Action mappings: what the policy's actions become on the robot's actuators.

A task's ``actions:`` table names one mapping and its parameters::

    actions:
      joint_pos: {term: joint_position, params: {joints: ".*", scale: robot, clip: 10.0}}

``joint_position`` maps action k to the actuator of joint k of ``joints`` (in the model's
order) as a position target ``offset + scale * action``: ``offset`` is the robot's initial
pose (``default``) or values, ``scale`` a number, per-joint values (``{pattern: value}``, each
joint matched by one pattern) or ``robot`` (the robot's own per-joint scale). Actuators of joints
outside ``joints`` hold their offset. ``clip`` clips actions to [-clip, clip] first. ``reach``
says how far each action goes before it stops mattering: for a position target, the action that
puts the target on its joint's farther limit (1 for an unlimited joint, and for a motor: its
scale is its range), never past ``clip``; a policy with bounded actions (FastSAC) can scale to
it. An env's actions may reach the actuators a whole number of control steps late (:meth:`
JointAction.set_delay`, the event ``randomize_action_delay``): the controls of a step then come
from the actions of that many steps before, and a new episode starts from zero actions.
``joint_effort`` is the same map for motors, its offset 0.

Everything per step runs in one parallel Numba pass (no Python per env, no allocation).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numba
import numpy as np

from fuselab_env_core.backend import ModelFacts
from fuselab_env_core.ranges import PositiveFloat
from fuselab_env_core.registry import JointNames, Registry, Signature, joint_values


class JointAction:
    """Actions -> actuator controls ``offset + scale * action`` of some joints' actuators."""

    holds_pose = True  # position targets: the offset defaults to the robot's initial pose

    def __init__(
        self,
        where: str,
        facts: ModelFacts,
        num_envs: int,
        init_joint_pos: np.ndarray,
        robot_scale: Mapping[str, float] | None,
        *,
        joints: JointNames = (".*",),
        scale: Any = 1.0,
        offset: Any = None,
        clip: PositiveFloat | None = None,
    ):
        driven = facts.actuator_joint >= 0
        actuator_of = {int(j): a for a, j in enumerate(facts.actuator_joint) if j >= 0}
        missing = [facts.joint_names[j] for j in joints if int(j) not in actuator_of]
        if missing:
            raise ValueError(f"{where}.joints: joints {missing} have no actuator")
        self.joints = joints
        self.actuators = np.array([actuator_of[int(j)] for j in joints], np.int64)
        self.action_dim = len(joints)
        names = [facts.joint_names[j] for j in joints]
        self.scale = joint_values(f"{where}.scale", scale, names, robot_scale)
        pose = dict(zip(facts.joint_names, init_joint_pos.tolist(), strict=True))
        if offset is None or offset == "default":  # a position target: the initial pose
            offset = pose if self.holds_pose else 0.0
        self.offset = joint_values(f"{where}.offset", offset, names, None)
        # float32, as the actions: the controls are computed in float32 throughout
        self.clip = np.float32(math.inf if clip is None else clip)
        # Controls of the actuators no action drives: their joint's initial position
        # (a position actuator holds it), or 0 (a motor, or an actuator without a joint).
        self.controls0 = np.zeros(facts.nu, np.float32)
        joint_of = facts.actuator_joint
        self.controls0[driven] = init_joint_pos[joint_of[driven]] if self.holds_pose else 0.0
        self.controls0[self.actuators] = self.offset
        self.reach = self._reach(facts.joint_ranges[joints])
        self.history = np.zeros((1, num_envs, self.action_dim), np.float32)  # past actions
        self.delay = np.zeros(num_envs, np.int64)  # control steps each env's actions wait
        self.head = 0

    def _reach(self, ranges: np.ndarray) -> np.ndarray:
        """Per action, the magnitude past which its target lies beyond the joint's limits."""
        reach = np.ones(self.action_dim)
        if self.holds_pose:
            farther = np.abs(ranges - self.offset[:, None]).max(axis=1)
            limited = np.isfinite(farther) & (self.scale != 0)
            reach[limited] = farther[limited] / np.abs(self.scale[limited])
        return np.minimum(reach, self.clip).astype(np.float32)

    def set_delay(self, env_ids: np.ndarray, steps: np.ndarray) -> None:
        """Delay the actions of ``env_ids`` by ``steps`` control steps each (the ring of past
        actions grows once, when a longer delay than it holds is first asked for)."""
        window = int(steps.max(initial=0)) + 1
        if window > len(self.history):
            grown = np.zeros((window, *self.history.shape[1:]), np.float32)
            self.history, self.head = grown, 0  # (only at a reset: those envs start over)
        self.delay[env_ids] = steps

    def reset(self, env_ids: np.ndarray) -> None:
        """New episodes: no past actions."""
        self.history[:, env_ids] = 0.0

    def apply(self, given, actions, last_actions, controls, finite) -> None:
        """``last_actions`` <- ``actions`` <- ``given``; the controls of this step."""
        self.head += 1
        _map_actions(
            given,
            actions,
            last_actions,
            self.history,
            self.head % len(self.history),
            self.delay,
            self.scale,
            self.offset,
            self.actuators,
            self.clip,
            controls,
            finite,
        )

    def describe(self) -> dict[str, Any]:
        """What a robot-side program needs to use the actions (joint order, scale, offset)."""
        return {
            "actuators": self.actuators.tolist(),
            "scale": self.scale.tolist(),
            "offset": self.offset.tolist(),
            "clip": None if math.isinf(self.clip) else float(self.clip),
        }


class JointEffortAction(JointAction):
    """Motors: a torque (force) ``offset + scale * action``, the offset 0 unless given."""

    holds_pose = False


ACTIONS: Registry[type[JointAction]] = Registry("action mapping")
ACTIONS.register("joint_position", JointAction)
ACTIONS.register("joint_effort", JointEffortAction)
CONSTRUCTOR_ARGS = 5  # where, facts, num_envs, init_joint_pos, robot_scale: not parameters


def build_action(
    table: Mapping[str, Any] | None,
    facts: ModelFacts,
    num_envs: int,
    init_joint_pos: np.ndarray,
    robot_scale: Mapping[str, float] | None = None,
) -> JointAction:
    """The task's one action mapping from its ``actions`` table, checked."""
    entries = dict(table or {})
    if len(entries) != 1:
        raise ValueError(f"actions: expected one mapping, got {sorted(entries) or 'none'}")
    ((name, spec),) = entries.items()
    where = f"actions.{name}"
    if not isinstance(spec, Mapping) or set(spec) - {"term", "params"}:
        raise ValueError(f"{where}: expected {{term: ..., params: {{...}}}}, got {spec!r}")
    cls = ACTIONS.get(spec.get("term") or name, f"{where}.term")
    signature = Signature.of(cls.__init__, skip=1 + CONSTRUCTOR_ARGS)
    params = signature.bind(f"{where}.params", spec.get("params"), facts)
    return cls(f"{where}.params", facts, num_envs, init_joint_pos, robot_scale, **params)


@numba.njit(parallel=True, cache=True)
def _map_actions(
    given,
    actions,
    last_actions,
    history,
    slot,
    delay,
    scale,
    offset,
    actuators,
    clip,
    controls,
    finite,
):
    """One pass over rows: ``last_actions`` <- ``actions`` <- ``given`` (as float32; a row with a
    non-finite action holds still: zeros, ``finite[i]`` False), this step's actions into
    ``history[slot]``, and the controls of the actions ``delay[i]`` steps old, clipped to
    [-clip, clip]: ``offset + scale * action`` on each driven actuator."""
    window = history.shape[0]
    for i in numba.prange(actions.shape[0]):
        row_sum = 0.0
        for j in range(actions.shape[1]):
            last_actions[i, j] = actions[i, j]
            actions[i, j] = given[i, j]
            row_sum += actions[i, j]
        finite[i] = math.isfinite(row_sum)  # a float64 sum of float32s overflows never
        if not finite[i]:
            actions[i, :] = 0.0
        for j in range(actions.shape[1]):
            history[slot, i, j] = actions[i, j]
        acted = (slot - delay[i]) % window
        for j in range(actions.shape[1]):
            a = min(max(history[acted, i, j], -clip), clip)
            controls[i, actuators[j]] = offset[j] + scale[j] * a
