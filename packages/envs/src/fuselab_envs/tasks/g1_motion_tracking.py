"""G1MotionTracking: the G1 imitates a whole-body motion clip (BeyondMimic-style tracking).

The clip is loaded once at start-up, resampled to the control rate, and handed to the fused
kernels as task arrays (``motion_*``, the tracked bodies in the entity's order): terms read each
env's current frame from them, so after start-up the motion file is never read again and no
Python touches a frame per env. One step::

    score frame f (anchor frame, rewards, terminations) -> failure statistics (at the frame
    where each env failed) -> frame advance to f + 1 -> clip end -> resets (reference state
    initialization with noise) -> observe frame f + 1

Observations carry the reference of the frame the next step's rewards will use.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

import fuselab_envs.terms.common  # noqa: F401 - registers the terms the config names
import fuselab_envs.terms.contacts  # noqa: F401
import fuselab_envs.terms.tracking  # noqa: F401
from fuselab_env_core.backend import SimBackend
from fuselab_env_core.entity import Entity
from fuselab_env_core.env import FusedEnv
from fuselab_env_core.ranges import (
    Fraction,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    Section,
    check_value,
)
from fuselab_env_core.rotations import np_quat_apply_inverse, np_quat_mul
from fuselab_envs.g1 import ACTION_SCALE
from fuselab_envs.motion import MotionClip
from fuselab_envs.tasks.g1_common import check_g1_robot, g1_task_arrays, joint_array

log = logging.getLogger(__name__)

# BeyondMimic's tracked bodies (the task config names the anchor and the end effectors).
TRACKED_BODIES = (
    "pelvis",
    "left_hip_roll_link",
    "left_knee_link",
    "left_ankle_roll_link",
    "right_hip_roll_link",
    "right_knee_link",
    "right_ankle_roll_link",
    "torso_link",
    "left_shoulder_roll_link",
    "left_elbow_link",
    "left_wrist_yaw_link",
    "right_shoulder_roll_link",
    "right_elbow_link",
    "right_wrist_yaw_link",
)
# The feet, and the bodies that should not touch down (the task config names which is which).
CONTACT_BODIES = (
    "left_ankle_roll_link",
    "right_ankle_roll_link",
    "left_knee_link",
    "right_knee_link",
)
SamplingMode = Literal["start", "uniform", "adaptive"]
ClipEnd = Literal["truncate", "resample"]  # at the clip's end: time out, or a new start frame


@dataclass
class SamplingCfg(Section):
    """Where episodes start in the clip: at frame 0, uniformly, or where envs fail most."""

    KEY = "sampling"

    mode: SamplingMode = "adaptive"
    bin_s: PositiveFloat = 1.0  # adaptive: failures are counted per bin of this length
    ema: Fraction = 0.001  # adaptive: weight of the newest failure counts in the running average
    uniform_ratio: Fraction = 0.1  # adaptive: share of starts drawn uniformly
    kernel_bins: PositiveInt = 3  # adaptive: a failure also raises the bins leading up to it
    kernel_decay: Fraction = 0.8  # adaptive: ... each earlier bin by this factor


@dataclass
class ResetNoiseCfg(Section):
    """Reference state initialization: the reference pose and velocity, plus uniform noise."""

    KEY = "reset_noise"

    pos_xy_m: NonNegativeFloat = 0.05
    pos_z_m: NonNegativeFloat = 0.01
    roll_pitch_rad: NonNegativeFloat = 0.1
    yaw_rad: NonNegativeFloat = 0.2
    lin_vel_mps: NonNegativeFloat = 0.2
    ang_vel_radps: NonNegativeFloat = 0.2
    joint_pos_rad: NonNegativeFloat = 0.1


@dataclass
class MotionCfg(Section):
    """The ``motion`` section: which clip, and what happens at its end."""

    KEY = "motion"

    file: str | None = None  # a .npz motion file; None: the embedded clip
    clip_end: ClipEnd = "truncate"


class G1MotionTracking(FusedEnv):
    def __init__(
        self,
        backend: SimBackend,
        terms: Mapping[str, Any],
        motion: MotionClip,
        *,
        sampling: SamplingCfg | None = None,
        reset_noise: ResetNoiseCfg | None = None,
        clip_end: ClipEnd = "truncate",
        decimation: int = 4,
        episode_length_s: float = 10.0,
        num_threads: int | None = None,
        seed: int = 0,
    ):
        facts, n = backend.model, backend.num_envs
        check_g1_robot(facts, "G1MotionTracking")
        self.facts = facts
        self.sampling = sampling or SamplingCfg()
        self.reset_noise = reset_noise or ResetNoiseCfg()
        clip_end = check_value("motion.clip_end", clip_end, ClipEnd)
        if motion.joint_names != facts.joint_names:
            raise ValueError(
                f"motion {motion.source}: joints {motion.joint_names} are not the robot's "
                f"{facts.joint_names}; load it with the robot's names"
            )
        step_dt = facts.physics_dt * decimation
        if not math.isclose(motion.fps * step_dt, 1.0, rel_tol=1e-6):
            raise ValueError(
                f"motion {motion.source}: fps {motion.fps} is not the control rate "
                f"{1 / step_dt:g}; load it with fps={1 / step_dt:g}"
            )
        self.motion, self.clip_end = motion, clip_end
        self.num_frames = motion.num_frames
        tracked = [motion.body_index(name) for name in TRACKED_BODIES]
        self.motion_arrays = {
            "motion_joint_pos": motion.joint_pos,
            "motion_joint_vel": motion.joint_vel,
            "motion_body_pos_w": np.ascontiguousarray(motion.body_pos_w[:, tracked]),
            "motion_body_quat_w": np.ascontiguousarray(motion.body_quat_w[:, tracked]),
            "motion_body_lin_vel_w": np.ascontiguousarray(motion.body_lin_vel_w[:, tracked]),
            "motion_body_ang_vel_w": np.ascontiguousarray(motion.body_ang_vel_w[:, tracked]),
        }
        root = motion.body_index("pelvis")
        self._root_pos = motion.body_pos_w[:, root]
        self._root_quat = motion.body_quat_w[:, root]
        self._root_lin_vel = motion.body_lin_vel_w[:, root]
        # MuJoCo's free joint takes angular velocity in the body frame: turned once per clip.
        self._root_ang_vel_b = np_quat_apply_inverse(
            self._root_quat, motion.body_ang_vel_w[:, root]
        )

        self.motion_frame = np.zeros(n, np.int32)
        self._qpos = np.zeros((n, facts.nq), np.float32)  # the reset rows' state
        self._qvel = np.zeros((n, facts.nv), np.float32)
        self.task_arrays = {**g1_task_arrays(facts), **self.motion_arrays}
        self.default_pose = self.task_arrays["default_joint_pos"]
        self.num_bins = max(1, math.ceil(self.num_frames * step_dt / self.sampling.bin_s))
        self.bin_failures = np.zeros(self.num_bins, np.float64)  # running average per bin
        self._failed_in_bin = np.zeros(self.num_bins, np.float64)
        super().__init__(
            backend,
            Entity(backend, TRACKED_BODIES, contact_body_names=CONTACT_BODIES),
            terms,
            decimation=decimation,
            episode_length_s=episode_length_s,
            default_controls=self.default_pose,
            action_scale=joint_array(ACTION_SCALE, facts),
            extra_state={"motion_frame": self.motion_frame},
            arrays=self.task_arrays,
            num_threads=num_threads,
            seed=seed,
        )
        log.info(
            "motion %s: %d frames at %g fps (%.1f s), %d sampling bins, %s starts, clip end: %s",
            motion.source,
            self.num_frames,
            motion.fps,
            motion.duration_s,
            self.num_bins,
            self.sampling.mode,
            clip_end,
        )

    # -- the reference --------------------------------------------------------------------------

    def reference_state(self, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(qpos, qvel) float32 that put the robot exactly on the clip at ``frames`` (views of
        the env's reset buffers: valid until the next call)."""
        facts, k = self.facts, len(frames)
        qpos, qvel = self._qpos[:k], self._qvel[:k]
        qpos[:] = 0.0
        qvel[:] = 0.0
        qpos[:, 0:3] = self._root_pos[frames]
        qpos[:, 3:7] = self._root_quat[frames]
        qpos[:, facts.joint_qpos_adr] = self.motion.joint_pos[frames]
        qvel[:, 0:3] = self._root_lin_vel[frames]
        qvel[:, 3:6] = self._root_ang_vel_b[frames]
        qvel[:, facts.joint_qvel_adr] = self.motion.joint_vel[frames]
        return qpos, qvel

    def sample_start_frames(self, count: int) -> np.ndarray:
        mode, rng = self.sampling.mode, self.rng
        if mode == "start":
            return np.zeros(count, np.int32)
        if mode == "uniform":
            return rng.integers(0, self.num_frames - 1, count).astype(np.int32)
        bins = rng.choice(self.num_bins, size=count, p=self.bin_probabilities())
        frames_per_bin = self.num_frames / self.num_bins
        frames = (bins + rng.random(count)) * frames_per_bin
        return np.minimum(frames.astype(np.int32), self.num_frames - 2)

    def bin_probabilities(self) -> np.ndarray:
        """Adaptive sampling: bins weighted by their recent failures, smoothed backwards in time
        (a failure is often caused by the seconds before it), mixed with a uniform share."""
        s = self.sampling
        weights = self.bin_failures.copy()
        for lag in range(1, s.kernel_bins):
            weights[:-lag] += self.bin_failures[lag:] * s.kernel_decay**lag
        uniform = np.full(self.num_bins, 1.0 / self.num_bins)
        if weights.sum() <= 0:
            return uniform
        return (1 - s.uniform_ratio) * weights / weights.sum() + s.uniform_ratio * uniform

    # -- FusedEnv hooks ----------------------------------------------------------------------------

    def reset_state(self, env_ids):
        frames = self.sample_start_frames(len(env_ids))
        self.motion_frame[env_ids] = frames
        qpos, qvel = self.reference_state(frames)
        noise, k = self.reset_noise, len(env_ids)
        uniform = self.rng.uniform
        qpos[:, 0:2] += uniform(-noise.pos_xy_m, noise.pos_xy_m, (k, 2))
        qpos[:, 2] += uniform(-noise.pos_z_m, noise.pos_z_m, k)
        roll, pitch = (uniform(-noise.roll_pitch_rad, noise.roll_pitch_rad, k) for _ in range(2))
        yaw = uniform(-noise.yaw_rad, noise.yaw_rad, k)
        qpos[:, 3:7] = np_quat_mul(_euler_quat(roll, pitch, yaw), qpos[:, 3:7])
        qvel[:, 0:3] += uniform(-noise.lin_vel_mps, noise.lin_vel_mps, (k, 3))
        qvel[:, 3:6] += uniform(-noise.ang_vel_radps, noise.ang_vel_radps, (k, 3))
        joints = self.facts.joint_qpos_adr
        low, high = self.facts.joint_ranges[:, 0], self.facts.joint_ranges[:, 1]
        noisy = qpos[:, joints] + uniform(
            -noise.joint_pos_rad, noise.joint_pos_rad, (k, len(joints))
        )
        qpos[:, joints] = np.clip(noisy, low, high)
        return qpos, qvel

    def advance(self):
        self._count_failures()
        self.motion_frame += 1
        ended = np.flatnonzero(self.motion_frame >= self.num_frames)
        if not ended.size:
            return
        self.motion_frame[ended] = self.num_frames - 1  # the last frame, unless it goes on
        if self.clip_end == "truncate":
            self.truncated[ended] = True  # the row resets this step
            return
        # resample: the episode goes on from a new start, the robot teleported onto the clip
        going_on = ended[~(self.terminated[ended] | self.truncated[ended])]
        self.motion_frame[going_on] = self.sample_start_frames(len(going_on))
        qpos, qvel = self.reference_state(self.motion_frame[going_on])
        self.write_state(going_on, qpos, qvel)

    def _count_failures(self) -> None:
        """Failures land in the bin of the frame where the env failed (time-outs do not count);
        the running average forgets slowly so sampling follows what the policy finds hard now."""
        failed = self.motion_frame[self.terminated & ~self.truncated]
        self._failed_in_bin[:] = 0.0
        np.add.at(self._failed_in_bin, failed * self.num_bins // self.num_frames, 1.0)
        ema = self.sampling.ema
        self.bin_failures *= 1 - ema
        self.bin_failures += ema * self._failed_in_bin


def _euler_quat(roll: np.ndarray, pitch: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """(w, x, y, z) of the extrinsic x-y-z rotation (roll, then pitch, then yaw)."""
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
    ).astype(np.float32)
