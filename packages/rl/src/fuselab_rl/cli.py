"""Command line: ``fuselab-train``, ``fuselab-play``, ``fuselab-eval``, ``fuselab-sim2sim``,
``fuselab-view`` and ``fuselab-list``.

    fuselab-train task=g1_walk_flat algo=ppo num_envs=1024 max_iterations=500
    fuselab-train resume=runs/g1_walk_flat/2025-01-01_12-00-00 max_iterations=500
    fuselab-play run=runs/g1_walk_flat/2025-01-01_12-00-00 video=true steps=500
    fuselab-eval run=runs/g1_walk_flat/2025-01-01_12-00-00 num_envs=256 json=eval.json
    fuselab-sim2sim run=runs/g1_walk_flat/2025-01-01_12-00-00 physics_dt=0.001
    fuselab-view run=runs/g1_walk_flat/2025-01-01_12-00-00 port=8080
    fuselab-list

``fuselab-train``, ``fuselab-play``, ``fuselab-eval``, ``fuselab-sim2sim`` and ``fuselab-view``
are Hydra apps (``--help``, ``--cfg job``, overrides; ``fuselab-train resume=`` takes a final
``--cfg job`` only); their configs are ``configs/train.yaml`` (composed with fuselab_envs' task
configs), ``configs/play.yaml``, ``configs/eval.yaml``, ``configs/sim2sim.yaml`` and
``configs/view.yaml``. A mistake in the config (an unknown
key, a missing checkpoint, a value out of range) prints one line that names it and exits with
status 2; set ``HYDRA_FULL_ERROR=1`` for the traceback.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
from collections.abc import Callable

import hydra
from omegaconf import DictConfig, OmegaConf

from fuselab_rl.distributed import Ranks
from fuselab_rl.stopping import PartnerFailed

log = logging.getLogger(__name__)

CONFIG_PATH = "pkg://fuselab_rl.configs"
USAGE_ERRORS = (ValueError, KeyError, FileNotFoundError, FloatingPointError)
EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130


def configure_logging() -> None:
    """INFO lines with milliseconds on stderr (what every start-up stage reports). Under
    torchrun each line names its rank, and ranks other than 0 report warnings only."""
    ranks = Ranks.from_environment()
    prefix = f"[rank {ranks.rank}] " if ranks.world_size > 1 else ""
    logging.basicConfig(
        level=logging.INFO if ranks.is_main else logging.WARNING,
        format=f"%(asctime)s.%(msecs)03d %(levelname).1s {prefix}%(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )


def fail(error: BaseException) -> None:
    """One line for a usage error (the traceback with HYDRA_FULL_ERROR=1), then exit 2."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise error
    message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    log.error("%s", message)
    sys.exit(EXIT_USAGE)


def app(config_name: str) -> Callable[[Callable[[DictConfig], None]], Callable[[], None]]:
    """A Hydra app of ``configs/<config_name>.yaml`` whose overrides are checked first: an
    unknown key is one line naming it and the nearest valid keys (exit 2), where Hydra's own
    message names neither."""

    def decorate(main: Callable[[DictConfig], None]) -> Callable[[], None]:
        hydra_main = hydra.main(version_base=None, config_path=CONFIG_PATH, config_name=config_name)

        @functools.wraps(main)
        def run() -> None:
            try:
                configure_logging()  # reads torchrun's variables
                check_overrides(config_name, sys.argv[1:])
            except USAGE_ERRORS as error:
                fail(error)
            hydra_main(main)()

        return run

    return decorate


def search_paths(args) -> list[str]:
    """The command line's ``hydra.searchpath=`` overrides: a task may live on that path, so
    the override check's composition takes them along."""
    return [a for a in args if a.startswith("hydra.searchpath=")]


def check_overrides(config_name: str, argv: list[str]) -> None:
    """Compose ``config_name`` with the command line's overrides before Hydra does; an override
    of a key the config does not have fails with the nearest valid keys."""
    from hydra import compose, initialize_config_module
    from hydra.errors import ConfigCompositionException

    from fuselab_envs.registry import explain_override

    plain = [a for a in argv if "=" in a and not a.startswith(("-", "hydra."))]
    overrides = [*search_paths(argv), *plain]
    if not overrides:
        return
    with initialize_config_module(config_module="fuselab_rl.configs", version_base=None):
        try:
            compose(config_name, overrides=overrides)
        except ConfigCompositionException as error:
            groups = [o for o in overrides if o.split("=", 1)[0] in ("task", "algo")]
            fail(KeyError(explain_override(error, overrides, compose(config_name, groups))))


