"""A task registered from a downstream project's directory trains through the runner, and its
run's checkpoint evaluates in a process where nothing is registered."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rl_fake_env import SMALL_PPO

from fuselab_envs import registry
from fuselab_rl.checkpoint import load_checkpoint
from fuselab_rl.evaluate import eval_config
from fuselab_rl.runner import compose_config, create_training_handle

# cartpole with episodes twice as long: a task made of YAML only
CARTPOLE_LONG = """\
# @package _global_
defaults:
  - cartpole
  - _self_

task_name: cartpole_long
env:
  episode_length_s: 20.0
"""


def task_directory(root: Path) -> Path:
    (root / "tasks" / "task").mkdir(parents=True)
    (root / "tasks" / "task" / "cartpole_long.yaml").write_text(CARTPOLE_LONG)
    return root / "tasks"


def test_a_registered_task_trains_and_its_run_builds_without_the_registration(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(registry, "TASKS", dict(registry.TASKS))
    monkeypatch.setattr(registry, "_EXTRA_CONFIG_DIRS", [])
    registry.register_task("cartpole_long", "long cartpole", config_dir=task_directory(tmp_path))

    run = tmp_path / "run"
    overrides = ["task=cartpole_long", "num_envs=8", f"run_dir={run}", "threads=1"]
    quiet = ["progress=false", "export_onnx=false", "plot=false"]
    cfg = compose_config([*overrides, *quiet, *SMALL_PPO])
    assert (cfg.task_name, cfg.env.episode_length_s, cfg.algo.name) == (
        "cartpole_long",
        20.0,
        "ppo",
    )
    with create_training_handle(cfg) as handle:
        handle.train(1)

    monkeypatch.setattr(registry, "TASKS", {})  # another process: nothing registered
    saved = load_checkpoint(run)
    env = registry.make_env(eval_config(saved["config"], num_envs=2, seed=0))  # as eval does
    assert env.max_episode_steps[0] == round(20.0 / env.step_dt)
    env.backend.close()


def test_the_command_line_trains_and_resumes_a_task_found_on_hydras_search_path(tmp_path):
    search_path = f"hydra.searchpath=[pkg://fuselab_envs.configs,file://{task_directory(tmp_path)}]"
    run = tmp_path / "run"
    quiet = ["max_iterations=1", "threads=1", "progress=false", "export_onnx=false", "plot=false"]
    script = "from fuselab_rl.cli import train; train()"
    for start in ("task=cartpole_long num_envs=8", f"resume={run}"):
        done = subprocess.run(
            [sys.executable, "-c", script, search_path, *start.split(), f"run_dir={run}", *quiet],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    assert (run / "model_2.pt").is_file()  # trained, then resumed for one more iteration
    assert "task_name: cartpole_long" in (run / "config.yaml").read_text()
