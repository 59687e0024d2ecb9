"""fuselab-eval: does a trained policy walk to command, does it track its clip?

A deterministic rollout (the policy's mean action, seeded env) of a checkpoint's policy on many
envs of MuJoCo CPU, measured from the physics state, never from rewards:

What is measured follows the task's command (any task built on one of these commands):

* a velocity command (``uniform_velocity``, G1WalkFlat): every env keeps one command for the
  window (drawn from the training ranges, one kind per env: forward, backward, lateral,
  turning, standing); after ``SETTLE_S`` the base velocity in the heading frame is compared
  with it: RMS planar velocity error (m/s), RMS yaw-rate error (rad/s), the fraction of envs
  that fell, the same per command kind, and what a robot standing still would score on the
  same commands.
* a motion command (``motion``, G1MotionTracking): the clip from its first frame to its last,
  then from starts spread over the clip: success rate (no failure before the clip's end),
  global and root-relative MPKPE of the tracked bodies (mm), end-effector position error (mm),
  joint position (rad) and joint velocity (rad/s) errors, and how far the robot travels along
  the clip's path against the clip (``travel_ratio``: under 1 for a robot that falls behind).
  Resets start exactly on the clip (no reset noise).

Observations carry the noise the policy was trained with. A row is measured until its episode
ends; after a fall it counts as fallen and is measured no more. The robot is the nominal one
(``events=nominal``: only the events that set the reset state run), the one the run trained on
(``events=train``: every event of the task, or the nominal robot for a run trained with
``env.randomize=false``) or the task's randomized one whatever the run trained on
(``events=randomized``: a nominal-trained policy under the default's randomization);
``push=SPEED`` adds pushes (every 1-3 s, the base's planar velocity changed by up to SPEED m/s
each way) to measure robustness.

    fuselab-eval run=runs/g1_walk_flat/<date_time> num_envs=256 seconds=10 json=eval.json
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from fuselab_env_core.backend import check_positive_float
from fuselab_env_core.entity import Entity
from fuselab_env_core.rotations import np_quat_apply, np_yaw
from fuselab_rl.checkpoint import load_checkpoint, write_text_atomic
from fuselab_rl.play import load_policy, policy_actions

log = logging.getLogger(__name__)

SETTLE_S = 1.0  # walk: seconds from the start before velocities are measured
NUM_ENVS, SECONDS, SEED = 256, 10.0, 0  # the defaults (configs/eval.yaml gives the CLI the same)
COMMAND_KINDS = ("forward", "backward", "lateral", "turning", "standing")
MIN_COMMAND_FRACTION = 0.25  # a kind's command is at least this share of its range's end


# -- walking ------------------------------------------------------------------------------------


def walk_commands(ranges: DictConfig | dict, num_envs: int, rng: np.random.Generator):
    """(commands (N, 3) float32, kind index (N,)): env k gets kind k mod 5, its command drawn
    uniformly from the training range of that kind's axis, at least MIN_COMMAND_FRACTION of
    the range's end (forward: vx > 0, backward: vx < 0, lateral: vy, turning: wz)."""
    kinds = np.arange(num_envs) % len(COMMAND_KINDS)
    commands = np.zeros((num_envs, 3), np.float32)
    x_low, x_high = ranges["lin_vel_x"]
    y_reach = max(abs(v) for v in ranges["lin_vel_y"])
    z_reach = max(abs(v) for v in ranges["ang_vel_z"])
    for kind, axis, low, high in (
        (0, 0, MIN_COMMAND_FRACTION * max(x_high, 0.0), max(x_high, 0.0)),
        (1, 0, min(x_low, 0.0), MIN_COMMAND_FRACTION * min(x_low, 0.0)),
        (2, 1, MIN_COMMAND_FRACTION * y_reach, y_reach),
        (3, 2, MIN_COMMAND_FRACTION * z_reach, z_reach),
    ):
        rows = np.flatnonzero(kinds == kind)
        values = rng.uniform(low, high, len(rows))
        if kind in (2, 3):  # lateral and turning: either way
            values *= rng.choice([-1.0, 1.0], len(rows))
        commands[rows, axis] = values
    return commands, kinds


