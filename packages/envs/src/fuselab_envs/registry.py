"""The task registry: compose a task's Hydra config with overrides, then build its env.

env = fuselab_envs.make("g1_walk_flat", num_envs=256, backend="mjwarp")
cfg = fuselab_envs.compose("g1_walk_flat", ["rewards.track_lin_vel.weight=1.5"])
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from hydra import compose as hydra_compose
from hydra import initialize_config_module
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import DictConfig, OmegaConf

from fuselab_env_core.backend import SimBackend
from fuselab_env_core.env import EnvCfg
from fuselab_env_core.ranges import Section, build_section
from fuselab_env_core.terms import did_you_mean
from fuselab_envs.tasks.cartpole import Cartpole, CartpoleEnvCfg
from fuselab_envs.tasks.g1_motion_tracking import (
    G1MotionTracking,
    MotionCfg,
    ResetNoiseCfg,
    SamplingCfg,
)
from fuselab_envs.tasks.g1_walk_flat import CommandCfg, EventCfg, G1WalkFlat

log = logging.getLogger(__name__)

CONFIG_MODULE = "fuselab_envs.configs"
BACKENDS = ("mujoco", "mjwarp", "motrix")
Sections = Mapping[str, Any]  # a task's config sections, built (check_sections)


def _g1_walk_flat(cfg: DictConfig, sections: Sections, backend: SimBackend):
    return G1WalkFlat(
        backend,
        _terms(cfg),
        commands=sections["commands"],
        events=sections["events"],
        decimation=sections["env"].decimation,
        episode_length_s=sections["env"].episode_length_s,
        num_threads=cfg.num_threads,
        seed=cfg.seed,
    )


def _g1_motion_tracking(cfg: DictConfig, sections: Sections, backend: SimBackend):
    from fuselab_envs.motion import DEFAULT_MOTION_PATH, load_motion

    facts, env, motion = backend.model, sections["env"], sections["motion"]
    clip = load_motion(
        Path(motion.file) if motion.file else DEFAULT_MOTION_PATH,
        joint_names=facts.joint_names,
        body_names=facts.body_names,
        fps=1.0 / (facts.physics_dt * env.decimation),
    )
    return G1MotionTracking(
        backend,
        _terms(cfg),
        clip,
        sampling=sections["sampling"],
        reset_noise=sections["reset_noise"],
        clip_end=motion.clip_end,
        decimation=env.decimation,
        episode_length_s=env.episode_length_s,
        num_threads=cfg.num_threads,
        seed=cfg.seed,
    )


def _cartpole(cfg: DictConfig, sections: Sections, backend: SimBackend):
    env = sections["env"]
    return Cartpole(
        backend,
        _terms(cfg),
        reset_noise=env.reset_noise,
        decimation=env.decimation,
        episode_length_s=env.episode_length_s,
        num_threads=cfg.num_threads,
        seed=cfg.seed,
    )


def _terms(cfg: DictConfig) -> dict:
    sections = ("preamble", "rewards", "terminations", "observations")
    return {s: OmegaConf.to_container(cfg[s], resolve=True) for s in sections if s in cfg}


@dataclass(frozen=True)
class Task:
    build: Callable[[DictConfig, Sections, SimBackend], Any]
    model: Callable[[], Path]  # the embedded MJCF the task runs on unless robot.mjcf names one
    sections: tuple[type[Section], ...]  # the config sections it reads (see check_sections)


def _g1_model() -> Path:
    from fuselab_envs.g1 import G1_XML_PATH

    return G1_XML_PATH


def _cartpole_model() -> Path:
    from fuselab_envs.cartpole import CARTPOLE_XML_PATH

    return CARTPOLE_XML_PATH


TASKS: dict[str, Task] = {
    "g1_walk_flat": Task(_g1_walk_flat, _g1_model, (EnvCfg, CommandCfg, EventCfg)),
    "g1_motion_tracking": Task(
        _g1_motion_tracking, _g1_model, (EnvCfg, MotionCfg, SamplingCfg, ResetNoiseCfg)
    ),
    "cartpole": Task(_cartpole, _cartpole_model, (CartpoleEnvCfg,)),
}


def list_tasks() -> list[str]:
    return sorted(TASKS)


def compose(task: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The task's config with Hydra command-line style overrides applied."""
    if task not in TASKS:
        raise KeyError(f"task: unknown task {task!r}{did_you_mean(task, list_tasks())}")
    with initialize_config_module(config_module=CONFIG_MODULE, version_base=None):
        try:
            cfg = hydra_compose("config", overrides=[f"task={task}", *overrides])
        except MissingConfigException as error:
            raise FileNotFoundError(f"config: {error}") from None
        except ConfigCompositionException as error:
            base = hydra_compose("config", overrides=[f"task={task}"])
            raise KeyError(_explain_override(error, overrides, base)) from None
    OmegaConf.set_struct(cfg, True)
    return cfg


