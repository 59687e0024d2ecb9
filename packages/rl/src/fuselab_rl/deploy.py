"""The deploy contract: what ``policy.onnx`` says about itself, so a robot-side program needs
nothing else from fuselab.

Every export carries, in its ONNX metadata, one JSON document under :data:`METADATA_KEY`
(:func:`describe_policy`): the observation layout of the actor (each term's name, columns,
history, delay, noise, parameters and the source of its noise-free formula), the joints in
the model's order with their default pose and PD gains (kp, kd in joint order, never actuator
order), the action mapping (which joint each action drives, scale, offset, clip), the control
and physics time steps, the commands (velocity ranges; a motion clip's bodies, anchor and
SHA-256), and the robot's model. Beside it, the flat keys robot-side tools already read
(mjlab's names: ``joint_names``, ``joint_stiffness``, ``joint_damping``, ``default_joint_pos``,
``action_scale``, ``observation_names``, ``anchor_body_name``, ``body_names``; lists as
comma-separated values).

A tracking export also carries its clip: the graph takes ``time_step`` (the clip frame,
int64, per row) besides ``obs`` and returns the clip's joint positions and velocities and its
tracked bodies' world poses at that frame beside ``actions``.

:func:`load_deployed` reads a file back and refuses one without the contract, naming what is
missing.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from fuselab_env_core.timing import elapsed_ms

log = logging.getLogger(__name__)

METADATA_KEY = "fuselab_deploy"
FORMAT = "fuselab-deploy/1"
REQUIRED = ("format", "task", "control_dt", "joints", "actions", "observations", "commands")
TIME_STEP_INPUT = "time_step"
REFERENCE_OUTPUTS = (
    "ref_joint_pos",
    "ref_joint_vel",
    "ref_body_pos_w",
    "ref_body_quat_w",
)


def describe_policy(env: Any, cfg: DictConfig) -> dict[str, Any]:
    """The deploy document of a policy trained on ``env`` (built from ``cfg``)."""
    facts = env.backend.model
    joint_of = facts.actuator_joint
    kp = env.backend.model_param("actuator_kp")
    kd = env.backend.model_param("actuator_kd")
    joint_kp, joint_kd = np.zeros(len(facts.joint_names)), np.zeros(len(facts.joint_names))
    for actuator, joint in enumerate(joint_of):
        if joint >= 0:
            joint_kp[joint], joint_kd[joint] = kp[actuator], kd[actuator]
    action = env.action
    terms_cfg = OmegaConf.to_container(cfg.observations.actor.terms, resolve=True)
    assert isinstance(terms_cfg, dict)
    group = env.terms.plan.observations["actor"]
    starts = group.output_columns()
    scalars = env.terms.buffers.scalars
    observations = []
    for call in group.terms:
        start = starts[call.entry]
        spec = terms_cfg[call.entry] or {}
        observations.append(
            {
                "name": call.entry,
                "term": call.term.name,
                "columns": [start, start + call.size * call.history],
                "size": call.size,
                "history": call.history,
                "delay_steps": call.delay,
                "noise_std": 0.0 if call.noise_slot is None else float(scalars[call.noise_slot]),
                "scale": 1.0,
                "clip": None,
                "params": spec.get("params") or {},
                "source": inspect.getsource(call.term.py_func),
            }
        )
    return {
        "format": FORMAT,
        "task": cfg.task_name,
        "robot": {"name": cfg.robot.name, "mjcf": cfg.robot.mjcf or "embedded"},
        "initial_state": _initial_state(env),
        "control_dt": env.step_dt,
        "physics_dt": facts.physics_dt,
        "decimation": env.decimation,
        "joints": {
            "names": list(facts.joint_names),
            "default_pos": env.task_arrays["default_joint_pos"].tolist(),
            "kp": joint_kp.tolist(),
            "kd": joint_kd.tolist(),
            "position_limits": facts.joint_ranges.tolist(),
        },
        "actions": {
            "joints": [facts.joint_names[int(j)] for j in action.joints],
            "scale": action.scale.tolist(),
            "offset": action.offset.tolist(),
            "clip": None if np.isinf(action.clip) else float(action.clip),
            "targets": "position" if action.holds_pose else "effort",
        },
        "observations": {
            "group": "actor",
            "width": group.output_width,
            "layout": "term-major; each term's frames oldest first",
            "normalization": "inside the graph",
            "terms": observations,
        },
        "commands": {name: _command(c) for name, c in env.commands.items()},
        "anchor_body": OmegaConf.select(cfg, "bodies.anchor"),
    }


def flat_keys(doc: dict[str, Any]) -> dict[str, str]:
    """The flat metadata keys robot-side tools read (mjlab's names), as strings."""

    def join(values: Any) -> str:
        return ",".join(str(v) for v in values)

    action_index = {name: k for k, name in enumerate(doc["actions"]["joints"])}
    scale = [
        doc["actions"]["scale"][action_index[name]] if name in action_index else 0.0
        for name in doc["joints"]["names"]
    ]
    keys = {
        "joint_names": join(doc["joints"]["names"]),
        "joint_stiffness": join(doc["joints"]["kp"]),
        "joint_damping": join(doc["joints"]["kd"]),
        "default_joint_pos": join(doc["joints"]["default_pos"]),
        "action_scale": join(scale),
        "observation_names": join(t["name"] for t in doc["observations"]["terms"]),
        "control_dt": str(doc["control_dt"]),
    }
    for command in doc["commands"].values():
        if command.get("kind") == "motion":
            keys["body_names"] = join(command["bodies"])
            keys["anchor_body_name"] = str(doc.get("anchor_body") or "")
    return keys


class TrackingPolicy(nn.Module):
    """The policy with its clip: (obs, time_step) -> (actions, the reference at time_step)."""

    def __init__(self, policy: nn.Module, clip_arrays: dict[str, np.ndarray]):
        super().__init__()
        self.policy = policy
        for name in (
            "motion_joint_pos",
            "motion_joint_vel",
            "motion_body_pos_w",
            "motion_body_quat_w",
        ):
            self.register_buffer(name, torch.as_tensor(clip_arrays[name]))
        self.last_frame = int(clip_arrays["motion_joint_pos"].shape[0]) - 1

    def forward(self, obs: torch.Tensor, time_step: torch.Tensor):
        frame = time_step.clamp(0, self.last_frame)
        return (
            self.policy(obs),
            self.motion_joint_pos[frame],
            self.motion_joint_vel[frame],
            self.motion_body_pos_w[frame],
            self.motion_body_quat_w[frame],
        )


def write_metadata(path: Path, doc: dict[str, Any]) -> None:
    """Put the document and its flat keys into the ONNX file at ``path`` (in place)."""
    import onnx

    model = onnx.load(str(path))
    entries = {METADATA_KEY: json.dumps(doc), **flat_keys(doc)}
    del model.metadata_props[:]
    for key, value in entries.items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    onnx.save(model, str(path))


@dataclass
class DeployedPolicy:
    """A policy.onnx read back: its inference session and its deploy document."""

    session: Any
    doc: dict[str, Any]

    @property
    def tracking(self) -> bool:
        return TIME_STEP_INPUT in {i.name for i in self.session.get_inputs()}

    def act(self, obs: np.ndarray, time_step: np.ndarray | None = None) -> np.ndarray:
        feeds: dict[str, np.ndarray] = {"obs": obs.astype(np.float32, copy=False)}
        if self.tracking:
            if time_step is None:
                raise ValueError("time_step: a tracking policy needs the clip frame of each row")
            feeds[TIME_STEP_INPUT] = time_step.astype(np.int64, copy=False)
        return self.session.run(None, feeds)[0]

    def reference(self, time_step: np.ndarray) -> dict[str, np.ndarray]:
        """A tracking policy's clip at ``time_step``: joint positions and velocities, body
        world positions and quaternions (w, x, y, z)."""
        obs = np.zeros((len(time_step), self.doc["observations"]["width"]), np.float32)
        outputs = self.session.run(None, {"obs": obs, TIME_STEP_INPUT: time_step.astype(np.int64)})
        return dict(zip(REFERENCE_OUTPUTS, outputs[1:], strict=True))


def load_deployed(path: str | Path) -> DeployedPolicy:
    """``policy.onnx`` with its deploy document; a file without it (or missing a part) is
    refused naming what is missing."""
    import onnxruntime

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"policy: no ONNX file at {str(path)!r}")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    if METADATA_KEY not in meta:
        raise ValueError(
            f"policy: {str(path)!r} has no deploy metadata (key {METADATA_KEY!r}); export it "
            "with this fuselab (fuselab-train writes it with every checkpoint)"
        )
    doc = json.loads(meta[METADATA_KEY])
    missing = [key for key in REQUIRED if key not in doc]
    if missing:
        raise ValueError(f"policy: {str(path)!r}'s deploy metadata lacks {missing}")
    if doc["format"] != FORMAT:
        raise ValueError(f"policy: {str(path)!r} is {doc['format']!r}; this reads {FORMAT!r}")
    return DeployedPolicy(session, doc)


