"""The task registry: compose a task's Hydra config with overrides, then build its env.

env = fuselab_envs.make("g1_walk_flat", num_envs=256, backend="mjwarp")
cfg = fuselab_envs.compose("g1_walk_flat", ["rewards.track_lin_vel.weight=1.5"])
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from hydra import compose as hydra_compose
from hydra import initialize_config_module
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import DictConfig, OmegaConf

import fuselab_envs.commands  # noqa: F401 - registers the command generators tasks name
import fuselab_envs.curricula  # noqa: F401 - registers the curricula tasks name
import fuselab_envs.terms.cartpole  # noqa: F401 - registers the terms tasks name
import fuselab_envs.terms.common  # noqa: F401
import fuselab_envs.terms.contacts  # noqa: F401
import fuselab_envs.terms.gait  # noqa: F401
import fuselab_envs.terms.tracking  # noqa: F401
import fuselab_envs.terms.velocity  # noqa: F401
from fuselab_env_core.actions import ACTIONS, CONSTRUCTOR_ARGS, build_action
from fuselab_env_core.backend import SimBackend
from fuselab_env_core.commands import COMMANDS, CommandContext, build_commands
from fuselab_env_core.curriculum import CurriculumContext, bind_curriculum, build_curricula
from fuselab_env_core.entity import Entity
from fuselab_env_core.env import EnvCfg, FusedEnv
from fuselab_env_core.events import EventManager
from fuselab_env_core.ranges import build_section
from fuselab_env_core.registry import Signature, joint_values
from fuselab_env_core.terms import did_you_mean, get_term
from fuselab_env_core.timing import elapsed_ms
from fuselab_envs.robots import Robot, joint_task_arrays, robot

log = logging.getLogger(__name__)

CONFIG_MODULE = "fuselab_envs.configs"
BACKENDS = ("mujoco", "mjwarp", "motrix")
TERM_SECTIONS = ("preamble", "rewards", "terminations", "observations")

# Every task is its YAML (configs/task/<name>.yaml), built by build_env; a line here makes it
# known. register_task adds one whose YAML lives elsewhere.
TASKS: dict[str, str] = {
    "g1_walk_flat": "the G1 follows velocity commands on flat ground",
    "g1_walk_flat_privileged": "g1_walk_flat, the actor also observing the base's velocity",
    "g1_walk_flat_gait": "g1_walk_flat with a gait clock the feet follow",
    "g1_motion_tracking": "the G1 imitates a whole-body motion clip",
    "g1_motion_tracking_privileged": "g1_motion_tracking with BeyondMimic's privileged actor",
    "cartpole": "balance a pole on a cart (a small task to check training end to end)",
}
_EXTRA_CONFIG_DIRS: list[str] = []  # searched before the package's configs (register_task)


def register_task(name: str, description: str, config_dir: str | Path | None = None) -> None:
    """Make task ``name`` known: its YAML is ``task/<name>.yaml`` in the package's configs or,
    given ``config_dir``, in that directory (a downstream project's own tasks)."""
    if config_dir is not None:
        path = Path(config_dir).resolve()
        if not (path / "task" / f"{name}.yaml").is_file():
            raise FileNotFoundError(f"config_dir: no task/{name}.yaml in {str(path)!r}")
        url = f"file://{path}"
        if url not in _EXTRA_CONFIG_DIRS:
            _EXTRA_CONFIG_DIRS.append(url)
    TASKS[name] = description


def search_path_overrides(*searched: str) -> list[str]:
    """Hydra overrides that add the registered task directories to the search path (after
    ``searched``: a config's own search path, which the override replaces)."""
    if not _EXTRA_CONFIG_DIRS:
        return []
    return [f"hydra.searchpath=[{','.join([*searched, *_EXTRA_CONFIG_DIRS])}]"]


def list_tasks() -> list[str]:
    return sorted(TASKS)


def compose(task: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The task's config with Hydra command-line style overrides applied."""
    if task not in TASKS:
        raise KeyError(f"task: unknown task {task!r}{did_you_mean(task, list_tasks())}")
    with initialize_config_module(config_module=CONFIG_MODULE, version_base=None):
        try:
            cfg = hydra_compose(
                "config", overrides=[*search_path_overrides(), f"task={task}", *overrides]
            )
        except MissingConfigException as error:
            raise FileNotFoundError(f"config: {error}") from None
        except ConfigCompositionException as error:
            base = hydra_compose("config", overrides=[*search_path_overrides(), f"task={task}"])
            raise KeyError(explain_override(error, overrides, base)) from None
    OmegaConf.set_struct(cfg, True)
    return cfg


def make(task: str, overrides: Sequence[str] = (), **values: Any):
    """Build the env of ``task``; ``values`` are overrides too (``num_envs=256``)."""
    started = time.perf_counter()
    cfg = compose(task, [*overrides, *(f"{key}={_hydra_value(v)}" for key, v in values.items())])
    env = make_env(cfg)
    log.info("make %s on %s: %.1f ms", task, cfg.backend, elapsed_ms(started))
    return env


def make_env(cfg: DictConfig) -> FusedEnv:
    """Build the env a composed config describes (its ``task_name``, ``backend``, ...)."""
    env_cfg = check_sections(cfg)
    chosen = robot(cfg.robot.name)
    reads = term_inputs(cfg)
    backend = make_backend(
        cfg, chosen, env_cfg.physics_dt, actuator_forces="actuator_force" in reads
    )
    try:
        return build_env(cfg, env_cfg, reads, backend, chosen)
    except BaseException:
        backend.close()
        raise


def build_env(
    cfg: DictConfig, env_cfg: EnvCfg, reads: set[str], backend: SimBackend, chosen: Robot
) -> FusedEnv:
    """The task's env on ``backend``: the robot checked, its entity, action mapping, commands,
    events, curricula and task arrays built from the config (every name resolved against the
    model), then the fused terms. ``env_cfg`` is the checked ``env`` section, ``reads`` what
    the terms read (:func:`term_inputs`)."""
    facts, n = backend.model, backend.num_envs
    if chosen.check is not None:
        chosen.check(facts, cfg.task_name)
    step_dt = facts.physics_dt * env_cfg.decimation
    init_qpos = chosen.init_qpos(facts)
    try:
        entity = Entity(
            backend,
            _plain(cfg.entity.bodies),
            contact_body_names=_plain(cfg.entity.get("contact_bodies") or ()),
            actuator_forces="actuator_force" in reads,
            joint_acc_dt=step_dt if "joint_acc" in reads else None,
        )
    except (KeyError, ValueError) as error:  # a body the model lacks: name the section
        message = error.args[0] if error.args else str(error)
        raise type(error)(f"entity: {message}") from None
    action = build_action(
        _plain(cfg.actions), facts, n, init_qpos[facts.joint_qpos_adr], chosen.action_scale
    )
    context = CommandContext("commands", facts, n, step_dt, init_qpos, robot_mjcf(cfg, chosen))
    commands = build_commands(_plain(cfg.get("commands")), context)
    for name, generator in commands.items():
        tracked = getattr(generator, "body_names", None)
        if tracked is not None and tracked != entity.body_names:
            raise ValueError(
                f"commands.{name}.params.bodies: {list(tracked)} must be entity.bodies "
                f"{list(entity.body_names)}, in order (terms index both by the same rows)"
            )
    events = EventManager(_plain(cfg.get("events")), backend, step_dt, env_cfg.randomize)
    curricula = build_curricula(
        _plain(cfg.get("curriculum")), CurriculumContext("curriculum", step_dt, commands)
    )
    arrays = {
        **joint_task_arrays(facts, init_qpos),
        **_joint_arrays(_plain(cfg.get("joint_arrays")), facts),
    }
    return FusedEnv(
        backend,
        entity,
        _terms(cfg),
        action=action,
        init_qpos=init_qpos,
        decimation=env_cfg.decimation,
        episode_length_s=env_cfg.episode_length_s,
        commands=commands,
        events=events,
        curricula=curricula,
        arrays=arrays,
        joint_mirror=chosen.mirror(facts.joint_names) if chosen.mirror else None,
        num_threads=cfg.num_threads,
        seed=cfg.seed,
    )


def check_sections(cfg: DictConfig) -> EnvCfg:
    """What a task's config can be checked for before its model is loaded: a known robot, the
    ``env`` section, and every action mapping, command, event and curriculum named in the
    registries with parameters of the accepted types and ranges (names of bodies, joints, ...
    are resolved when the env is built). A bad value is an error naming its full key. The
    task's name need not be registered here: a composed config is the whole task (a run's saved
    config builds in any process, a registered task's in a collector process too). Returns the
    ``env`` section."""
    robot(cfg.robot.name)
    env_cfg = build_section(EnvCfg, _plain(cfg.env))
    tables = (
        ("actions", ACTIONS, 1 + CONSTRUCTOR_ARGS),
        ("commands", COMMANDS, 2),
    )
    for section, registry, skip in tables:
        for name, spec in (_plain(cfg.get(section)) or {}).items():
            where = f"{section}.{name}"
            if not isinstance(spec, dict):
                raise ValueError(f"{where}: expected {{term: ..., params: {{...}}}}, got {spec!r}")
            cls = registry.get(spec.get("term") or name, f"{where}.term")
            Signature.of(cls.__init__, skip=skip).bind(f"{where}.params", spec.get("params"), None)
    for name, spec in (_plain(cfg.get("events")) or {}).items():
        if spec is not None:  # null: off
            EventManager.bind(name, spec)
    for name, spec in (_plain(cfg.get("curriculum")) or {}).items():
        if spec is not None:
            bind_curriculum(name, spec)
    return env_cfg


def term_inputs(cfg: DictConfig) -> set[str]:
    """The inputs every configured term reads by name (what the env must provide)."""
    terms = _terms(cfg)
    names = [spec.get("term") or entry for entry, spec in _entries(terms) if spec is not None]
    return {name for term in names for name in _inputs_of(term)}


def robot_mjcf(cfg: DictConfig, chosen: Robot) -> Path:
    """The robot's model file: the user's ``robot.mjcf``, else the robot's embedded one."""
    return Path(cfg.robot.mjcf) if cfg.robot.mjcf else chosen.model()


def make_backend(
    cfg: DictConfig, chosen: Robot, physics_dt: float | None, actuator_forces: bool = False
) -> SimBackend:
    mjcf = robot_mjcf(cfg, chosen)
    if cfg.backend == "mujoco":
        from fuselab_sim_backends.mujoco_cpu import MujocoBackend

        return MujocoBackend(
            mjcf,
            cfg.num_envs,
            num_threads=cfg.num_threads,
            actuator_forces=actuator_forces,
            physics_dt=physics_dt,
        )
    if cfg.backend == "mjwarp":
        from fuselab_sim_backends.mjwarp import MjWarpBackend

        return MjWarpBackend(mjcf, cfg.num_envs, physics_dt=physics_dt)
    if cfg.backend == "motrix":
        from fuselab_sim_backends.motrix import MotrixBackend

        return MotrixBackend(mjcf, cfg.num_envs, physics_dt=physics_dt)
    raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {cfg.backend!r}")


def _terms(cfg: DictConfig) -> dict:
    return {s: _plain(cfg[s]) for s in TERM_SECTIONS if s in cfg}


def _entries(terms: Mapping[str, Any]):
    """(entry, spec) of every term of every section (observation groups: their terms)."""
    for section, table in terms.items():
        if section == "observations":
            for group in (table or {}).values():
                yield from ((group or {}).get("terms") or {}).items()
        else:
            yield from (table or {}).items()


def _inputs_of(term: str) -> tuple[str, ...]:
    try:
        return get_term(term).inputs
    except KeyError:  # the plan names it with the nearest terms
        return ()


def _joint_arrays(table: Mapping[str, Any] | None, facts) -> dict[str, np.ndarray]:
    """``joint_arrays``: per-joint task arrays terms read by name, each given as
    ``{joint pattern: value}`` (every joint matched by one pattern) or a number."""
    return {
        name: joint_values(f"joint_arrays.{name}", spec, list(facts.joint_names), None)
        for name, spec in (table or {}).items()
    }


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def explain_override(error: Exception, overrides: Sequence[str], base: DictConfig) -> str:
    """Name the override whose key does not exist in ``base`` (the config the overrides were
    applied to) and the nearest valid keys."""
    valid = dotted_keys(OmegaConf.to_container(base))
    for override in overrides:
        key = override.split("=", 1)[0]
        if key.startswith(("+", "hydra.")):  # an addition (+key, ++key), or Hydra's own
            continue
        key = key.lstrip("~")
        if key not in valid and not key.startswith("task"):
            hint = did_you_mean(key, valid, cutoff=0.5, list_known=False) or "; no similar key"
            return f"override {override!r}: no key {key!r} in the config{hint}"
    return f"overrides {list(overrides)}: {error}"


def flat_items(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """A nested config (plain containers) as (dotted key, leaf value) pairs; lists are leaves,
    and so is an empty mapping below the top (a key set to ``{}``)."""
    if not isinstance(node, Mapping) or (not node and prefix):
        return [(prefix, node)]
    return [
        leaf
        for key, value in node.items()
        for leaf in flat_items(value, f"{prefix}.{key}" if prefix else str(key))
    ]


def dotted_keys(node: Any, prefix: str = "") -> list[str]:
    """Every key of a nested mapping, dotted (``a``, ``a.b``, ...)."""
    if not isinstance(node, dict):
        return [prefix] if prefix else []
    keys = [prefix] if prefix else []
    for key, value in node.items():
        keys += dotted_keys(value, f"{prefix}.{key}" if prefix else str(key))
    return keys


def _hydra_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
