"""G1WalkFlat: the G1 follows body-frame velocity commands (vx, vy, wz) on flat ground.

Commands are sampled per env and resampled every ``resample_s`` (a ``standing_fraction`` of them
zero, a ``turning_fraction`` turning in place, a ``straight_fraction`` walking without turning);
a ``heading_fraction`` of the others steer to a heading instead of holding a yaw rate (mjlab's
heading commands); resets put the robot in its standing pose with random yaw and joint noise;
optional pushes kick the base velocity every ``push_interval_s``.
Every reward, termination and observation runs in the fused kernel; the task's Python touches
whole arrays only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import fuselab_envs.terms.common  # noqa: F401 - registers the terms the config names
import fuselab_envs.terms.contacts  # noqa: F401
import fuselab_envs.terms.velocity  # noqa: F401
from fuselab_env_core.backend import SimBackend
from fuselab_env_core.entity import Entity
from fuselab_env_core.env import FusedEnv
from fuselab_env_core.ranges import (
    Fraction,
    Interval,
    NonNegativeFloat,
    PositiveFloat,
    Section,
)
from fuselab_env_core.rotations import np_quat_mul, np_wrap_angle, np_yaw
from fuselab_envs.g1 import ACTION_SCALE, STANDING_PELVIS_HEIGHT
from fuselab_envs.tasks.g1_common import check_g1_robot, g1_task_arrays, joint_array

log = logging.getLogger(__name__)

BODIES = ("pelvis", "torso_link", "left_ankle_roll_link", "right_ankle_roll_link")
# The feet, and the bodies that should never touch down (the task config names which is which).
CONTACT_BODIES = (
    "left_ankle_roll_link",
    "right_ankle_roll_link",
    "left_knee_link",
    "right_knee_link",
    "left_wrist_yaw_link",
    "right_wrist_yaw_link",
)


# variable_posture_exp's tolerances per joint (radians; mjlab's G1 velocity task): to stand every
# joint holds the default pose; to walk and run the legs swing while the waist and arms hold it.
# Keys are joint names without side and "_joint".
POSTURE_STANDING_STD_RAD = 0.05
POSTURE_WALKING_STD_RAD = {
    "hip_pitch": 0.3,
    "hip_roll": 0.15,
    "hip_yaw": 0.15,
    "knee": 0.35,
    "ankle_pitch": 0.25,
    "ankle_roll": 0.1,
    "waist_yaw": 0.2,
    "waist_roll": 0.08,
    "waist_pitch": 0.1,
    "shoulder_pitch": 0.15,
    "shoulder_roll": 0.15,
    "shoulder_yaw": 0.1,
    "elbow": 0.15,
    "wrist_roll": 0.3,
    "wrist_pitch": 0.3,
    "wrist_yaw": 0.3,
}
POSTURE_RUNNING_STD_RAD = {
    "hip_pitch": 0.5,
    "hip_roll": 0.2,
    "hip_yaw": 0.2,
    "knee": 0.6,
    "ankle_pitch": 0.35,
    "ankle_roll": 0.15,
    "waist_yaw": 0.3,
    "waist_roll": 0.08,
    "waist_pitch": 0.2,
    "shoulder_pitch": 0.5,
    "shoulder_roll": 0.2,
    "shoulder_yaw": 0.15,
    "elbow": 0.35,
    "wrist_roll": 0.3,
    "wrist_pitch": 0.3,
    "wrist_yaw": 0.3,
}


def posture_std(joint_names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The task arrays of variable_posture_exp: each regime's tolerance of every joint, in the
    model's joint order."""

    def key(name: str) -> str:
        return name.removeprefix("left_").removeprefix("right_").removesuffix("_joint")

    missing = [name for name in joint_names if key(name) not in POSTURE_WALKING_STD_RAD]
    if missing:
        raise ValueError(f"robot: joints {missing} have no posture tolerance (POSTURE_*_STD_RAD)")
    return {
        "posture_std_standing": np.full(len(joint_names), POSTURE_STANDING_STD_RAD, np.float32),
        "posture_std_walking": np.array(
            [POSTURE_WALKING_STD_RAD[key(n)] for n in joint_names], np.float32
        ),
        "posture_std_running": np.array(
            [POSTURE_RUNNING_STD_RAD[key(n)] for n in joint_names], np.float32
        ),
    }


