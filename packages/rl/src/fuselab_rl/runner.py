"""The runner: build a trainer from one composed config, run its iterations, log, save, resume.

    handle = create_training_handle(compose_config(["task=g1_walk_flat", "num_envs=512"]))
    handle.train(100)  # TensorBoard, metrics.jsonl, console line, checkpoints every save_interval
    handle.close()

An algorithm is a :class:`Trainer` (PPO here, FastSAC in fastsac.py); the runner knows nothing of
how it collects or learns. Each iteration returns flat metrics; the runner writes every one to
TensorBoard and to ``metrics.jsonl``, and a few to the console.
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import torch
from omegaconf import DictConfig, OmegaConf

from fuselab_env_core.timing import elapsed_ms, timed
from fuselab_envs.registry import (
    BACKENDS,
    check_sections,
    explain_override,
    flat_items,
    search_path_overrides,
)
from fuselab_rl import distributed
from fuselab_rl.checkpoint import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_PATTERN,
    checkpoint_name,
    load_checkpoint,
    remove_stale_temporaries,
    save_atomic,
    versions,
    write_text_atomic,
)
from fuselab_rl.distributed import SINGLE, Ranks
from fuselab_rl.learner_sizes import keep_saved_sizes
from fuselab_rl.stopping import PartnerFailed, StopSignals
from fuselab_rl.threads import ThreadBudget

log = logging.getLogger(__name__)


class Trainer(Protocol):
    def iterate(self) -> dict[str, float]: ...  # one training iteration; flat metrics

    def state_dict(self) -> dict[str, Any]: ...  # everything needed to resume exactly

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def export_policy(self) -> torch.nn.Module: ...  # CPU: actor obs (B, D) -> actions (B, A)

    def close(self) -> None: ...


class Algorithm(Protocol):
    """What ALGORITHMS names: a Trainer class. Called, it builds the trainer from the full
    composed cfg, the learner's device, the thread budget and the run directory;
    ``inference_policy`` rebuilds what the trainer's ``export_policy`` returns from a checkpoint
    alone (its ``algo`` config and ``trainer`` state), with no trainer, env or collector process
    (``fuselab-play``)."""

    def __call__(
        self, cfg: DictConfig, device: torch.device, threads: ThreadBudget, run_dir: Path
    ) -> Trainer: ...

    def inference_policy(self, algo: DictConfig, state: dict[str, Any]) -> torch.nn.Module: ...


ALGORITHMS: dict[str, str] = {
    "ppo": "fuselab_rl.ppo:PPOTrainer",
    "fastsac": "fuselab_rl.fastsac:FastSACTrainer",
}  # imported lazily: an algorithm's dependencies load only when it runs

CONFIG_MODULE = "fuselab_rl.configs"
TASK_CONFIGS = "pkg://fuselab_envs.configs"  # train.yaml's search path
METRICS_FILE = "metrics.jsonl"


# How one invocation runs, not what its run trains: a resume takes these from its own command
# line (or their defaults), every other key from the run it continues.
INVOCATION_KEYS = ("max_iterations", "resume", "run_dir", "threads", "num_threads", "device",
                   "progress", "plot")  # fmt: skip
RESUMED_CONFIG = "fuselab_resumed_run"  # the resumed run's config, in Hydra's ConfigStore


def compose_config(overrides: Sequence[str] = (), config_name: str = "train") -> DictConfig:
    """The composed training config (what ``fuselab-train`` gets), for notebooks and tests;
    tasks registered from their own directories (``fuselab_envs.register_task``) compose too.
    With ``resume=``, the resumed run's config under the overrides
    (:func:`compose_resume_config`)."""
    if config_name == "train" and resume_given(overrides):
        return compose_resume_config(overrides)[0]
    return _compose(overrides, config_name)


def resume_given(overrides: Sequence[str]) -> bool:
    """Whether the overrides resume a run (``resume=`` with a value other than null)."""
    return any(
        o.startswith("resume=") and o.partition("=")[2].lower() not in ("", "null")
        for o in overrides
    )


def _compose(overrides: Sequence[str], config_name: str) -> DictConfig:
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    overrides = [*search_path_overrides(TASK_CONFIGS), *overrides]
    if GlobalHydra.instance().is_initialized():  # e.g. inside a Hydra app
        return compose(config_name, overrides=overrides)
    with initialize_config_module(config_module=CONFIG_MODULE, version_base=None):
        return compose(config_name, overrides=overrides)


def compose_resume_config(overrides: Sequence[str]) -> tuple[DictConfig, dict[str, Any]]:
    """The config of ``fuselab-train resume=RUN ...`` and the checkpoint it resumes (loaded
    once: pass both to :func:`create_training_handle`). A resumed run trains what it trained:
    its saved config (the task and algorithm, and every override it was started with), the
    overrides given now on top of it, and :data:`INVOCATION_KEYS` from this command line. A
    different explicit ``task=`` or ``algo=`` is an error naming both."""
    from hydra.core.config_store import ConfigStore
    from hydra.errors import ConfigCompositionException

    given = dict(o.split("=", 1) for o in overrides if "=" in o)
    checkpoint = load_checkpoint(given["resume"])
    chosen = []
    for key, saved in (("task", checkpoint["task"]), ("algo", checkpoint["algo"])):
        if key in given and given[key] != saved:
            raise ValueError(
                f"{key}: {given[key]!r} given, but resume='{checkpoint['path']}' is a {saved!r} "
                f"run; leave {key} out (the checkpoint's is taken) or start a new run"
            )
        chosen.append(f"{key}={saved}")
    rest = [o for o in overrides if o.split("=", 1)[0] not in ("task", "algo")]
    # the task's defaults, this invocation's own keys and the task's search path (hydra.*)
    own = [o for o in rest if o.split("=", 1)[0] in INVOCATION_KEYS or o.startswith("hydra.")]
    fresh = _compose([*chosen, *own], "train")
    saved = _saved_config(checkpoint, fresh)
    _start_curricula_at(saved, checkpoint.get("curriculum") or {})
    for key in INVOCATION_KEYS:
        saved[key] = fresh[key]
    ConfigStore.instance().store(name=RESUMED_CONFIG, node=saved)
    applied = _onto_saved(rest, saved)
    try:
        return _compose(applied, RESUMED_CONFIG), checkpoint
    except ConfigCompositionException as error:  # e.g. a key the resumed run does not have
        raise KeyError(explain_override(error, applied, saved)) from None


def _onto_saved(overrides: Sequence[str], saved: DictConfig) -> list[str]:
    """The overrides as they apply to the saved config, so that the run's own command line
    given again resumes it: ``+key=value`` sets the key the run may already have added, and
    ``~key`` of a key the run already left out does nothing."""
    applied = []
    for override in overrides:
        if override.startswith("~"):
            key = override[1:].split("=", 1)[0]
            if OmegaConf.select(saved, key, default=None) is None:
                continue
        elif override.startswith("+") and not override.startswith("++"):
            override = "+" + override
        applied.append(override)
    return applied


def _saved_config(checkpoint: Mapping[str, Any], defaults: DictConfig) -> DictConfig:
    """The checkpoint's config; settings it lacks (a run saved before the code had them) take
    the task's defaults, named in a warning."""
    saved = copy.deepcopy(checkpoint["config"])
    added = _add_new_settings(saved, OmegaConf.to_container(defaults, resolve=True))
    if added:
        log.warning(
            "resume: the checkpoint's config has no %s; the task's defaults are taken",
            ", ".join(added),
        )
    return OmegaConf.create(saved)