def heading_frame_velocity(qpos: np.ndarray, qvel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Planar base velocity in the heading (yaw-only) frame (N, 2) and the yaw rate (N,), from a
    floating base's MuJoCo state (qvel: world linear, body-frame angular velocity)."""
    yaw = np_yaw(qpos[:, 3:7].astype(np.float64))
    cos, sin = np.cos(yaw), np.sin(yaw)
    vx, vy = qvel[:, 0], qvel[:, 1]
    planar = np.stack([cos * vx + sin * vy, -sin * vx + cos * vy], axis=-1)
    yaw_rate = np_quat_apply(qpos[:, 3:7].astype(np.float64), qvel[:, 3:6].astype(np.float64))
    return planar, yaw_rate[:, 2]


class VelocityErrors:
    """Sums of squared velocity errors per env; RMS over the measured (env, step) samples."""

    def __init__(self, commands: np.ndarray):
        self.commands = commands.astype(np.float64)
        n = len(commands)
        self.lin_sq, self.yaw_sq = np.zeros(n), np.zeros(n)
        self.samples = np.zeros(n, np.int64)

    def add(self, planar: np.ndarray, yaw_rate: np.ndarray, rows: np.ndarray) -> None:
        c = self.commands[rows]
        self.lin_sq[rows] += np.sum((planar[rows] - c[:, :2]) ** 2, axis=-1)
        self.yaw_sq[rows] += (yaw_rate[rows] - c[:, 2]) ** 2
        self.samples[rows] += 1

    def summary(self, rows: np.ndarray, fallen: np.ndarray) -> dict[str, float]:
        """Errors of ``rows`` (an index array), and the standing-still reference on them."""
        count = self.samples[rows].sum()
        c = self.commands[rows]
        return {
            "lin_vel_rms_mps": _root_mean(self.lin_sq[rows].sum(), count),
            "yaw_rate_rms_radps": _root_mean(self.yaw_sq[rows].sum(), count),
            "fall_fraction": float(fallen[rows].mean()) if len(rows) else math.nan,
            "standing_lin_vel_rms_mps": _root_mean(np.sum(c[:, :2] ** 2), len(rows)),
            "standing_yaw_rate_rms_radps": _root_mean(np.sum(c[:, 2] ** 2), len(rows)),
            "envs": int(len(rows)),
        }


def walk_rollout(
    cfg: DictConfig, policy: Callable, commands: np.ndarray, seconds: float
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, Entity]]:
    """The walk evaluation's rollout: the env of ``cfg`` (edited in place: one command per env
    for the window, no time-out), env k held at ``commands[k]``. After ``SETTLE_S``, once per
    step: the heading-frame planar velocity (N, 2), the yaw rate (N,), the envs fallen so far
    (N,) and the robot's entity: the same arrays every step, updated in place (copy to keep)."""
    from fuselab_envs.registry import make_env

    name = command_entry(cfg, VELOCITY)
    params = cfg.commands[name].setdefault("params", {})
    params.resample_s = SETTLE_S + seconds + 10.0  # one command for the whole window
    params.heading_fraction = 0.0  # its yaw rate held, not steered to a heading
    cfg.env.episode_length_s = SETTLE_S + seconds + 10.0  # no time-out in the window
    env = make_env(cfg)
    try:
        env.commands[name].hold(commands)
        env.terms.observe()  # the observations show the new commands
        fallen = np.zeros(env.num_envs, np.bool_)
        settle_steps = round(SETTLE_S / env.step_dt)
        obs = env.terms.buffers.obs
        for step in range(settle_steps + round(seconds / env.step_dt)):
            result = env.step(policy_actions(policy, obs["actor"]))
            obs = result.obs
            fallen |= result.terminated
            if step >= settle_steps:
                planar, yaw_rate = heading_frame_velocity(env.robot.qpos, env.robot.qvel)
                yield planar, yaw_rate, fallen, env.robot
    finally:
        env.close()