@dataclass
class CommandCfg(Section):
    """The ``commands`` section: velocity commands, uniform in their ranges (base frame)."""

    KEY = "commands"

    resample_s: PositiveFloat = 4.0
    standing_fraction: Fraction = 0.1  # share of commands that are zero
    # Share that turns in place (vx = vy = 0) and share that walks straight (wz = 0): drawn
    # jointly, pure turns and straight walks are rare.
    turning_fraction: Fraction = 0.0
    straight_fraction: Fraction = 0.0
    # Share of the walking commands whose yaw rate steers to a heading drawn uniformly in
    # [-pi, pi): wz = heading_stiffness * heading error, clipped to ang_vel_z, every step. The
    # command then asks wz ~ 0 once the heading is reached, as on a straight walk.
    heading_fraction: Fraction = 0.0
    heading_stiffness: PositiveFloat = 0.5  # rad/s of wz per rad of heading error
    lin_vel_x: Interval = (-1.0, 1.0)  # m/s
    lin_vel_y: Interval = (-0.5, 0.5)  # m/s
    ang_vel_z: Interval = (-1.0, 1.0)  # rad/s

    def __post_init__(self) -> None:
        super().__post_init__()
        shares = (self.standing_fraction, self.turning_fraction, self.straight_fraction)
        if sum(shares) > 1.0:
            raise ValueError(
                "commands.standing_fraction + commands.turning_fraction + "
                f"commands.straight_fraction: expected <= 1, got {' + '.join(map(str, shares))}"
            )


@dataclass
class EventCfg(Section):
    """The ``events`` section: reset noise and pushes."""

    KEY = "events"

    joint_noise_rad: NonNegativeFloat = 0.1
    push_interval_s: PositiveFloat | None = None  # None: no pushes
    push_speed_mps: NonNegativeFloat = 0.5


