"""A new task from YAML and one registration: no subclass, no edit of the package's Python."""

import numpy as np
import pytest

import fuselab_envs
from fuselab_envs import registry

# A G1 that stands still: the walk's robot, actions, events and terms, every command zero, no
# stepping reward. Hydra's defaults list reuses the package's task.
G1_STAND = """\
# @package _global_
defaults:
  - g1_walk_flat
  - _self_

task_name: g1_stand
commands:
  velocity:
    params: {standing_fraction: 1.0, turning_fraction: 0.0, straight_fraction: 0.0}
rewards:
  feet_air_time: null
"""


@pytest.fixture
def g1_stand(tmp_path, monkeypatch):
    """g1_stand registered from its own directory (the registry restored afterwards)."""
    monkeypatch.setattr(registry, "TASKS", dict(registry.TASKS))
    monkeypatch.setattr(registry, "_EXTRA_CONFIG_DIRS", [])
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "g1_stand.yaml").write_text(G1_STAND)
    fuselab_envs.register_task("g1_stand", "the G1 stands still", config_dir=tmp_path)
    return tmp_path


def test_a_task_of_yaml_and_one_registration_builds_and_steps(g1_stand):
    assert "g1_stand" in fuselab_envs.list_tasks()
    env = fuselab_envs.make("g1_stand", num_envs=8)
    env.reset_all()
    for _ in range(30):  # past a push interval's start and the command's resampling
        result = env.step(np.zeros(env.actions.shape, np.float32))
    assert not np.any(env.commands["velocity"].command)  # it is only ever asked to stand
    rewards = set(result.info["reward_terms"])
    assert "feet_air_time" not in rewards and {"track_lin_vel", "posture"} <= rewards
    assert np.all(np.isfinite(result.reward))
    env.backend.close()


def test_a_registered_task_takes_overrides_and_names_its_mistakes(g1_stand):
    cfg = fuselab_envs.compose("g1_stand", ["env.randomize=false"])
    assert cfg.task_name == "g1_stand" and cfg.env.randomize is False
    with pytest.raises(KeyError, match="commands.velocity.params.standing_fractoin"):
        fuselab_envs.compose("g1_stand", ["commands.velocity.params.standing_fractoin=1.0"])


def test_a_task_directory_without_the_yaml_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="config_dir: no task/g1_sit.yaml in "):
        registry.register_task("g1_sit", "-", config_dir=tmp_path)


def test_a_registered_task_builds_from_its_saved_config_alone(g1_stand, monkeypatch):
    cfg = fuselab_envs.compose("g1_stand", ["num_envs=2"])
    monkeypatch.setattr(registry, "TASKS", {})  # another process: nothing registered there
    env = registry.make_env(cfg)  # as a run's saved config (eval, a collector process)
    assert env.num_envs == 2
    env.backend.close()
