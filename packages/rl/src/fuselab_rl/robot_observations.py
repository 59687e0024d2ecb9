"""What a robot-side program computes for a fuselab policy: its observation row, from the robot's
state, with nothing of fuselab but the deploy document in ``policy.onnx``'s metadata.

This module is such a program's half: it imports NumPy and MuJoCo only (never
fuselab_env_core or the task code), reads a ``mujoco.MjData`` the way a robot reads its IMU and
encoders, and follows the document's layout (term order, columns, history, joint order by
name). ``fuselab-sim2sim`` runs policies with it; a test pins that it gives the policy the
inputs the env gives it. Each term is the noise-free formula the document's ``source`` shows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np


@dataclass
class RobotState:
    """What one control step's observations are made from: the robot's state, read from
    ``data`` (the root is the model's first free joint, e.g. the pelvis), the last action and
    the command or the clip's reference at this step."""

    data: Any  # mujoco.MjData
    joint_qpos: np.ndarray  # qpos column of each of the policy's joints (the document's order)
    joint_qvel: np.ndarray
    last_action: np.ndarray
    command: np.ndarray | None = None  # a velocity command (vx, vy, wz)
    gait_phase: np.ndarray | None = None  # a gait clock's phases (left, right; rad)
    reference: dict[str, np.ndarray] = field(default_factory=dict)  # a tracking policy's
    body_ids: dict[str, int] = field(default_factory=dict)  # tracked body name -> model id


def quat_rotate_inverse(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """v rotated by the inverse of unit quaternion q (w, x, y, z)."""
    w, u = q[0], -q[1:]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return np.array(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ]
    )


def rotation_first_two_columns(q: np.ndarray) -> np.ndarray:
    """(r00, r10, r20, r01, r11, r21): the first two columns of q's rotation matrix."""
    matrix = np.zeros(9)
    mujoco.mju_quat2Mat(matrix, q)
    return matrix.reshape(3, 3)[:, :2].T.reshape(-1)


def _root(s: RobotState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The root's orientation (w, x, y, z), world linear velocity and body angular velocity."""
    return s.data.qpos[3:7], s.data.qvel[0:3], s.data.qvel[3:6]


def _reference_ori(s: RobotState, body: str) -> np.ndarray:
    """The reference's orientation of ``body`` in the robot's ``body`` frame (6 values)."""
    k = list(s.body_ids).index(body)
    robot = s.data.xquat[s.body_ids[body]]
    conjugate = robot * np.array([1.0, -1.0, -1.0, -1.0])
    return rotation_first_two_columns(quat_multiply(conjugate, s.reference["ref_body_quat_w"][k]))


def _anchor_pos(s: RobotState, body: str) -> np.ndarray:
    k = list(s.body_ids).index(body)
    i = s.body_ids[body]
    return quat_rotate_inverse(s.data.xquat[i], s.reference["ref_body_pos_w"][k] - s.data.xpos[i])


# term name -> (robot state, term parameters, document) -> its values
TERMS: dict[str, Callable[[RobotState, dict, dict], np.ndarray]] = {
    "base_ang_vel": lambda s, p, d: _root(s)[2],  # the pelvis IMU's gyro
    "base_lin_vel": lambda s, p, d: quat_rotate_inverse(_root(s)[0], _root(s)[1]),
    "projected_gravity": lambda s, p, d: quat_rotate_inverse(_root(s)[0], np.array([0, 0, -1.0])),
    "velocity_command": lambda s, p, d: np.asarray(s.command, np.float64),
    "gait_phase_sin_cos": lambda s, p, d: np.stack(
        [np.sin(s.gait_phase), np.cos(s.gait_phase)], axis=-1
    ).reshape(-1),
    "joint_pos_rel": lambda s, p, d: (
        s.data.qpos[s.joint_qpos] - np.asarray(d["joints"]["default_pos"])
    ),
    "joint_vel_rel": lambda s, p, d: s.data.qvel[s.joint_qvel],
    "last_action": lambda s, p, d: s.last_action,
    "motion_command": lambda s, p, d: np.concatenate(
        [s.reference["ref_joint_pos"], s.reference["ref_joint_vel"]]
    ),
    "motion_body_ori_b": lambda s, p, d: _reference_ori(s, p.get("body", "torso_link")),
    "motion_anchor_ori_b": lambda s, p, d: _reference_ori(s, d.get("anchor_body") or "torso_link"),
    "motion_anchor_pos_b": lambda s, p, d: _anchor_pos(s, d.get("anchor_body") or "torso_link"),
}


class GaitClock:
    """The robot's side of a ``gait_clock`` command (the document's ``rule``): the left foot's
    phase advances 2 pi control_dt / period_s a step from 0, the right's is half a cycle on, and
    both read pi while the command asks to stand."""

    def __init__(self, doc: dict[str, Any]):
        clock = next(c for c in doc["commands"].values() if c.get("kind") == "gait_clock")
        self.rate = 2.0 * np.pi * doc["control_dt"] / clock["period_s"]
        self.standing_speed = clock["standing_speed"]
        self.left = 0.0

    def reset(self) -> None:
        self.left = 0.0

    def phase(self, command: np.ndarray) -> np.ndarray:
        """(left, right) at this step, for ``command`` (vx, vy, wz)."""
        if max(abs(command[0]), abs(command[1]), abs(command[2])) < self.standing_speed:
            return np.array([np.pi, np.pi])
        return np.array([self.left, _wrap(self.left + np.pi)])

    def advance(self) -> None:
        self.left = _wrap(self.left + self.rate)


def _wrap(angle: float) -> float:
    """The angle in [-pi, pi)."""
    return (angle + np.pi) % (2.0 * np.pi) - np.pi


class ObservationBuilder:
    """One env's observation rows in the document's layout, with its history and delay."""

    def __init__(self, doc: dict[str, Any]):
        self.doc = doc
        self.terms = doc["observations"]["terms"]
        unknown = [t["term"] for t in self.terms if t["term"] not in TERMS]
        if unknown:
            raise ValueError(
                f"observations: this program does not compute terms {unknown}; it knows "
                f"{sorted(TERMS)}"
            )
        self.width = doc["observations"]["width"]
        self._frames: list[list[np.ndarray]] = [[] for _ in self.terms]

    def reset(self) -> None:
        """A new episode: its first row fills every frame of history and delay."""
        self._frames = [[] for _ in self.terms]

    def __call__(self, state: RobotState) -> np.ndarray:
        """This step's row (float32): each term's frames, oldest first."""
        row = np.zeros(self.width, np.float32)
        for k, term in enumerate(self.terms):
            value = np.asarray(TERMS[term["term"]](state, term["params"], self.doc), np.float32)
            if value.shape != (term["size"],):
                raise ValueError(f"{term['name']}: computed {value.shape}, expected {term['size']}")
            frames = self._frames[k]
            window = term["history"] + term["delay_steps"]
            frames.append(value)
            while len(frames) < window:  # a new episode: back-filled
                frames.insert(0, value)
            del frames[:-window]
            start = term["columns"][0]
            for h in range(term["history"]):
                row[start + h * term["size"] : start + (h + 1) * term["size"]] = frames[h]
        return row


def joint_columns(model: Any, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The qpos and qvel columns of the joints named ``names`` in ``model`` (any MJCF with
    those joint names, in any order)."""
    qpos, qvel, missing = [], [], []
    for name in names:
        joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if joint < 0:
            missing.append(name)
            continue
        qpos.append(model.jnt_qposadr[joint])
        qvel.append(model.jnt_dofadr[joint])
    if missing:
        raise ValueError(f"mjcf: the model has no joints {missing}")
    return np.array(qpos, np.int64), np.array(qvel, np.int64)
