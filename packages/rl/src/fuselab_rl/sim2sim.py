"""fuselab-sim2sim: run an exported ``policy.onnx`` in a plain MuJoCo loop, as a robot-side
program would, and measure it the way fuselab-eval does.

Nothing of the training env runs here: each env is one ``mujoco.MjData`` of the robot's MJCF
(the run's, or another G1 model given with ``mjcf=``: joints matched by name), stepped by
``mujoco.mj_step``; the policy's inputs come from :mod:`fuselab_rl.robot_observations` (which
imports neither fuselab_env_core nor the task code) following the deploy document in the
file's metadata, and its outputs become joint targets from the same document. Position
actuators take the targets as controls; with torque (motor) actuators, as on a real G1's
low-level interface, the loop runs the PD law of the document's kp and kd itself at every
physics step and clips to the actuators' ranges. The physics time step is the training's (the
deploy document's ``physics_dt``); ``physics_dt`` changes it while the control rate stays the
policy's (decimation = control dt / physics dt).

Walk policies: every env holds one command of fuselab-eval's (forward, backward, lateral,
turning, standing; same ranges, same seed), measured after 1 s of settling: RMS planar velocity
and yaw-rate errors and falls, overall and per kind. Tracking policies: each clip from its first
frame: success (no failure by the task's own failure rules) and MPKPE of the tracked bodies.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
from omegaconf import OmegaConf

from fuselab_rl.deploy import DeployedPolicy, load_deployed
from fuselab_rl.robot_observations import GaitClock, ObservationBuilder, RobotState, joint_columns

log = logging.getLogger(__name__)

SETTLE_S = 1.0


class Robot:
    """One MjData of the robot and what maps the policy onto it."""

    def __init__(self, model: Any, policy: DeployedPolicy, decimation: int):
        doc = policy.doc
        self.model, self.policy, self.decimation = model, policy, decimation
        self.data = mujoco.MjData(model)
        joints = doc["joints"]["names"]
        self.joint_qpos, self.joint_qvel = joint_columns(model, joints)
        action_joints = doc["actions"]["joints"]
        self.action_qpos, self.action_qvel = joint_columns(model, action_joints)
        index = {name: k for k, name in enumerate(joints)}
        self.kp = np.array([doc["joints"]["kp"][index[n]] for n in action_joints])
        self.kd = np.array([doc["joints"]["kd"][index[n]] for n in action_joints])
        self.scale = np.asarray(doc["actions"]["scale"])
        self.offset = np.asarray(doc["actions"]["offset"])
        self.actuators, self.motors = _actuators_of(model, action_joints)
        self.observe = ObservationBuilder(doc)
        self.last_action = np.zeros(len(action_joints), np.float32)
        kinds = {c.get("kind") for c in doc["commands"].values()}
        self.clock = GaitClock(doc) if "gait_clock" in kinds else None

    def reset(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = qpos
        self.data.qvel[:] = qvel
        mujoco.mj_forward(self.model, self.data)
        self.observe.reset()
        self.last_action[:] = 0.0
        if self.clock is not None:
            self.clock.reset()

    def state(self, **inputs: Any) -> RobotState:
        if self.clock is not None:
            inputs["gait_phase"] = self.clock.phase(inputs["command"])
        return RobotState(self.data, self.joint_qpos, self.joint_qvel, self.last_action, **inputs)

    def act(self, action: np.ndarray) -> None:
        """One control step: the action's joint targets held for ``decimation`` physics steps."""
        self.last_action = action.astype(np.float32)
        target = self.offset + self.scale * action
        for _ in range(self.decimation):
            if self.motors:
                q, qd = self.data.qpos[self.action_qpos], self.data.qvel[self.action_qvel]
                torque = self.kp * (target - q) - self.kd * qd
                low, high = self.model.actuator_ctrlrange[self.actuators].T
                self.data.ctrl[self.actuators] = np.clip(torque, low, high)
            else:
                self.data.ctrl[self.actuators] = target
            mujoco.mj_step(self.model, self.data)
        mujoco.mj_kinematics(self.model, self.data)  # body poses of the current state
        if self.clock is not None:
            self.clock.advance()