def walk_checkpoint(
    checkpoint_path: str, num_envs: int, seed: int = SEED
) -> tuple[DictConfig, Callable, np.ndarray, np.ndarray]:
    """A walking checkpoint's evaluation config, policy, commands and their kinds: what
    fuselab-eval rolls out, for the tools that read the same rollout another way."""
    checkpoint = load_checkpoint(checkpoint_path)
    cfg = eval_config(checkpoint["config"], num_envs, seed)
    if evaluator_of(cfg) != VELOCITY:
        raise ValueError(
            f"checkpoint: expected a walking run's (a {VELOCITY} command); "
            f"{checkpoint['path']!r} is a {cfg.task_name!r} run's"
        )
    commands, kinds = task_walk_commands(cfg, num_envs, seed)
    return cfg, load_policy(checkpoint), commands, kinds


def task_walk_commands(cfg: DictConfig, num_envs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``walk_commands`` drawn from the ranges of ``cfg``'s velocity command."""
    ranges = velocity_ranges(cfg.commands[command_entry(cfg, VELOCITY)])
    return walk_commands(ranges, num_envs, np.random.default_rng(seed))


def evaluate_walk(cfg: DictConfig, policy: Callable, seconds: float, seed: int) -> dict:
    commands, kinds = task_walk_commands(cfg, cfg.num_envs, seed)
    errors = VelocityErrors(commands)
    fallen = np.zeros(len(commands), np.bool_)  # the rollout's own array after its first step
    for planar, yaw_rate, fallen, _ in walk_rollout(cfg, policy, commands, seconds):
        errors.add(planar, yaw_rate, np.flatnonzero(~fallen))
    report = {"overall": errors.summary(np.arange(len(kinds)), fallen)}
    for k, kind in enumerate(COMMAND_KINDS):
        report[kind] = errors.summary(np.flatnonzero(kinds == k), fallen)
    return report


def velocity_ranges(spec: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """The training ranges of a ``uniform_velocity`` command entry (its defaults filled in)."""
    from fuselab_env_core.registry import Signature
    from fuselab_envs.commands.velocity import UniformVelocityCommand

    given = spec.get("params")
    if OmegaConf.is_config(given):  # (lists in a DictConfig are ListConfigs)
        given = OmegaConf.to_container(given, resolve=True)
    params = Signature.of(UniformVelocityCommand.__init__, skip=2).bind("commands", given, None)
    return {axis: params[axis] for axis in ("lin_vel_x", "lin_vel_y", "ang_vel_z")}


# -- motion tracking ----------------------------------------------------------------------------


TRAVEL_MIN_SPEED_MPS = 0.1  # a clip root slower than this stays in place (travel_ratio)


class TrackingErrors:
    """Per-env sums of the tracking errors of the rows measured; means over (env, step) of the
    clips' own frames (a clip's lead frames from and to rest are tracked, not measured).

    ``travel_ratio`` says whether the robot keeps up with a clip that travels: how far its root
    moved along the clip root's direction of travel, over how far the clip's root moved, on the
    frames where the clip's root moves (NaN for a clip that stays in place). A robot that falls
    behind a walk scores under 1, one standing still 0."""

    METRICS = (
        "mpkpe_mm",
        "root_relative_mpkpe_mm",
        "end_effector_mm",
        "joint_pos_rad",
        "joint_vel_radps",
    )

    def __init__(self, motion: Any, end_effectors: list[str], num_envs: int, root: str = "pelvis"):
        names = list(motion.body_names)
        self.end_effectors = [names.index(name) for name in end_effectors]
        self.root = names.index(root)
        self.motion = motion
        self.arrays = motion.arrays
        self.measured = motion.dataset.motion_frames  # (T,) bool
        self.sums = {name: np.zeros(num_envs) for name in self.METRICS}
        self.samples = np.zeros(num_envs, np.int64)
        self.travel = np.zeros(num_envs)  # the root's speeds along the clip root's direction
        self.clip_travel = np.zeros(num_envs)  # the clip root's speeds, on the same frames

    def add(self, env: Any, rows: np.ndarray) -> None:
        """The rows' state after a step against the frame that step was scored on (the frame
        before the one ``motion_frame`` now shows)."""
        frames = self.motion.motion_frame[rows] - 1
        rows, frames = rows[self.measured[frames]], frames[self.measured[frames]]
        if not len(rows):
            return
        pos = env.robot.body_pos_w[rows].astype(np.float64)
        ref = self.arrays["motion_body_pos_w"][frames].astype(np.float64)
        error = np.linalg.norm(pos - ref, axis=-1)  # (rows, bodies) metres
        relative = np.linalg.norm(
            (pos - pos[:, self.root : self.root + 1]) - (ref - ref[:, self.root : self.root + 1]),
            axis=-1,
        )
        joint_pos = self.arrays["motion_joint_pos"][frames]
        joint_vel = self.arrays["motion_joint_vel"][frames]
        s = self.sums
        s["mpkpe_mm"][rows] += 1e3 * error.mean(axis=1)
        s["root_relative_mpkpe_mm"][rows] += 1e3 * relative.mean(axis=1)
        s["end_effector_mm"][rows] += 1e3 * error[:, self.end_effectors].mean(axis=1)
        s["joint_pos_rad"][rows] += np.abs(env.robot.joint_pos[rows] - joint_pos).mean(axis=1)
        s["joint_vel_radps"][rows] += np.abs(env.robot.joint_vel[rows] - joint_vel).mean(axis=1)
        self.samples[rows] += 1
        self._add_travel(env, rows, frames)

    def _add_travel(self, env: Any, rows: np.ndarray, frames: np.ndarray) -> None:
        clip_vel = self.arrays["motion_body_lin_vel_w"][frames, self.root, :2].astype(np.float64)
        speed = np.linalg.norm(clip_vel, axis=1)
        moving = speed > TRAVEL_MIN_SPEED_MPS
        rows, clip_vel, speed = rows[moving], clip_vel[moving], speed[moving]
        robot_vel = env.robot.body_lin_vel_w[rows, self.root, :2].astype(np.float64)
        self.travel[rows] += np.einsum("ij,ij->i", robot_vel, clip_vel) / speed
        self.clip_travel[rows] += speed

    def summary(self, rows: np.ndarray) -> dict[str, float]:
        """Means per sample over ``rows``, as Python floats (JSON takes no NumPy scalar)."""
        count = int(self.samples[rows].sum())
        means = {
            name: float(self.sums[name][rows].sum()) / count if count else math.nan
            for name in self.METRICS
        }
        clip_travel = float(self.clip_travel[rows].sum())
        means["travel_ratio"] = (
            float(self.travel[rows].sum()) / clip_travel if clip_travel else math.nan
        )
        return means


def evaluate_tracking(cfg: DictConfig, policy: Callable, seconds: float, seed: int) -> dict:
    """Every clip from its first frame, then from starts spread over it; each row runs to its
    clip's end or its first failure. Env k tracks clip k mod C of a dataset of C clips, so
    every clip gets about N / C envs; a dataset's figures are also given per clip."""
    del seconds  # a tracking episode is the rest of its clip
    params = cfg.commands[command_entry(cfg, MOTION)].setdefault("params", {})
    for key in [k for k in params if str(k).startswith("reset_")]:  # no reset noise
        params[key] = 0.0
    params.start = "start"
    params.clip_end = "truncate"
    cfg.env.episode_length_s = 1e6  # the clip's end ends each episode
    return {
        "from_first_frame": _track(cfg, policy, spread=False),
        "from_spread_starts": _track(cfg, policy, spread=True),
    }


def _track(cfg: DictConfig, policy: Callable, spread: bool) -> dict:
    from fuselab_envs.registry import make_env

    env = make_env(cfg)
    try:
        n, motion = env.num_envs, env.commands[command_entry(cfg, MOTION)]
        clips = np.arange(n) % motion.dataset.num_clips
        if n < motion.dataset.num_clips:
            raise ValueError(
                f"num_envs: {n} envs cannot track the dataset's {motion.dataset.num_clips} clips; "
                f"expected at least {motion.dataset.num_clips}"
            )
        rows = np.arange(n)
        starts = start_frames(motion.dataset, clips, spread)
        motion.set_frames(rows, starts)
        qpos, qvel = motion.reference_state(starts)
        env.write_state(rows, qpos, qvel)
        env.robot.update()
        env.terms.observe()
        errors = TrackingErrors(motion, list(cfg.bodies.end_effectors), n)
        # the failure rules: the columns of every termination but the time-outs
        calls = env.terms.plan.terminations
        rules = [k for k, call in enumerate(calls) if not call.time_out]
        active, failed = np.ones(n, np.bool_), np.zeros(n, np.bool_)
        failed_by = np.zeros((n, len(rules)), np.bool_)  # the rules that ended each failed row
        obs = env.terms.buffers.obs
        while active.any():
            result = env.step(policy_actions(policy, obs["actor"]))
            obs = result.obs
            done = result.terminated | result.truncated
            failing = active & result.terminated
            failed |= failing
            failed_by[failing] = env.terms.buffers.termination_terms[failing][:, rules]
            errors.add(env, np.flatnonzero(active & ~done))
            active &= ~done
    finally:
        env.close()

    def measured(rows: np.ndarray) -> dict[str, Any]:
        success = float(1.0 - failed[rows].mean())
        shares = {
            calls[rule].entry: float(failed_by[rows, k].mean()) for k, rule in enumerate(rules)
        }
        # a row that no rule ended failed on a non-finite action, state, reward or observation
        unexplained = failed[rows] & ~failed_by[rows].any(axis=1)
        shares["non_finite"] = float(unexplained.mean())
        return {
            "success_rate": success,
            **errors.summary(rows),
            "envs": int(len(rows)),
            "failed_by": shares,  # the share of the rows each rule ended (a row may count twice)
        }

    report = measured(np.arange(n))
    if motion.dataset.num_clips > 1:
        for c, name in enumerate(motion.dataset.names):
            report.setdefault("clips", {})[name] = measured(np.flatnonzero(clips == c))
    return report


def start_frames(dataset: Any, clips: np.ndarray, spread: bool) -> np.ndarray:
    """Each row's start frame of the table: its clip's first frame, or (``spread``) the j-th of
    a clip's n rows at j / n of the way through the clip."""
    local = np.zeros(len(clips), np.int64)
    if spread:
        for clip in np.unique(clips):
            rows = np.flatnonzero(clips == clip)
            local[rows] = np.arange(len(rows)) * (dataset.frames[clip] - 1) // len(rows)
    return (dataset.starts[clips] + local).astype(np.int32)


def worst_clips(metrics: dict[str, Any], count: int = 5) -> list[dict[str, Any]]:
    """A dataset's clips that fare worst from their first frame: lowest success, then highest
    MPKPE."""
    clips = metrics["from_first_frame"].get("clips", {})
    ranked = sorted(clips.items(), key=lambda kv: (kv[1]["success_rate"], -kv[1]["mpkpe_mm"]))
    return [{"clip": name, **values} for name, values in ranked[:count]]


# -- the command ------------------------------------------------------------------------------

VELOCITY, MOTION = "uniform_velocity", "motion"  # the commands fuselab-eval measures
EVALUATORS: dict[str, Callable[[DictConfig, Callable, float, int], dict]] = {
    VELOCITY: evaluate_walk,
    MOTION: evaluate_tracking,
}
EVENT_SETS = ("nominal", "train", "randomized")
PUSH_INTERVAL_S = (1.0, 3.0)


def command_entry(cfg: DictConfig | Mapping[str, Any], term: str) -> str:
    """The name of the ``commands`` entry built from ``term`` (the task's first such one)."""
    for name, spec in (cfg.get("commands") or {}).items():
        if (spec.get("term") or name) == term:
            return str(name)
    raise ValueError(f"commands: the task has no {term!r} command")


def evaluator_of(cfg: DictConfig | Mapping[str, Any]) -> str:
    """The command whose evaluation measures the task (its first command fuselab-eval knows)."""
    for name, spec in (cfg.get("commands") or {}).items():
        if (spec.get("term") or name) in EVALUATORS:
            return str(spec.get("term") or name)
    raise ValueError(
        f"task_name: fuselab-eval measures tasks with a {' or '.join(EVALUATORS)} command; "
        f"{cfg.get('task_name')!r} has none"
    )


def evaluate(
    source: str | Path,
    *,
    num_envs: int = NUM_ENVS,
    seconds: float = SECONDS,
    seed: int = SEED,
    events: str = "nominal",
    push: float | None = None,
    config: Mapping[str, Any] | None = None,
    field_name: str = "run",
) -> dict[str, Any]:
    """Evaluate the policy of ``source`` (a run directory: its latest checkpoint, or a
    checkpoint file) on its run's config with ``config``'s keys changed (e.g. another clip, or
    other termination thresholds); returns the report (see the module docstring)."""
    _check_window(num_envs, seconds)
    _check_events(events, push)
    checkpoint = load_checkpoint(source, field=field_name)
    run_config = changed_config(checkpoint["config"], config or {})
    task = run_config["task_name"]
    try:
        evaluator_of(run_config)
    except ValueError as error:
        raise ValueError(
            f"{field_name}: '{checkpoint['path']}' is a {task} policy; {error}"
        ) from None
    started = time.perf_counter()
    policy = load_policy(checkpoint, field_name)
    report = {
        "task": task,
        "checkpoint": checkpoint["path"],
        "iteration": checkpoint["iteration"],
        "env_steps": checkpoint.get("env_steps"),
        "train_wall_s": checkpoint.get("wall_s"),
        "config_changes": OmegaConf.to_container(OmegaConf.create(dict(config or {}))),
        **evaluate_policy(
            run_config,
            policy,
            num_envs=num_envs,
            seconds=seconds,
            seed=seed,
            events=events,
            push=push,
        ),
    }
    log.info("eval %s: %.1f s", checkpoint["path"], time.perf_counter() - started)
    return report


def changed_config(run_config: Mapping[str, Any], changes: Mapping[str, Any]) -> DictConfig:
    """The run's config with ``changes`` (a mapping of its keys, nested or dotted) set; a key the
    run's config does not have (OmegaConf's struct mode refuses it) is an error naming it and
    the nearest keys."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    from fuselab_env_core.terms import did_you_mean
    from fuselab_envs.registry import dotted_keys, flat_items

    changed = OmegaConf.create(dict(run_config))
    OmegaConf.set_struct(changed, True)
    for key, value in flat_items(changes):
        try:
            OmegaConf.update(changed, key, value, merge=True)
        except (ConfigAttributeError, ConfigKeyError) as error:
            known = dotted_keys(OmegaConf.to_container(changed))
            missing = error.full_key
            hint = did_you_mean(missing, known, cutoff=0.5, list_known=False) or "; no similar key"
            message = f"config.{missing}: no key {missing!r} in the run's config{hint}"
            raise KeyError(message) from None
    OmegaConf.set_struct(changed, False)
    return changed


def evaluate_policy(
    config: Mapping[str, Any] | DictConfig,
    policy: Callable,
    *,
    num_envs: int = NUM_ENVS,
    seconds: float = SECONDS,
    seed: int = SEED,
    events: str = "nominal",
    push: float | None = None,
) -> dict[str, Any]:
    """fuselab-eval's measurement of any ``policy`` (actor observations (B, D) -> actions
    (B, A), torch tensors) on the task of ``config`` (a run's config: resolved into a copy, as
    checkpoints save it): the report's task, window and metrics."""
    _check_window(num_envs, seconds)
    _check_events(events, push)
    cfg = eval_config(config, num_envs, seed, events, push)
    evaluator = evaluator_of(cfg)
    return {
        "task": cfg.task_name,
        "num_envs": num_envs,
        "seconds": float(seconds),
        "seed": seed,
        "events": events,
        "push_mps": push,
        "metrics": EVALUATORS[evaluator](cfg, policy, float(seconds), seed),
    }


def eval_config(
    config: Mapping[str, Any] | DictConfig,
    num_envs: int,
    seed: int,
    events: str = "nominal",
    push: float | None = None,
) -> DictConfig:
    """The config an evaluation builds its env from: ``config`` (a run's, as checkpoints save
    it) resolved into a copy, on ``num_envs`` envs of MuJoCo CPU seeded with ``seed``; with
    ``events="nominal"`` only the events that set the reset state run (``env.randomize``
    false), with ``"train"`` the events the run trained with, with ``"randomized"`` every event
    of the task's table; ``push`` adds pushes of up to that many m/s. Without the run's
    curricula: the task as configured."""
    resolved = (
        OmegaConf.to_container(config, resolve=True)
        if isinstance(config, DictConfig)
        else dict(config)
    )
    cfg = OmegaConf.create(resolved)
    assert isinstance(cfg, DictConfig)
    cfg.num_envs, cfg.backend, cfg.seed = num_envs, "mujoco", seed
    cfg.pop("curriculum", None)  # the task as configured, not a training level of it
    from fuselab_env_core.events import EVENTS

    trained_randomized = cfg.env.get("randomize", True)
    every_event = events == "randomized" or (events == "train" and trained_randomized)
    table = {name: spec for name, spec in (cfg.get("events") or {}).items() if spec is not None}
    if not every_event:  # the events that set the reset state
        table = {
            name: spec
            for name, spec in table.items()
            if EVENTS.get(spec.get("term") or name, f"events.{name}").state_inputs
        }
    cfg.env.randomize = True  # the table says which events run (an added push too)
    if push is not None:
        speed = [-float(push), float(push)]
        table["eval_push"] = {
            "term": "push_by_setting_velocity",
            "mode": "interval",
            "interval_s": list(PUSH_INTERVAL_S),
            "params": {"lin_vel_x_mps": speed, "lin_vel_y_mps": speed},
        }
    cfg.events = table
    return cfg


def _check_events(events: object, push: object) -> None:
    if events not in EVENT_SETS:
        raise ValueError(f"events: expected one of {', '.join(EVENT_SETS)}, got {events!r}")
    if push is not None and (
        isinstance(push, bool) or not isinstance(push, (int, float)) or not push >= 0
    ):
        raise ValueError(f"push: expected a speed >= 0 (m/s) or null, got {push!r}")


def _check_window(num_envs: object, seconds: object) -> None:
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs: expected an int >= 1, got {num_envs!r}")
    check_positive_float("seconds", seconds)


def format_report(report: dict[str, Any]) -> str:
    """The report as a table: one row per group (command kind, start set; a dataset's clips
    under each start set), one column a metric; a dataset's worst clips after it."""
    rows = []
    for name, values in report["metrics"].items():
        rows.append((name, values))
        rows.extend((f"  {clip}", v) for clip, v in values.get("clips", {}).items())
    columns = [c for c, v in rows[0][1].items() if not isinstance(v, dict)]
    width = max(18, *(len(name) for name, _ in rows))
    lines = [
        f"{report['task']} {report['checkpoint']} (iteration {report['iteration']}, "
        f"{report['num_envs']} envs)",
        "  ".join([f"{'':>{width}}", *(f"{c:>26}" for c in columns)]),
    ]
    if report.get("config_changes"):
        lines.insert(1, f"with the run's config changed: {report['config_changes']}")
    for name, values in rows:
        cells = [f"{_cell(values[c]):>26}" for c in columns]
        lines.append("  ".join([f"{name:>{width}}", *cells]))
    if "from_first_frame" in report["metrics"] and "clips" in report["metrics"]["from_first_frame"]:
        worst = ", ".join(
            f"{w['clip']} ({w['success_rate']:.0%}, {w['mpkpe_mm']:.0f} mm{_travel(w)}"
            f"{_ended_by(w)})"
            for w in worst_clips(report["metrics"])
        )
        lines.append(f"worst clips from the first frame: {worst}")
    for name, values in report["metrics"].items():
        ended = [
            f"{rule} {share:.0%}"
            for rule, share in values.get("failed_by", {}).items()
            if share >= 0.005  # what rounds to 0% is left out
        ]
        if ended:
            lines.append(f"{name}: failures by rule (share of the starts): {', '.join(ended)}")
    return "\n".join(lines) + "\n"


def _travel(values: dict[str, Any]) -> str:
    """``, travel 45%``: how far the robot kept up with a clip that travels."""
    travel = values.get("travel_ratio", math.nan)
    return "" if math.isnan(travel) else f", travel {travel:.0%}"


def _ended_by(values: dict[str, Any]) -> str:
    """``; ended by RULE``: the rule that ended most of a group's failed starts, if any."""
    shares = values.get("failed_by", {})
    rule = max(shares, key=shares.get, default=None)
    return f"; ended by {rule}" if rule and shares[rule] else ""


def write_report(report: dict[str, Any], path: str | Path) -> Path:
    return write_text_atomic(Path(path), json.dumps(report, indent=2) + "\n")


def _root_mean(total: float, count: int) -> float:
    return math.sqrt(total / count) if count else math.nan


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