def train() -> None:
    """Train a policy: every key of the composed config can be overridden (key=value). With
    ``resume=RUN`` the run's own config is the base the overrides apply to, so it does not go
    through Hydra's app, which would compose them onto the default task first."""
    from fuselab_rl.runner import resume_given

    argv = sys.argv[1:]
    if resume_given(argv):
        resume(argv)
    else:
        train_new_run()


@app("train")
def train_new_run(cfg: DictConfig) -> None:
    """``fuselab-train`` without ``resume=``: a new run of the composed config."""
    run_training(cfg, checkpoint=None)


def resume(argv: list[str]) -> None:
    """``fuselab-train resume=RUN [key=value ...]``: the run's saved config under the overrides
    (``runner.compose_resume_config``); a key it lacks is one line naming the nearest. With
    ``--cfg job`` it prints that config and trains nothing."""
    from hydra.errors import HydraException

    configure_logging()
    show = argv[-2:] in (["--cfg", "job"], ["-c", "job"])
    overrides = argv[:-2] if show else argv
    try:
        if stray := [a for a in overrides if "=" not in a and not a.startswith("~")]:
            raise ValueError(
                f"resume: expected key=value, +key=value or ~key overrides (of Hydra's flags "
                f"only a final --cfg job), got {stray}"
            )
        from fuselab_rl.runner import compose_resume_config

        cfg, checkpoint = compose_resume_config(overrides)
    except USAGE_ERRORS as error:
        fail(error)
        return
    except HydraException as error:  # e.g. a task that is not on the search path
        fail(ValueError(f"resume: {error}"))
        return
    if show:
        sys.stdout.write(OmegaConf.to_yaml(cfg))
        return
    run_training(cfg, checkpoint)


def run_training(cfg: DictConfig, checkpoint: dict | None) -> None:
    """Build the training from ``cfg`` (and the checkpoint it resumes), train, save; a usage
    error, a failed partner process or a stop signal ends it with its own status."""
    # Training renders nothing: without this, MUJOCO_GL=osmesa with no libOSMesa installed
    # breaks `import mujoco` itself (mujoco loads the GL backend it names on import).
    os.environ.pop("MUJOCO_GL", None)
    try:
        from fuselab_rl.runner import create_training_handle

        handle = create_training_handle(cfg, checkpoint)
    except USAGE_ERRORS as error:
        fail(error)
        return
    except PartnerFailed as error:  # e.g. the FastSAC collector died while building its env
        log.error("%s", error)
        sys.exit(EXIT_FAILED)
    except KeyboardInterrupt:  # e.g. during the first kernel compile: no Numba traceback
        log.warning("stopped while starting up: nothing was trained or saved")
        sys.exit(EXIT_INTERRUPTED)
    with handle:
        try:
            handle.train()
        except PartnerFailed as error:
            log.error("%s; %s", error, handle.saved_note())
            sys.exit(EXIT_FAILED)
        except FloatingPointError as error:
            fail(error)
    if handle.stop_signal is not None:  # the save is complete: the file exists
        name = signal.Signals(handle.stop_signal).name
        log.warning("stopped by %s: %s", name, handle.saved_note())
        sys.exit(128 + handle.stop_signal)  # the shell's status for a process a signal ended
    log.info("done: %s", handle.run_dir)


@app("play")
def play(cfg: DictConfig) -> None:
    """Roll a trained policy out with one env and film it (run=DIR or checkpoint=FILE)."""
    if not cfg.video:
        os.environ.pop("MUJOCO_GL", None)  # nothing is rendered (see run_training)
    elif "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"  # headless: EGL; MUJOCO_GL=osmesa for software GL
    from fuselab_rl.play import import_mujoco_for_video
    from fuselab_rl.play import play as run_play

    try:
        if cfg.video:
            import_mujoco_for_video()
        field = _source_field(cfg)
        result = run_play(
            cfg[field],
            steps=cfg.steps,
            video=cfg.video,
            video_path=cfg.video_path,
            width=cfg.width,
            height=cfg.height,
            seed=cfg.seed,
            field_name=field,
        )
    except USAGE_ERRORS as error:
        fail(error)
        return
    if result.video is not None:
        log.info("video: %s", result.video)