class G1WalkFlat(FusedEnv):
    def __init__(
        self,
        backend: SimBackend,
        terms: Mapping[str, Any],
        *,
        commands: CommandCfg | None = None,
        events: EventCfg | None = None,
        decimation: int = 4,
        episode_length_s: float = 20.0,
        num_threads: int | None = None,
        seed: int = 0,
    ):
        facts, n = backend.model, backend.num_envs
        check_g1_robot(facts, "G1WalkFlat")
        self.commands = commands or CommandCfg()
        self.events = events or EventCfg()
        self.facts = facts
        self.task_arrays = {**g1_task_arrays(facts), **posture_std(facts.joint_names)}
        self.default_pose = self.task_arrays["default_joint_pos"]
        self.command = np.zeros((n, 3), np.float32)
        step_dt = facts.physics_dt * decimation
        self._resample_steps = max(1, round(self.commands.resample_s / step_dt))
        self._push_steps = (
            None
            if self.events.push_interval_s is None
            else max(1, round(self.events.push_interval_s / step_dt))
        )
        self._steps_to_resample = np.zeros(n, np.int32)
        # The commands that steer to a heading, and their headings (rad, world frame).
        self.steering = np.zeros(n, np.bool_)
        self.heading_target = np.zeros(n, np.float32)
        # Reset-path buffers: the reset rows' state and their uniform draws (yaw, joint noise).
        self._qpos = np.zeros((n, facts.nq), np.float32)
        self._qvel = np.zeros((n, facts.nv), np.float32)
        super().__init__(
            backend,
            Entity(backend, BODIES, contact_body_names=CONTACT_BODIES),
            terms,
            decimation=decimation,
            episode_length_s=episode_length_s,
            default_controls=self.default_pose,
            action_scale=joint_array(ACTION_SCALE, facts),
            extra_state={"command": self.command},
            arrays=self.task_arrays,
            num_threads=num_threads,
            seed=seed,
        )

    # -- FusedEnv hooks ----------------------------------------------------------------------------

    def reset_state(self, env_ids):
        """The standing pose, a yaw uniform in [0, 2 pi) and the joints uniform within
        +- joint_noise_rad of the pose (clipped to their ranges), drawn as the event layer's
        reset events draw: the base pose and velocity (k, 6) each, then the joint positions and
        velocities (k, joints) each."""
        k, facts = len(env_ids), self.facts
        qpos, qvel = self._qpos[:k], self._qvel[:k]
        qpos[:] = 0.0
        qvel[:] = 0.0
        qpos[:, 2] = STANDING_PELVIS_HEIGHT
        qpos[:, 3] = 1.0
        qpos[:, facts.joint_qpos_adr] = self.default_pose
        low = np.zeros(6)
        high = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 2.0 * np.pi])
        pose = self.rng.uniform(low, high, (k, 6))
        velocity = self.rng.uniform(np.zeros(6), np.zeros(6), (k, 6))
        qpos[:, 0:3] += pose[:, 0:3]
        qpos[:, 3:7] = np_quat_mul(_euler_quat(pose[:, 3], pose[:, 4], pose[:, 5]), qpos[:, 3:7])
        qvel[:, 0:6] += velocity
        joints = len(facts.joint_names)
        noise = self.events.joint_noise_rad
        position = self.rng.uniform(-noise, noise, (k, joints))
        velocity = self.rng.uniform(0.0, 0.0, (k, joints))
        columns = facts.joint_qpos_adr
        limits = facts.joint_ranges
        qpos[:, columns] = np.clip(qpos[:, columns] + position, limits[:, 0], limits[:, 1])
        qvel[:, facts.joint_qvel_adr] += velocity
        return qpos, qvel

    def on_reset(self, env_ids):
        self._resample(env_ids)
        qpos = self._qpos[: len(env_ids)]  # the state reset_state gave these rows
        steering = self.steering[env_ids]
        if steering.any():
            rows = env_ids[steering]
            error = np_wrap_angle(self.heading_target[rows] - np_yaw(qpos[steering, 3:7]))
            self.command[rows, 2] = self._steer(error)

    def advance(self):
        self._steps_to_resample -= 1
        due = np.flatnonzero(self._steps_to_resample <= 0)
        if due.size:
            self._resample(due)
        if self.commands.heading_fraction > 0.0:
            error = np_wrap_angle(self.heading_target - np_yaw(self.robot.qpos[:, 3:7]))
            np.copyto(self.command[:, 2], self._steer(error), where=self.steering)
        if self._push_steps is not None and (self.episode_step % self._push_steps == 0).any():
            self._push(np.flatnonzero(self.episode_step % self._push_steps == 0))

    # -- commands and events -------------------------------------------------------------------

    def _resample(self, env_ids: np.ndarray) -> None:
        c, k = self.commands, len(env_ids)
        for axis, (low, high) in enumerate((c.lin_vel_x, c.lin_vel_y, c.ang_vel_z)):
            self.command[env_ids, axis] = self.rng.uniform(low, high, k)
        # kind below standing_fraction: stand; in the next turning_fraction: turn in place; in
        # the next straight_fraction: walk straight; above: walk and turn
        kind = self.rng.random(k)
        turning = c.standing_fraction + c.turning_fraction
        straight = turning + c.straight_fraction
        self.command[env_ids[kind < turning], :2] = 0.0
        holds_yaw = (kind < c.standing_fraction) | ((kind >= turning) & (kind < straight))
        self.command[env_ids[holds_yaw], 2] = 0.0
        if c.heading_fraction > 0.0:  # (drawn only then: without it the stream is unchanged)
            walking = kind >= straight
            self.steering[env_ids] = walking & (self.rng.random(k) < c.heading_fraction)
            self.heading_target[env_ids] = self.rng.uniform(-np.pi, np.pi, k)
        self._steps_to_resample[env_ids] = self._resample_steps

    def _steer(self, heading_error: np.ndarray) -> np.ndarray:
        """The yaw-rate command that turns toward the heading: proportional, within ang_vel_z."""
        c = self.commands
        return np.clip(c.heading_stiffness * heading_error, *c.ang_vel_z)

    def _push(self, env_ids: np.ndarray) -> None:
        ending = self.terminated[env_ids] | self.truncated[env_ids]
        env_ids = env_ids[~ending]  # reset this step anyway (diverged ones too)
        qpos, qvel = self.robot.qpos[env_ids], self.robot.qvel[env_ids]
        qvel[:, :2] += self.rng.uniform(-1, 1, (len(env_ids), 2)) * self.events.push_speed_mps
        self.write_state(env_ids, qpos, qvel)


def _euler_quat(roll: np.ndarray, pitch: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """(w, x, y, z) float64 of the extrinsic x-y-z rotation (roll, then pitch, then yaw)."""
    cr, sr = np.cos(roll / 2), np.sin(roll / 2)
    cp, sp = np.cos(pitch / 2), np.sin(pitch / 2)
    cy, sy = np.cos(yaw / 2), np.sin(yaw / 2)
    return np.stack(
        [
            cr * cp * cy + sr * sp * sy,
            sr * cp * cy - cr * sp * sy,
            cr * sp * cy + sr * cp * sy,
            cr * cp * sy - sr * sp * cy,
        ],
        axis=-1,
    )