def sim2sim(
    run: str | Path,
    *,
    mjcf: str | None = None,
    physics_dt: float | None = None,
    seconds: float = 10.0,
    num_envs: int = 50,
    seed: int = 0,
) -> dict[str, Any]:
    """Run ``run``'s policy.onnx in plain MuJoCo (see the module docstring); the report."""
    run = Path(run)
    policy = load_deployed(run / "policy.onnx")
    config = OmegaConf.load(run / "config.yaml")
    doc = policy.doc
    model = _load_model(mjcf, config)
    control_dt = float(doc["control_dt"])
    model.opt.timestep = doc["physics_dt"] if physics_dt is None else physics_dt  # (training's)
    decimation = round(control_dt / model.opt.timestep)
    if decimation < 1 or not math.isclose(
        decimation * model.opt.timestep, control_dt, rel_tol=1e-6
    ):
        raise ValueError(
            f"physics_dt: {model.opt.timestep} does not divide the policy's control dt {control_dt}"
        )
    started = time.perf_counter()
    kinds = {c.get("kind") for c in doc["commands"].values()}
    if "velocity" in kinds:
        metrics = _walk(model, policy, config, decimation, seconds, num_envs, seed)
    elif "motion" in kinds:
        metrics = _track(model, policy, config, decimation)
    else:
        raise ValueError(
            f"run: {run} is a {doc['task']} policy; sim2sim measures walk and tracking"
        )
    log.info("sim2sim %s: %.1f s", run, time.perf_counter() - started)
    return {
        "task": doc["task"],
        "run": str(run),
        "mjcf": mjcf or "the run's",
        "physics_dt": float(model.opt.timestep),
        "decimation": decimation,
        "num_envs": num_envs,
        "seconds": seconds,
        "metrics": metrics,
    }


def _walk(model, policy, config, decimation, seconds, num_envs, seed) -> dict[str, Any]:
    from fuselab_rl.evaluate import (
        COMMAND_KINDS,
        VelocityErrors,
        heading_frame_velocity,
        walk_commands,
    )

    ranges = next(c["ranges"] for c in policy.doc["commands"].values() if c["kind"] == "velocity")
    commands, kinds = walk_commands(ranges, num_envs, np.random.default_rng(seed))
    robots = [Robot(model, policy, decimation) for _ in range(num_envs)]
    qpos0, qvel0 = _initial_state(model, policy.doc)
    for robot in robots:
        robot.reset(qpos0, qvel0)
    errors, fallen = VelocityErrors(commands), np.zeros(num_envs, np.bool_)
    tilt = _fall_tilt(config)
    steps = round((SETTLE_S + seconds) / policy.doc["control_dt"])
    settle = round(SETTLE_S / policy.doc["control_dt"])
    for step in range(steps):
        obs = np.stack([r.observe(r.state(command=commands[k])) for k, r in enumerate(robots)])
        actions = policy.act(obs)
        for k, robot in enumerate(robots):
            if not fallen[k]:
                robot.act(actions[k])
        qpos = np.stack([r.data.qpos[:7] for r in robots])
        qvel = np.stack([r.data.qvel[:6] for r in robots])
        up = 1.0 - 2.0 * (qpos[:, 4] ** 2 + qpos[:, 5] ** 2)  # z of the base's up axis
        fallen |= up < math.cos(tilt)
        if step >= settle:
            planar, yaw_rate = heading_frame_velocity(qpos, qvel)
            errors.add(planar, yaw_rate, np.flatnonzero(~fallen))
    report = {"overall": errors.summary(np.arange(num_envs), fallen)}
    for k, kind in enumerate(COMMAND_KINDS):
        report[kind] = errors.summary(np.flatnonzero(kinds == k), fallen)
    return report


