"""``motion``: a motion clip to imitate (BeyondMimic-style tracking), one frame per env.

The clip is loaded once when the task is built, resampled to the control rate, and handed to
the fused kernels as task arrays (``motion_*``, the tracked ``bodies`` in the entity's order);
terms read each env's frame (the state buffer ``motion_frame``) from them, so after start-up
the motion file is never read again and no Python touches a frame per env. A step::

    score frame f -> failure statistics (at the frame where each env failed) -> frame advance
    to f + 1 -> clip end -> resets (reference state initialization with noise) -> observe f + 1

Episodes start at frame 0 (``start: start``), uniformly (``uniform``) or adaptively
(``adaptive``): bins of ``bin_s`` seconds weighted by a running average of the failures in
them, smoothed back over ``smoothing_bins`` bins (a failure is often caused by the seconds
before it), mixed with a ``uniform_ratio`` share. A reset puts the robot on the reference at the
start frame plus uniform noise (``reset_*``: half-widths). At the clip's end an episode is
truncated or, with ``clip_end: resample``, goes on from a new start frame (the robot put on the
clip there).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np

from fuselab_env_core.commands import Command, CommandContext, command
from fuselab_env_core.events import euler_quat
from fuselab_env_core.ranges import Fraction, NonNegativeFloat, PositiveFloat, PositiveInt
from fuselab_env_core.rotations import np_quat_apply_inverse, np_quat_mul

log = logging.getLogger(__name__)

StartMode = Literal["start", "uniform", "adaptive"]
ClipEnd = Literal["truncate", "resample"]  # at the clip's end: time out, or a new start frame


@command("motion")
class MotionCommand(Command):
    def __init__(
        self,
        context: CommandContext,
        bodies: tuple[str, ...],
        file: str | None = None,
        root_body: str = "pelvis",
        clip_end: ClipEnd = "truncate",
        start: StartMode = "adaptive",
        bin_s: PositiveFloat = 1.0,
        failure_ema: Fraction = 0.001,
        uniform_ratio: Fraction = 0.1,
        smoothing_bins: PositiveInt = 3,
        smoothing_decay: Fraction = 0.8,
        reset_pos_xy_m: NonNegativeFloat = 0.05,
        reset_pos_z_m: NonNegativeFloat = 0.01,
        reset_roll_pitch_rad: NonNegativeFloat = 0.1,
        reset_yaw_rad: NonNegativeFloat = 0.2,
        reset_lin_vel_mps: NonNegativeFloat = 0.2,
        reset_ang_vel_radps: NonNegativeFloat = 0.2,
        reset_joint_pos_rad: NonNegativeFloat = 0.1,
    ):
        from fuselab_envs.motion import DEFAULT_MOTION_PATH, load_motion

        facts, n = context.facts, context.num_envs
        clip = load_motion(
            Path(file) if file else DEFAULT_MOTION_PATH,
            joint_names=facts.joint_names,
            body_names=facts.body_names,
            fps=1.0 / context.step_dt,
        )
        self.facts, self.clip, self.clip_end = facts, clip, clip_end
        self.start, self.bin_s, self.failure_ema = start, bin_s, failure_ema
        self.uniform_ratio = uniform_ratio
        self.smoothing_bins, self.smoothing_decay = smoothing_bins, smoothing_decay
        self.reset_noise = {
            "pos_xy": reset_pos_xy_m,
            "pos_z": reset_pos_z_m,
            "roll_pitch": reset_roll_pitch_rad,
            "yaw": reset_yaw_rad,
            "lin_vel": reset_lin_vel_mps,
            "ang_vel": reset_ang_vel_radps,
            "joint_pos": reset_joint_pos_rad,
        }
        self.body_names = tuple(bodies)
        self.num_frames = clip.num_frames
        tracked = [clip.body_index(name) for name in self.body_names]
        self.arrays = {
            "motion_joint_pos": clip.joint_pos,
            "motion_joint_vel": clip.joint_vel,
            "motion_body_pos_w": np.ascontiguousarray(clip.body_pos_w[:, tracked]),
            "motion_body_quat_w": np.ascontiguousarray(clip.body_quat_w[:, tracked]),
            "motion_body_lin_vel_w": np.ascontiguousarray(clip.body_lin_vel_w[:, tracked]),
            "motion_body_ang_vel_w": np.ascontiguousarray(clip.body_ang_vel_w[:, tracked]),
        }
        root = clip.body_index(root_body)
        self._root_pos = clip.body_pos_w[:, root]
        self._root_quat = clip.body_quat_w[:, root]
        self._root_lin_vel = clip.body_lin_vel_w[:, root]
        # MuJoCo's free joint takes angular velocity in the body frame: turned once per clip.
        self._root_ang_vel_b = np_quat_apply_inverse(self._root_quat, clip.body_ang_vel_w[:, root])
        self.motion_frame = np.zeros(n, np.int32)
        self.state = {"motion_frame": self.motion_frame}
        self.num_bins = max(1, math.ceil(self.num_frames * context.step_dt / bin_s))
        self.bin_failures = np.zeros(self.num_bins, np.float64)  # running average per bin
        self._failed_in_bin = np.zeros(self.num_bins, np.float64)
        self._qpos = np.zeros((n, facts.nq), np.float32)  # reference states (reset_to)
        self._qvel = np.zeros((n, facts.nv), np.float32)
        log.info(
            "motion %s: %d frames at %g fps (%.1f s), %d sampling bins, %s starts, clip end: %s",
            clip.source,
            self.num_frames,
            clip.fps,
            clip.duration_s,
            self.num_bins,
            start,
            clip_end,
        )

    # -- the reference --------------------------------------------------------------------------

    def reference_state(self, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(qpos, qvel) float32 that put the robot exactly on the clip at ``frames`` (views of
        this command's buffers: valid until the next call)."""
        k = len(frames)
        qpos, qvel = self._qpos[:k], self._qvel[:k]
        self._write_reference(frames, qpos, qvel)
        return qpos, qvel

    def sample_start_frames(self, rng: np.random.Generator, count: int) -> np.ndarray:
        if self.start == "start":
            return np.zeros(count, np.int32)
        if self.start == "uniform":
            return rng.integers(0, self.num_frames - 1, count).astype(np.int32)
        bins = rng.choice(self.num_bins, size=count, p=self.bin_probabilities())
        frames_per_bin = self.num_frames / self.num_bins
        frames = (bins + rng.random(count)) * frames_per_bin
        return np.minimum(frames.astype(np.int32), self.num_frames - 2)

    def bin_probabilities(self) -> np.ndarray:
        """Adaptive starts: bins weighted by their recent failures, smoothed backwards in time,
        mixed with a uniform share."""
        weights = self.bin_failures.copy()
        for lag in range(1, self.smoothing_bins):
            weights[:-lag] += self.bin_failures[lag:] * self.smoothing_decay**lag
        uniform = np.full(self.num_bins, 1.0 / self.num_bins)
        if weights.sum() <= 0:
            return uniform
        return (1 - self.uniform_ratio) * weights / weights.sum() + self.uniform_ratio * uniform

    # -- the Command hooks ----------------------------------------------------------------------

    def reset(self, env, env_ids, qpos, qvel):
        """Reference state initialization: a start frame, the reference state there, noise."""
        frames = self.sample_start_frames(env.rng, len(env_ids))
        self.motion_frame[env_ids] = frames
        self._write_reference(frames, qpos, qvel)
        noise, k, uniform = self.reset_noise, len(env_ids), env.rng.uniform
        qpos[:, 0:2] += uniform(-noise["pos_xy"], noise["pos_xy"], (k, 2))
        qpos[:, 2] += uniform(-noise["pos_z"], noise["pos_z"], k)
        roll, pitch = (uniform(-noise["roll_pitch"], noise["roll_pitch"], k) for _ in range(2))
        yaw = uniform(-noise["yaw"], noise["yaw"], k)
        turn = euler_quat(roll, pitch, yaw).astype(np.float32)
        qpos[:, 3:7] = np_quat_mul(turn, qpos[:, 3:7])
        qvel[:, 0:3] += uniform(-noise["lin_vel"], noise["lin_vel"], (k, 3))
        qvel[:, 3:6] += uniform(-noise["ang_vel"], noise["ang_vel"], (k, 3))
        joints = self.facts.joint_qpos_adr
        low, high = self.facts.joint_ranges[:, 0], self.facts.joint_ranges[:, 1]
        noisy = qpos[:, joints] + uniform(-noise["joint_pos"], noise["joint_pos"], (k, len(joints)))
        qpos[:, joints] = np.clip(noisy, low, high)

    def advance(self, env):
        self._count_failures(env)
        self.motion_frame += 1
        ended = np.flatnonzero(self.motion_frame >= self.num_frames)
        if not ended.size:
            return
        self.motion_frame[ended] = self.num_frames - 1  # the last frame, unless it goes on
        if self.clip_end == "truncate":
            env.truncated[ended] = True  # the row resets this step
            return
        # resample: the episode goes on from a new start, the robot put onto the clip
        going_on = ended[~(env.terminated[ended] | env.truncated[ended])]
        self.motion_frame[going_on] = self.sample_start_frames(env.rng, len(going_on))
        qpos, qvel = self.reference_state(self.motion_frame[going_on])
        env.write_state(going_on, qpos, qvel)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "motion",
            "source": str(self.clip.source),
            "frames": self.num_frames,
            "fps": self.clip.fps,
            "bodies": list(self.body_names),
        }

    # -- internals ------------------------------------------------------------------------------

    def _write_reference(self, frames: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        facts = self.facts
        qpos[:] = 0.0
        qvel[:] = 0.0
        qpos[:, 0:3] = self._root_pos[frames]
        qpos[:, 3:7] = self._root_quat[frames]
        qpos[:, facts.joint_qpos_adr] = self.clip.joint_pos[frames]
        qvel[:, 0:3] = self._root_lin_vel[frames]
        qvel[:, 3:6] = self._root_ang_vel_b[frames]
        qvel[:, facts.joint_qvel_adr] = self.clip.joint_vel[frames]

    def _count_failures(self, env) -> None:
        """Failures land in the bin of the frame where the env failed (time-outs do not count);
        the running average forgets slowly so sampling follows what the policy finds hard now."""
        failed = self.motion_frame[env.terminated & ~env.truncated]
        self._failed_in_bin[:] = 0.0
        np.add.at(self._failed_in_bin, failed * self.num_bins // self.num_frames, 1.0)
        self.bin_failures *= 1 - self.failure_ema
        self.bin_failures += self.failure_ema * self._failed_in_bin
