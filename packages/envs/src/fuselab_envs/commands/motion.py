"""``motion``: motion clips to imitate (BeyondMimic-style tracking), one frame per env.

The clips (one file, a directory of them, a manifest with weights, or a list: see
:mod:`fuselab_envs.motion.dataset`) are loaded once when the task is built, resampled to the
control rate and laid end to end in one table, handed to the fused kernels as task arrays
(``motion_*``, the tracked ``bodies`` in the entity's order); terms read each env's frame of
that table (the state buffer ``motion_frame``, a global frame index), so after start-up no
motion file is read again and no Python touches a frame per env. Each env tracks one clip from
a start frame to that clip's last frame. A step::

    score frame f -> failure statistics (at the frame where each env failed) -> frame advance
    to f + 1 -> clip end -> resets (reference state initialization with noise) -> observe f + 1

Episodes start at a clip's first frame (``start: start``), uniformly (``uniform``) or
adaptively (``adaptive``): each clip cut into bins of ``bin_s`` seconds, the bins weighted by a
running average of the failures in them, smoothed back over ``smoothing_bins`` bins of the same
clip (a failure is often caused by the seconds before it), mixed with a ``uniform_ratio`` share
spread over the clips by their weights. A reset puts the robot on the reference at the start
frame plus uniform noise (``reset_*``: half-widths). At its clip's end an episode is truncated
or, with ``clip_end: resample``, goes on from a new (clip, start frame), the robot put on the
clip there.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from fuselab_env_core.commands import Command, CommandContext, command
from fuselab_env_core.events import euler_quat
from fuselab_env_core.ranges import Fraction, NonNegativeFloat, PositiveFloat, PositiveInt
from fuselab_env_core.rotations import np_quat_apply_inverse, np_quat_mul

if TYPE_CHECKING:
    from fuselab_envs.motion.lead import Lead

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
        files: tuple[str, ...] | None = None,
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
        lead_in_s: NonNegativeFloat = 0.0,
        lead_out_s: NonNegativeFloat = 0.0,
    ):
        from fuselab_envs.motion import DEFAULT_MOTION_PATH
        from fuselab_envs.motion.dataset import load_dataset

        if file is not None and files is not None:
            where = context.where
            raise ValueError(
                f"{where}.file, {where}.files: expected one of them (a file, directory or "
                f"manifest; or a list of them), got both: {file!r} and {list(files)!r}"
            )
        facts, n = context.facts, context.num_envs
        self.dataset = dataset = load_dataset(
            files if files is not None else Path(file) if file else DEFAULT_MOTION_PATH,
            joint_names=facts.joint_names,
            body_names=facts.body_names,
            fps=1.0 / context.step_dt,
            lead=_lead(context, lead_in_s, lead_out_s),
        )
        self.facts, self.table, self.clip_end = facts, dataset.table, clip_end
        self.start, self.failure_ema = start, failure_ema
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
        table = dataset.table
        self.num_frames = table.num_frames  # of every clip together
        tracked = [table.body_index(name) for name in self.body_names]
        self.arrays = {
            "motion_joint_pos": table.joint_pos,
            "motion_joint_vel": table.joint_vel,
            "motion_body_pos_w": np.ascontiguousarray(table.body_pos_w[:, tracked]),
            "motion_body_quat_w": np.ascontiguousarray(table.body_quat_w[:, tracked]),
            "motion_body_lin_vel_w": np.ascontiguousarray(table.body_lin_vel_w[:, tracked]),
            "motion_body_ang_vel_w": np.ascontiguousarray(table.body_ang_vel_w[:, tracked]),
        }
        root = table.body_index(root_body)
        self._root_pos = table.body_pos_w[:, root]
        self._root_quat = table.body_quat_w[:, root]
        self._root_lin_vel = table.body_lin_vel_w[:, root]
        # MuJoCo's free joint takes angular velocity in the body frame: turned once per clip.
        self._root_ang_vel_b = np_quat_apply_inverse(self._root_quat, table.body_ang_vel_w[:, root])
        self._clip_of_frame = dataset.clip_of_frame
        self.motion_frame = np.zeros(n, np.int32)  # each env's frame of the table
        self.motion_clip = np.zeros(n, np.int32)  # each env's clip
        self.motion_end = np.full(n, dataset.frames[0], np.int32)  # one past its clip's end
        self.state = {"motion_frame": self.motion_frame}
        self._bins(bin_s, context.step_dt)
        self._qpos = np.zeros((n, facts.nq), np.float32)  # reference states (reset_to)
        self._qvel = np.zeros((n, facts.nv), np.float32)
        log.info(
            "motion %s: %d frames at %g fps (%.1f s; lead-in %g s, lead-out %g s), %d sampling "
            "bins, %s starts, clip end: %s",
            table.source,
            self.num_frames,
            table.fps,
            self.num_frames / table.fps,
            lead_in_s,
            lead_out_s,
            self.num_bins,
            start,
            clip_end,
        )

    def _bins(self, bin_s: float, step_dt: float) -> None:
        """Each clip cut into bins of about ``bin_s`` seconds, numbered clip after clip."""
        data = self.dataset
        clip_bins = np.maximum(1, np.ceil(data.frames * step_dt / bin_s)).astype(np.int64)
        self.num_bins = int(clip_bins.sum())
        self.bin_clip = np.repeat(np.arange(data.num_clips), clip_bins)  # each bin's clip
        self._clip_bins = clip_bins
        self._first_bin = np.concatenate([[0], np.cumsum(clip_bins)[:-1]])
        clip = self._clip_of_frame
        local = np.arange(self.num_frames) - data.starts[clip]
        self._bin_of_frame = self._first_bin[clip] + local * clip_bins[clip] // data.frames[clip]
        # the uniform share: each clip's weight spread evenly over its bins
        self._uniform = data.weights[self.bin_clip] / clip_bins[self.bin_clip]
        self.bin_failures = np.zeros(self.num_bins, np.float64)  # running average per bin
        self._failed_in_bin = np.zeros(self.num_bins, np.float64)

    # -- the reference --------------------------------------------------------------------------

    def reference_state(self, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(qpos, qvel) float32 that put the robot exactly on the table at ``frames`` (views of
        this command's buffers: valid until the next call)."""
        k = len(frames)
        qpos, qvel = self._qpos[:k], self._qvel[:k]
        self._write_reference(frames, qpos, qvel)
        return qpos, qvel

    def set_frames(self, env_ids: np.ndarray, frames: np.ndarray) -> None:
        """Put ``env_ids`` at ``frames`` of the table, each tracking the clip that frame is in
        (the physics state is the caller's: see :meth:`reference_state`)."""
        clips = self._clip_of_frame[frames]
        self.motion_frame[env_ids] = frames
        self.motion_clip[env_ids] = clips
        self.motion_end[env_ids] = self.dataset.ends[clips]

    def sample_start_frames(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` start frames of the table (each in the clip it starts)."""
        data = self.dataset
        if self.start == "adaptive":
            bins = rng.choice(self.num_bins, size=count, p=self.bin_probabilities())
            clips = self.bin_clip[bins]
            frames_per_bin = data.frames[clips] / self._clip_bins[clips]
            local = ((bins - self._first_bin[clips] + rng.random(count)) * frames_per_bin).astype(
                np.int32
            )
            return (data.starts[clips] + np.minimum(local, data.frames[clips] - 2)).astype(np.int32)
        clips = (
            np.zeros(count, np.int64)
            if data.num_clips == 1  # no draw: one clip's random stream is its own
            else rng.choice(data.num_clips, size=count, p=data.weights)
        )
        if self.start == "start":
            return data.starts[clips].astype(np.int32)
        last = data.frames[clips] - 1 if data.num_clips > 1 else int(data.frames[0]) - 1
        return (data.starts[clips] + rng.integers(0, last, count)).astype(np.int32)

    def bin_probabilities(self) -> np.ndarray:
        """Adaptive starts: bins weighted by their recent failures, smoothed backwards in time
        within their clip, mixed with a uniform share (spread over the clips by weight)."""
        weights = self.bin_failures.copy()
        for lag in range(1, self.smoothing_bins):
            same_clip = self.bin_clip[:-lag] == self.bin_clip[lag:]
            weights[:-lag] += np.where(same_clip, self.bin_failures[lag:], 0.0) * (
                self.smoothing_decay**lag
            )
        if weights.sum() <= 0:
            return self._uniform
        return (1 - self.uniform_ratio) * weights / weights.sum() + (
            self.uniform_ratio * self._uniform
        )

    # -- the Command hooks ----------------------------------------------------------------------

    def reset(self, env, env_ids, qpos, qvel):
        """Reference state initialization: a start frame, the reference state there, noise."""
        frames = self.sample_start_frames(env.rng, len(env_ids))
        self.set_frames(env_ids, frames)
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
        ended = np.flatnonzero(self.motion_frame >= self.motion_end)
        if not ended.size:
            return
        self.motion_frame[ended] = self.motion_end[ended] - 1  # the last frame, unless it goes on
        if self.clip_end == "truncate":
            env.truncated[ended] = True  # the row resets this step
            return
        # resample: the episode goes on from a new start, the robot put onto the clip
        going_on = ended[~(env.terminated[ended] | env.truncated[ended])]
        self.set_frames(going_on, self.sample_start_frames(env.rng, len(going_on)))
        qpos, qvel = self.reference_state(self.motion_frame[going_on])
        env.write_state(going_on, qpos, qvel)

    def describe(self) -> dict[str, Any]:
        data = self.dataset
        return {
            "kind": "motion",
            "source": str(self.table.source),
            "frames": self.num_frames,
            "fps": self.table.fps,
            "bodies": list(self.body_names),
            "clips": [
                {
                    "name": data.names[c],
                    "first_frame": int(data.starts[c]),
                    "frames": int(data.frames[c]),
                    "weight": float(data.weights[c]),
                    "lead_in": int(data.lead_in[c]),  # frames from rest into the clip...
                    "lead_out": int(data.lead_out[c]),  # ... and back to rest (not measured)
                }
                for c in range(data.num_clips)
            ],
        }

    # -- internals ------------------------------------------------------------------------------

    def _write_reference(self, frames: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        facts = self.facts
        qpos[:] = 0.0
        qvel[:] = 0.0
        qpos[:, 0:3] = self._root_pos[frames]
        qpos[:, 3:7] = self._root_quat[frames]
        qpos[:, facts.joint_qpos_adr] = self.table.joint_pos[frames]
        qvel[:, 0:3] = self._root_lin_vel[frames]
        qvel[:, 3:6] = self._root_ang_vel_b[frames]
        qvel[:, facts.joint_qvel_adr] = self.table.joint_vel[frames]

    def _count_failures(self, env) -> None:
        """Failures land in the bin of the frame where the env failed (time-outs do not count);
        the running average forgets slowly so sampling follows what the policy finds hard now."""
        failed = self.motion_frame[env.terminated & ~env.truncated]
        self._failed_in_bin[:] = 0.0
        np.add.at(self._failed_in_bin, self._bin_of_frame[failed], 1.0)
        self.bin_failures *= 1 - self.failure_ema
        self.bin_failures += self.failure_ema * self._failed_in_bin


def _lead(context: CommandContext, lead_in_s: float, lead_out_s: float) -> Lead | None:
    """The clips' lead frames (from and to the robot's initial pose), or None for none."""
    from fuselab_envs.motion.convert import load_model
    from fuselab_envs.motion.lead import Lead

    if not (lead_in_s or lead_out_s):
        return None
    if context.mjcf is None:
        raise ValueError(
            f"{context.where}.lead_in_s, lead_out_s: lead frames need the robot's model file "
            f"(forward kinematics); this env was built without one: set both to 0"
        )
    return Lead(load_model(context.mjcf), context.init_qpos, lead_in_s, lead_out_s)