def _track(model, policy, config, decimation) -> dict[str, Any]:
    """Each clip of the export from its first frame (a dataset's clips one after another)."""
    motion = next(c for c in policy.doc["commands"].values() if c["kind"] == "motion")
    clips = motion.get("clips") or [{"name": "clip", "first_frame": 0, "frames": motion["frames"]}]
    rules = _failure_rules(config, motion["bodies"])
    tracked = {c["name"]: _track_clip(model, policy, rules, decimation, c) for c in clips}
    measured = sum(t["frames_measured"] for t in tracked.values())
    overall = {
        "success_rate": float(np.mean([t["success_rate"] for t in tracked.values()])),
        "mpkpe_mm": sum(
            t["mpkpe_mm"] * t["frames_measured"] for t in tracked.values() if t["frames_measured"]
        )
        / measured
        if measured
        else math.nan,
        "frames_tracked": sum(t["frames_tracked"] for t in tracked.values()),
        "frames_measured": measured,
        "frames": sum(t["frames"] for t in tracked.values()),
    }
    return {"from_first_frame": overall | ({"clips": tracked} if len(clips) > 1 else {})}


def _track_clip(model, policy, rules, decimation, clip: dict[str, Any]) -> dict[str, Any]:
    """One clip of the export (its frames ``first_frame`` .. ``first_frame + frames - 1``) from
    its start until one of the failure ``rules`` breaks; MPKPE over its own frames (not its lead
    frames from and to rest)."""
    first, frames = clip["first_frame"], clip["frames"]
    own = range(clip.get("lead_in", 0), frames - clip.get("lead_out", 0))
    doc = policy.doc
    motion = next(c for c in doc["commands"].values() if c["kind"] == "motion")
    bodies = motion["bodies"]
    body_ids = {name: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name) for name in bodies}
    robot = Robot(model, policy, decimation)
    reference = policy.reference(np.arange(first, first + frames))
    robot.reset(*_reference_state(model, doc, reference, body_ids))
    rows = [body_ids[name] for name in bodies]
    inputs = {
        "motion_body_pos_w": reference["ref_body_pos_w"],
        "motion_body_quat_w": reference["ref_body_quat_w"],
    }
    errors, failed = [], False
    for frame in range(frames - 1):
        at = {k: v[frame] for k, v in reference.items()}
        obs = robot.observe(robot.state(reference=at, body_ids=body_ids))
        robot.act(policy.act(obs[None], np.array([first + frame]))[0])
        position = robot.data.xpos[rows]
        if frame in own:
            errors.append(np.linalg.norm(position - at["ref_body_pos_w"], axis=-1).mean())
        inputs |= {  # the env scores the new state against frame f
            "motion_frame": np.array([frame]),
            "body_pos_w": position[None],
            "body_quat_w": robot.data.xquat[rows][None],
        }
        if any(rule(inputs) for rule in rules):
            failed = True
            break
    return {
        "success_rate": 0.0 if failed else 1.0,
        "mpkpe_mm": 1e3 * float(np.mean(errors)) if errors else math.nan,
        "frames_tracked": frame + 1,  # stepped through, up to a failure
        "frames_measured": len(errors),  # of those, the clip's own (MPKPE's frames)
        "frames": frames - 1,
    }


def _load_model(mjcf: str | None, config) -> Any:
    if mjcf is None:
        from fuselab_envs.robots import robot

        path = config.robot.mjcf or robot(config.robot.name).model()
    else:
        path = Path(mjcf).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"mjcf: no MJCF file at {str(path)!r}")
    return mujoco.MjModel.from_xml_path(str(path))


def _actuators_of(model: Any, joints: list[str]) -> tuple[np.ndarray, bool]:
    """The actuator of each joint (by its transmission) and whether they are motors (no
    position feedback of their own: the loop runs the PD law)."""
    ids = []
    for name in joints:
        joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        found = [
            a
            for a in range(model.nu)
            if model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT
            and model.actuator_trnid[a, 0] == joint
        ]
        if not found:
            raise ValueError(f"mjcf: no actuator drives joint {name!r}")
        ids.append(found[0])
    ids = np.array(ids, np.int64)
    motors = bool(np.all(model.actuator_biastype[ids] == mujoco.mjtBias.mjBIAS_NONE))
    return ids, motors