def metadata_of_config(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, np.ndarray] | None]:
    """The deploy document of a run's config, from a one-env MuJoCo env built from it, and the
    clip tables of a tracking task (None otherwise)."""
    from fuselab_envs.registry import make_env

    started = time.perf_counter()
    one = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    assert isinstance(one, DictConfig)
    one.num_envs, one.backend, one.num_threads = 1, "mujoco", 1
    env = make_env(one)
    try:
        doc = describe_policy(env, one)
        motion = next((c for c in env.commands.values() if hasattr(c, "motion_frame")), None)
        clip = None if motion is None else dict(motion.arrays)
    finally:
        env.close()
    log.info("deploy metadata: %.1f ms", elapsed_ms(started))
    return doc, clip


def _initial_state(env: Any) -> dict[str, Any]:
    """Where an episode starts before its reset events: the floating base's pose."""
    facts = env.backend.model
    if facts.nq != len(facts.joint_names) + 7:  # no floating base
        return {}
    return {"base_pos": env.init_qpos[0:3].tolist(), "base_quat": env.init_qpos[3:7].tolist()}


def _command(command: Any) -> dict[str, Any]:
    description = command.describe()
    if description.get("kind") == "motion":
        digest = hashlib.sha256()
        for name in sorted(command.arrays):
            digest.update(np.ascontiguousarray(command.arrays[name]).tobytes())
        description["sha256"] = digest.hexdigest()
    return description