def make(task: str, overrides: Sequence[str] = (), **values: Any):
    """Build the env of ``task``; ``values`` are overrides too (``num_envs=256``)."""
    started = time.perf_counter()
    cfg = compose(task, [*overrides, *(f"{key}={_hydra_value(v)}" for key, v in values.items())])
    env = make_env(cfg)
    log.info("make %s on %s: %.1f ms", task, cfg.backend, (time.perf_counter() - started) * 1e3)
    return env


def make_env(cfg: DictConfig):
    """Build the env a composed config describes (its ``task_name``, ``backend``, ...)."""
    sections = check_sections(cfg)
    return TASKS[cfg.task_name].build(cfg, sections, make_backend(cfg))


def check_sections(cfg: DictConfig) -> Sections:
    """The task's config sections (``env``, ``commands``, ...) as their dataclasses, every value
    checked against its declared type and range before anything is built: a bad value is a
    ValueError naming its full key, the value and what is accepted."""
    if cfg.task_name not in TASKS:
        raise KeyError(
            f"task_name: unknown task {cfg.task_name!r}; known: {', '.join(list_tasks())}"
        )
    sections = {}
    for cls in TASKS[cfg.task_name].sections:
        values = cast("dict[str, Any]", OmegaConf.to_container(cfg[cls.KEY], resolve=True))
        sections[cls.KEY] = build_section(cls, values)
    return sections


def make_backend(cfg: DictConfig) -> SimBackend:
    mjcf = Path(cfg.robot.mjcf) if cfg.robot.mjcf else TASKS[cfg.task_name].model()
    if cfg.backend == "mujoco":
        from fuselab_sim_backends.mujoco_cpu import MujocoBackend

        return MujocoBackend(mjcf, cfg.num_envs, num_threads=cfg.num_threads)
    if cfg.backend == "mjwarp":
        from fuselab_sim_backends.mjwarp import MjWarpBackend

        return MjWarpBackend(mjcf, cfg.num_envs)
    if cfg.backend == "motrix":
        from fuselab_sim_backends.motrix import MotrixBackend

        return MotrixBackend(mjcf, cfg.num_envs)
    raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {cfg.backend!r}")


def _explain_override(error: Exception, overrides: Sequence[str], base: DictConfig) -> str:
    """Name the override whose key does not exist and the nearest valid keys."""
    valid = _dotted_keys(OmegaConf.to_container(base))
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key not in valid and not key.startswith("task"):
            hint = did_you_mean(key, valid, cutoff=0.5, list_known=False) or "; no similar key"
            return f"override {override!r}: no key {key!r} in the config{hint}"
    return f"overrides {list(overrides)}: {error}"


def _dotted_keys(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return [prefix] if prefix else []
    keys = [prefix] if prefix else []
    for key, value in node.items():
        keys += _dotted_keys(value, f"{prefix}.{key}" if prefix else str(key))
    return keys


def _hydra_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