def _initial_state(model: Any, doc: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    qpos = model.qpos0.copy()
    initial = doc.get("initial_state") or {}
    if "base_pos" in initial:
        qpos[0:3] = initial["base_pos"]
        qpos[3:7] = [1.0, 0.0, 0.0, 0.0]
    qpos_cols, _ = joint_columns(model, doc["joints"]["names"])
    qpos[qpos_cols] = doc["joints"]["default_pos"]
    return qpos, np.zeros(model.nv)


def _reference_state(model, doc, reference, body_ids) -> tuple[np.ndarray, np.ndarray]:
    """The robot on the clip at frame 0 (root velocity from the first two frames)."""
    qpos, qvel = model.qpos0.copy(), np.zeros(model.nv)
    root = 0  # the tracked bodies start with the root (the pelvis)
    qpos[0:3] = reference["ref_body_pos_w"][0, root]
    qpos[3:7] = reference["ref_body_quat_w"][0, root]
    qpos_cols, qvel_cols = joint_columns(model, doc["joints"]["names"])
    qpos[qpos_cols] = reference["ref_joint_pos"][0]
    qvel[qvel_cols] = reference["ref_joint_vel"][0]
    qvel[0:3] = (reference["ref_body_pos_w"][1, root] - qpos[0:3]) / doc["control_dt"]
    return qpos, qvel


def _termination_params(config) -> dict[str, Any]:
    """The task's terminations: each term's params, its registered defaults filled in."""
    return {term.name: term.values(given) for term, given, _ in _terminations(config)}


def _terminations(config) -> list[tuple[Any, dict[str, Any], str]]:
    """The task's terminations other than time-outs: each registered term, its given params and
    its config key."""
    from fuselab_env_core.terms import get_term
    from fuselab_envs import registry  # noqa: F401 - registers the tasks' terms

    found = []
    for name, spec in (config.get("terminations") or {}).items():
        if spec is None or spec.get("time_out"):
            continue
        params = spec.get("params")  # None or empty for a term on its defaults
        given = OmegaConf.to_container(params, resolve=True) if params else {}
        found.append((get_term(spec.get("term") or name), given, f"terminations.{name}"))
    return found


def _fall_tilt(config) -> float:
    """The task's fall rule: the base tilted past this angle (its bad_orientation term; a task
    without one has no falls, as in fuselab-eval)."""
    rule = _termination_params(config).get("bad_orientation")
    return math.pi if rule is None else float(rule["limit_angle_rad"])


# What the tracking loop gives a termination term, by the names terms read: the tracked bodies'
# world poses (1, bodies, ...) and the clip's (frames, bodies, ...), rows in the export's order.
TRACKING_INPUTS = ("motion_frame", "body_pos_w", "body_quat_w", "motion_body_pos_w",
                   "motion_body_quat_w")  # fmt: skip


def _failure_rules(config, bodies: list[str]) -> list[Callable[[dict[str, np.ndarray]], bool]]:
    """The task's failure rules, each its registered term's own Python code on one robot (row
    0) with the body names of its params turned into rows of ``bodies``; a rule that reads what
    this loop does not measure is left out, named in a warning."""
    from fuselab_env_core.terms import NAME_TYPES, Body

    rules = []
    for term, given, key in _terminations(config):
        unknown = [name for name in term.inputs if name not in TRACKING_INPUTS]
        if unknown:
            log.warning("%s: %s reads %s, which sim2sim does not measure; not checked", key,
                        term.name, ", ".join(unknown))  # fmt: skip
            continue
        params = term.values(given)
        for param in term.params:
            if param.type in NAME_TYPES:
                rows = _rows(params[param.name], bodies, f"{key}.params.{param.name}")
                params[param.name] = rows[0] if param.type is Body else rows
        rules.append(functools.partial(_broken, term, params))
    return rules


def _rows(names: str | list[str], bodies: list[str], field: str) -> tuple[int, ...]:
    """The rows of body names in ``bodies``."""
    names = [names] if isinstance(names, str) else names
    for name in names:
        if name not in bodies:
            raise ValueError(f"{field}: {name!r} is not a tracked body of the export; tracked: "
                             f"{', '.join(bodies)}")  # fmt: skip
    return tuple(map(bodies.index, names))


def _broken(term, params: dict[str, Any], inputs: dict[str, np.ndarray]) -> bool:
    return bool(term.py_func(0, *(inputs[name] for name in term.inputs), **params))