def _curriculum_levels(metrics: Mapping[str, float]) -> dict[str, float]:
    """Each curriculum's level in an iteration's metrics (``Curriculum/<name>``)."""
    prefix = "Curriculum/"
    return {k.removeprefix(prefix): v for k, v in metrics.items() if k.startswith(prefix)}


def _start_curricula_at(saved: DictConfig, levels: Mapping[str, float]) -> None:
    """A resumed run's curricula go on from the levels its checkpoint reached."""
    for name, level in levels.items():
        entry = OmegaConf.select(saved, f"curriculum.{name}")
        if entry is not None:
            entry.params = {**(entry.get("params") or {}), "start": float(level)}
            log.info("resume: curriculum.%s goes on from level %.2f", name, level)


def _add_new_settings(saved: dict, defaults: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Add to ``saved`` the keys of ``defaults`` it lacks, but no entry to a table (a mapping of
    entries, e.g. ``rewards`` or ``events``: an entry the run left out stays out); their names."""
    table = bool(saved) and all(v is None or isinstance(v, Mapping) for v in saved.values())
    added = []
    for key, value in defaults.items():
        if key not in saved:
            if not table:
                saved[key] = value
                added.append(f"{prefix}{key}")
        elif isinstance(saved[key], dict) and isinstance(value, Mapping):
            added += _add_new_settings(saved[key], value, f"{prefix}{key}.")
    return added


def check_algorithm_name(name: str) -> None:
    if name not in ALGORITHMS:
        raise ValueError(f"algo.name: expected one of {', '.join(ALGORITHMS)}, got {name!r}")


def algorithm(name: str) -> Algorithm:
    check_algorithm_name(name)
    module, attribute = ALGORITHMS[name].split(":")
    return getattr(importlib.import_module(module), attribute)


def resolve_device(spec: str, ranks: Ranks = SINGLE) -> torch.device:
    """The learner's device; under torchrun, CUDA means the GPU of the local rank."""
    device = _device(spec)
    if device.type == "cuda" and ranks.world_size > 1 and device.index is None:
        return torch.device("cuda", ranks.local_rank)
    return device


def _device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ValueError(f"device: expected auto, cpu, cuda or cuda:N, got {spec!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {spec!r} asked for, but torch sees no CUDA device; use auto")
    return device


def validate_config(cfg: DictConfig) -> None:
    """The run keys and the task's sections, before anything is built: name the key, the value
    and what is accepted (the terms' parameters are checked when the env resolves its plan;
    the algorithm checks its own keys before it builds anything)."""

    def int_at_least(key: str, minimum: int) -> None:
        value = OmegaConf.select(cfg, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{key}: expected an int >= {minimum}, got {value!r}")

    int_at_least("num_envs", 1)
    int_at_least("max_iterations", 0)
    int_at_least("save_interval", 1)
    if cfg.backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {cfg.backend!r}")
    check_algorithm_name(cfg.algo.name)
    check_sections(cfg)  # the task's own sections (env, commands, ...)


@dataclass
class TrainingHandle:
    """A built run: its trainer, directory and counters. ``train`` may be called repeatedly."""

    cfg: DictConfig
    trainer: Trainer
    run_dir: Path
    device: torch.device
    threads: ThreadBudget
    iteration: int = 0
    env_steps: int = 0
    wall_s: float = 0.0  # training time of the run so far, earlier sessions included
    last_metrics: dict[str, float] = field(default_factory=dict)
    last_checkpoint: Path | None = None  # the newest checkpoint on disk
    saved_iteration: int = -1  # the iteration of last_checkpoint
    stop_signal: int | None = None  # the signal that stopped the last ``train``, if one did
    ranks: Ranks = SINGLE  # under torchrun, rank 0 alone writes the run directory
    _writer: Any = None
    _deploy: Any = None  # (deploy document, clip tables or None), made at the first export

    def train(self, iterations: int | None = None) -> dict[str, float]:
        """Run ``iterations`` more iterations (default ``max_iterations``); checkpoint every
        ``save_interval`` and at the end. A SIGINT or SIGTERM ends the run after the iteration
        it is in, saved, and ``stop_signal`` names it (further signals wait for the save; see
        :mod:`fuselab_rl.stopping`). A dead partner process (:class:`PartnerFailed`) is raised
        once what the trainer holds is saved."""
        from tqdm import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        count = self.cfg.max_iterations if iterations is None else iterations
        first = self.iteration + 1
        last = self.iteration + count
        log.info("train: iterations %d..%d in %s", first, last, self.run_dir)
        started = time.perf_counter() - self.wall_s
        bar = tqdm(total=count, desc="train", unit="it", disable=not self.cfg.progress, leave=False)
        stopping = False
        with StopSignals() as stop:
            try:
                with logging_redirect_tqdm():
                    while self.iteration < last and not stopping:
                        metrics = self.trainer.iterate()
                        self.iteration += 1
                        self.env_steps += int(metrics.get("Perf/env_steps", 0))
                        self.wall_s = time.perf_counter() - started
                        self.last_metrics = metrics
                        self._log(metrics, last)
                        bar.update(1)
                        if self.iteration % self.cfg.save_interval == 0:
                            self.save()
                        # every rank stops after the same iteration (a signal may reach one)
                        stopping = distributed.any_rank(stop.received is not None, self.device)
            except PartnerFailed:
                self._save_unsaved()
                raise
            finally:
                bar.close()
            self._save_unsaved()
            distributed.wait_for_all()  # rank 0's checkpoint is on disk for every rank
        self.stop_signal = stop.received
        if self.cfg.get("plot", False) and self.ranks.is_main:
            self.plot()
        return self.last_metrics

    def _save_unsaved(self) -> None:
        if self.saved_iteration != self.iteration:
            self.save()

    def save(self) -> Path | None:
        """Checkpoint (atomically) and, with ``export_onnx``, policy.onnx beside it (rank 0;
        the other ranks hold the same parameters and save nothing)."""
        if not self.ranks.is_main:
            self.saved_iteration = self.iteration
            return None
        started = time.perf_counter()
        path = self.run_dir / checkpoint_name(self.iteration)
        state = {
            "format": CHECKPOINT_FORMAT,
            "algo": self.cfg.algo.name,
            "task": self.cfg.task_name,
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "wall_s": self.wall_s,
            "trainer": self.trainer.state_dict(),
            "curriculum": _curriculum_levels(self.last_metrics),
            "config": OmegaConf.to_container(self.cfg, resolve=True),
            "versions": versions(),
        }
        save_atomic(state, path)
        self.saved_iteration, self.last_checkpoint = self.iteration, path
        if self._writer is not None:
            self._writer.flush()
        log.info("save %s: %.1f ms", path, elapsed_ms(started))
        if self.cfg.export_onnx:
            self.export()
        return path

    def saved_note(self) -> str:
        """What the run leaves on disk: its newest checkpoint, if it has one."""
        if not self.ranks.is_main:
            return f"rank 0 saves the checkpoints in {self.run_dir}"
        if self.last_checkpoint is None:
            return "no checkpoint was saved"
        return f"checkpoint of iteration {self.saved_iteration} saved: {self.last_checkpoint}"

    def export(self) -> Path:
        """policy.onnx with its deploy metadata (fuselab_rl.deploy), made from the run's config
        once, at the first export."""
        from fuselab_rl.deploy import metadata_of_config
        from fuselab_rl.export import export_onnx

        if self._deploy is None:
            self._deploy = metadata_of_config(self.cfg)
        metadata, clip = self._deploy
        policy = self.trainer.export_policy()
        obs_dim = _input_dim(policy)
        return export_onnx(
            policy, obs_dim, self.run_dir / "policy.onnx", metadata=metadata, clip=clip
        )

    def plot(self) -> Path | None:
        from fuselab_rl.plot import plot_metrics

        try:
            return plot_metrics(self.run_dir)
        except ImportError as error:
            log.info("%s", error)
            return None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.trainer.close()
        distributed.leave()

    def __enter__(self) -> TrainingHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- logging ---------------------------------------------------------------------------------

    def _log(self, metrics: Mapping[str, float], last: int) -> None:
        if not self.ranks.is_main:
            return
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step drops events a crashed session wrote after the checkpoint resumed from
            self._writer = SummaryWriter(log_dir=str(self.run_dir), purge_step=self.iteration)
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, self.iteration)
        self._writer.add_scalar("Perf/total_env_steps", self.env_steps, self.iteration)
        record = {
            "iteration": self.iteration,
            "wall_s": round(self.wall_s, 3),
            "env_steps": self.env_steps,
            **{k: (float(v) if math.isfinite(v) else None) for k, v in metrics.items()},
        }
        with open(self.run_dir / METRICS_FILE, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        log.info("%s", console_line(self.iteration, last, self.wall_s, metrics))


def console_line(iteration: int, last: int, wall_s: float, m: Mapping[str, float]) -> str:
    parts = [f"it {iteration}/{last}"]
    if "Episode/return" in m:
        parts.append(f"return {m['Episode/return']:.2f} len {m['Episode/length']:.0f}")
    if "Perf/collect_steps_per_s" in m:
        parts.append(f"{m['Perf/collect_steps_per_s']:.0f} steps/s")
    if "Perf/collect_s" in m and "Perf/learn_s" in m:
        parts.append(f"collect {m['Perf/collect_s']:.2f}s learn {m['Perf/learn_s']:.2f}s")
    policy = [
        f"{label} {m[key]:.3g}"
        for key, label in (("Policy/kl", "kl"), ("Policy/learning_rate_mean", "lr"))
        if key in m
    ]
    if "Policy/noise_std" in m:
        policy.append(f"std {m['Policy/noise_std']:.2f}")
    if policy:
        parts.append(" ".join(policy))
    minutes, seconds = divmod(int(wall_s), 60)
    parts.append(f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}")
    return " | ".join(parts)


def create_training_handle(
    cfg: DictConfig, checkpoint: dict[str, Any] | None = None
) -> TrainingHandle:
    """Validate ``cfg``, resolve device, threads and run directory, build the trainer (and its
    env), and restore ``resume`` if set (from ``checkpoint`` when the caller has loaded it,
    see :func:`compose_resume_config`). Every stage logs its milliseconds. Under torchrun (see
    :mod:`fuselab_rl.distributed`) this process joins its ranks first."""
    cfg = copy.deepcopy(cfg)
    started = time.perf_counter()
    ranks = Ranks.from_environment()
    validate_config(cfg)
    factory = algorithm(cfg.algo.name)
    log.info(
        "config: task %s, algo %s, %d envs on %s (%.1f ms)",
        cfg.task_name,
        cfg.algo.name,
        cfg.num_envs,
        cfg.backend,
        elapsed_ms(started),
    )
    checkpoint = checkpoint or _load_resume(cfg)
    if checkpoint is not None:
        _check_resume(cfg, checkpoint)
        keep_saved_sizes(cfg, checkpoint["config"]["algo"])

    stage = time.perf_counter()
    device = resolve_device(cfg.device, ranks)
    log.info("device: %s (%.1f ms)", device, elapsed_ms(stage))
    distributed.join(ranks, device)
    try:
        handle = _build(cfg, ranks, device, factory, checkpoint)
    except BaseException:
        distributed.leave()
        raise
    log.info("start-up: %.1f ms", elapsed_ms(started))
    return handle


def _build(
    cfg: DictConfig,
    ranks: Ranks,
    device: torch.device,
    factory: Algorithm,
    checkpoint: dict[str, Any] | None,
) -> TrainingHandle:
    """Threads, run directory, trainer and restore, once this process has joined its ranks."""
    distributed.check_same_config(dict(flat_items(OmegaConf.to_container(cfg, resolve=True))))
    threads = resolve_threads(cfg, ranks)
    chosen, claimed = _run_dir(cfg, checkpoint, ranks.is_main)
    run_dir = Path(distributed.broadcast_object(str(chosen)))  # rank 0's
    cfg.run_dir = str(run_dir)
    cfg.seed = cfg.seed + ranks.rank  # each rank its own episodes; rank 0's seed is saved
    try:
        with timed(log, "trainer %s ready", cfg.algo.name):
            trainer = factory(cfg, device, threads, run_dir)
    except BaseException:
        if claimed:  # the time-stamped directory this run claimed, still empty
            run_dir.rmdir()
        raise
    if ranks.is_main:
        # Only now, with every value checked by the env and the algorithm: a config that fails
        # leaves no run directory behind.
        stale = remove_stale_temporaries(run_dir)
        if stale:
            log.warning(
                "run dir %s: removed %s (left by a run killed while saving)", run_dir, stale
            )
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        write_text_atomic(run_dir / "versions.json", json.dumps(versions(), indent=2) + "\n")
        log.info("run dir: %s", run_dir)
    handle = TrainingHandle(
        cfg=cfg, trainer=trainer, run_dir=run_dir, device=device, threads=threads, ranks=ranks
    )
    if checkpoint is not None:
        _restore(handle, checkpoint)
    return handle


def _load_resume(cfg: DictConfig) -> dict[str, Any] | None:
    """The checkpoint ``resume`` names (None without one)."""
    if not cfg.resume:
        return None
    with timed(log, "checkpoint %s loaded", cfg.resume):
        return load_checkpoint(cfg.resume)


def _check_resume(cfg: DictConfig, checkpoint: Mapping[str, Any]) -> None:
    """The checkpoint must be one of the config's task and algorithm."""
    for key, saved, asked in (
        ("task", checkpoint["task"], cfg.task_name),
        ("algo", checkpoint["algo"], cfg.algo.name),
    ):
        if saved != asked:
            raise ValueError(
                f"resume: '{checkpoint['path']}' is a {key} {saved!r} checkpoint, but the "
                f"config asks for {asked!r}; add {key}={saved} to resume it"
            )


def resolve_threads(cfg: DictConfig, ranks: Ranks) -> ThreadBudget:
    """The thread budget of ``threads`` (this rank's share of the cores under torchrun),
    applied to torch; the env's ``num_threads`` follows."""
    threads = ThreadBudget.resolve(cfg.threads, processes=ranks.local_world_size)
    if cfg.num_threads is not None and cfg.num_threads != threads.physics:
        raise ValueError(
            f"num_threads: {cfg.num_threads} conflicts with the thread budget "
            f"({threads.total}); set threads={cfg.num_threads} instead"
        )
    cfg.num_threads = threads.physics
    threads.apply_torch()
    log.info("threads: %s", threads.describe())
    return threads


def _restore(handle: TrainingHandle, checkpoint: Mapping[str, Any]) -> None:
    """Load the trainer's state and the run's counters; drop metrics logged past them."""
    started = time.perf_counter()
    try:
        handle.trainer.load_state_dict(checkpoint["trainer"])
    except BaseException:
        handle.trainer.close()
        raise
    handle.iteration = handle.saved_iteration = int(checkpoint["iteration"])
    handle.last_checkpoint = Path(checkpoint["path"])
    handle.env_steps = int(checkpoint["env_steps"])
    handle.wall_s = float(checkpoint["wall_s"])
    if handle.ranks.is_main:
        _truncate_metrics(handle.run_dir / METRICS_FILE, handle.iteration)
    log.info(
        "resumed at iteration %d (%d env steps): %.1f ms",
        handle.iteration,
        handle.env_steps,
        elapsed_ms(started),
    )


def _run_dir(
    cfg: DictConfig, checkpoint: Mapping[str, Any] | None, is_main: bool = True
) -> tuple[Path | None, bool]:
    """Where the run writes, and whether it was created here: a new run without ``run_dir``
    gets a directory named by the time, created by rank 0 (the other ranks get None and take
    rank 0's); a given ``run_dir`` is created once the trainer is built. A new run never writes
    into a directory that holds another run: its checkpoints and metrics would be mixed with
    ours."""
    if cfg.run_dir:
        run_dir = Path(cfg.run_dir).expanduser()
        held = _run_files(run_dir)
        if checkpoint is None and held:
            raise ValueError(
                f"run_dir: '{run_dir}' already holds a run ({', '.join(held)}); continue it "
                f"with resume={run_dir}, or give a new run_dir"
            )
        return run_dir, False
    if checkpoint is not None:  # a resumed run keeps writing where it was
        return Path(checkpoint["path"]).parent, False
    if not is_main:
        return None, False
    return _claim_time_stamped_dir(Path("runs") / cfg.task_name), True


def _claim_time_stamped_dir(parent: Path) -> Path:
    """A new directory under ``parent`` named by the time, created here (atomically): runs
    started in the same second, seeds launched together, each get their own (``_1``, ``_2``...
    after the first)."""
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    parent.mkdir(parents=True, exist_ok=True)
    run_dir, suffix = parent / stamp, 0
    while True:
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            suffix += 1
            run_dir = parent / f"{stamp}_{suffix}"


def _run_files(run_dir: Path) -> list[str]:
    """The files of a run in ``run_dir``: checkpoints, metrics, its config (a few named)."""
    if not run_dir.is_dir():
        return []
    names = sorted(
        p.name
        for p in run_dir.iterdir()
        if CHECKPOINT_PATTERN.match(p.name) or p.name in (METRICS_FILE, "config.yaml")
    )
    return names[:3] + ([f"{len(names) - 3} more"] if len(names) > 3 else [])


def _truncate_metrics(path: Path, iteration: int) -> None:
    """Drop lines past the checkpoint resumed from (work a crashed session lost)."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line)["iteration"] <= iteration]
    if len(kept) != len(lines):
        write_text_atomic(path, "".join(kept))


def _input_dim(policy: torch.nn.Module) -> int:
    """The policy's observation size: its ``obs_dim`` attribute, else its first Linear layer."""
    obs_dim = getattr(policy, "obs_dim", None)
    if isinstance(obs_dim, int):
        return obs_dim
    first = next(m for m in policy.modules() if isinstance(m, torch.nn.Linear))
    return first.in_features