@app("eval")
def evaluate(cfg: DictConfig) -> None:
    """Measure how a trained policy walks or tracks (run=DIR or checkpoint=FILE): a table on
    stdout, the report as JSON with json=PATH."""
    from fuselab_rl.evaluate import evaluate as run_evaluate
    from fuselab_rl.evaluate import format_report, write_report

    try:
        field = _source_field(cfg)
        report = run_evaluate(
            cfg[field],
            num_envs=cfg.num_envs,
            seconds=cfg.seconds,
            seed=cfg.seed,
            events=cfg.events,
            push=cfg.push,
            config=OmegaConf.to_container(cfg.config, resolve=True),
            field_name=field,
        )
    except USAGE_ERRORS as error:
        fail(error)
        return
    sys.stdout.write(format_report(report))
    if cfg.json is not None:
        log.info("report: %s", write_report(report, cfg.json))


@app("sim2sim")
def sim2sim(cfg: DictConfig) -> None:
    """Run a run's policy.onnx in a plain MuJoCo loop (run=DIR, mjcf=, physics_dt=): fuselab-eval's
    table on stdout, the report as JSON with json=PATH."""
    from fuselab_rl.evaluate import format_report, write_report
    from fuselab_rl.sim2sim import sim2sim as run_sim2sim

    try:
        if cfg.run is None:
            raise ValueError("run: expected a run directory (with policy.onnx and config.yaml)")
        report = run_sim2sim(
            cfg.run,
            mjcf=cfg.mjcf,
            physics_dt=cfg.physics_dt,
            seconds=cfg.seconds,
            num_envs=cfg.num_envs,
            seed=cfg.seed,
        )
    except USAGE_ERRORS as error:
        fail(error)
        return
    sys.stdout.write(format_report({**report, "checkpoint": report["run"], "iteration": "-"}))
    if cfg.json is not None:
        log.info("report: %s", write_report(report, cfg.json))


@app("view")
def view(cfg: DictConfig) -> None:
    """Watch a policy (run=DIR or checkpoint=FILE), a task (task=NAME, zero actions) or a clip
    (clip=FILE) in the browser; the log names the address."""
    os.environ.pop("MUJOCO_GL", None)  # viser draws in the browser: no OpenGL here
    from hydra.core.global_hydra import GlobalHydra

    from fuselab_rl.view import Viewer, source_of

    # task= and clip= compose the task's config with Hydra's compose API, which refuses to run
    # inside this app's Hydra context; the app's own config is already read into cfg.
    GlobalHydra.instance().clear()

    try:
        source = source_of(
            cfg.run,
            cfg.checkpoint,
            cfg.task,
            cfg.clip,
            num_envs=cfg.num_envs,
            events=cfg.events,
            seed=cfg.seed,
        )
        viewer = Viewer(source, host=cfg.host, port=cfg.port)
    except USAGE_ERRORS as error:
        fail(error)
        return
    try:
        viewer.run(seconds=cfg.seconds)
    finally:
        viewer.close()


def _source_field(cfg: DictConfig) -> str:
    """``run`` or ``checkpoint``: the one of them that is set."""
    if (cfg.run is None) == (cfg.checkpoint is None):
        raise ValueError(
            f"run, checkpoint: expected exactly one (a run directory or a checkpoint "
            f"file), got run={cfg.run!r}, checkpoint={cfg.checkpoint!r}"
        )
    return "run" if cfg.run is not None else "checkpoint"


def list_all() -> None:
    """Print the tasks and the algorithms fuselab-train knows."""
    from fuselab_envs import list_tasks
    from fuselab_rl.runner import ALGORITHMS

    lines = ["tasks:"] + [f"  {task}" for task in list_tasks()]
    lines += ["algorithms:"] + [f"  {name:<8} {target}" for name, target in ALGORITHMS.items()]
    sys.stdout.write("\n".join(lines) + "\n")
