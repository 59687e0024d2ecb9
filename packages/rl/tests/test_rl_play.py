"""fuselab-play builds only the policy from a checkpoint: no trainer, no training env rollout, no
collector process; the policy is the one the trainer exported, and one env runs it."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from rl_fake_env import SMALL_PPO, cartpole_run_overrides, use_fake_env

from fuselab_rl import fastsac, fastsac_collector, ppo
from fuselab_rl.checkpoint import load_checkpoint
from fuselab_rl.play import load_policy, play
from fuselab_rl.runner import compose_config, create_training_handle


def no_trainer(monkeypatch) -> None:
    """Building a trainer (or a collector process) from here on fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("play built a trainer or a collector")

    for owner in (ppo.PPOTrainer, fastsac.FastSACTrainer, fastsac_collector.AsyncCollector):
        monkeypatch.setattr(owner, "__init__", refuse)


@pytest.fixture
def ppo_run(monkeypatch, tmp_path):
    """A PPO run of one iteration on the fake env; returns (run dir, its exported policy)."""
    use_fake_env(monkeypatch)
    cfg = compose_config(cartpole_run_overrides(tmp_path, *SMALL_PPO))
    with create_training_handle(cfg) as handle:
        handle.train(1)
        return tmp_path, handle.trainer.export_policy()


def test_play_of_a_ppo_run_steps_one_env_and_builds_no_trainer(monkeypatch, ppo_run):
    run_dir, exported = ppo_run
    built = use_fake_env(monkeypatch)
    no_trainer(monkeypatch)
    result = play(run_dir, steps=5, video=False, field_name="run")
    assert result.steps == 5
    assert len(built) == 1 and built[0].num_envs == 1
    assert built[0].step_calls == 5  # the rollout itself: no env stepped to build the policy
    policy = load_policy(load_checkpoint(run_dir), "run")
    obs = torch.randn(16, 3) * 2
    assert torch.equal(policy(obs), exported(obs))
    assert next(policy.parameters()).device.type == "cpu" and not policy.training


def test_bad_steps_are_named_before_anything_is_built(monkeypatch, ppo_run):
    run_dir, _ = ppo_run
    built = use_fake_env(monkeypatch)
    for steps in (0, 2.5, True):
        with pytest.raises(ValueError, match=r"steps: expected a positive int or null"):
            play(run_dir, steps=steps, video=False)  # type: ignore[arg-type]
    assert built == []


def test_a_checkpoint_whose_weights_do_not_fit_its_config_is_named(ppo_run, tmp_path):
    run_dir, _ = ppo_run
    checkpoint = load_checkpoint(run_dir)
    checkpoint["config"]["algo"]["policy"]["actor_hidden_dims"] = [32, 16]
    with pytest.raises(
        ValueError, match=r"run: '.*model_1.pt' holds no ppo policy that its config builds \("
    ):
        load_policy(checkpoint, "run")
    del checkpoint["trainer"]["policy"]
    with pytest.raises(ValueError, match=r"run: '.*model_1.pt' holds no ppo policy"):
        load_policy(checkpoint, "run")


def test_play_of_an_async_fastsac_run_starts_no_collector_process(monkeypatch, tmp_path):
    overrides = [
        "task=cartpole",
        "algo=fastsac",
        "algo.mode=sync",
        "algo.learning_starts=2",
        "algo.steps_per_iteration=4",
        "num_envs=4",
        "threads=1",
        "progress=false",
        "export_onnx=false",
        "plot=false",
        f"run_dir={tmp_path}",
    ]
    with create_training_handle(compose_config(overrides)) as handle:
        handle.train(2)
        exported = handle.trainer.export_policy()
        handle.cfg.algo.mode = "async"  # the checkpoint of an async run: the same state
        handle.save()
    assert load_checkpoint(tmp_path)["config"]["algo"]["mode"] == "async"

    no_trainer(monkeypatch)
    result = play(tmp_path, steps=5, video=False)
    assert result.steps == 5
    assert multiprocessing.active_children() == []
    policy = load_policy(load_checkpoint(tmp_path))
    obs = torch.randn(16, 4) * 2
    assert torch.equal(policy(obs), exported(obs))
    assert not any(p.requires_grad for p in policy.parameters())


def test_videos_show_a_floor_grid_and_what_the_env_is_asked_to_do():
    import mujoco

    from fuselab_envs import compose
    from fuselab_envs.registry import make_env
    from fuselab_rl.play import draw_task, film_set, render_model, render_spec

    def decorations(task: str, overrides: list[str]) -> list[int]:
        cfg = compose(task, ["num_envs=1", *overrides])
        model = film_set(render_spec(cfg))
        plain = render_model(cfg)
        assert (model.nbody, model.ngeom, model.nq) == (plain.nbody, plain.ngeom, plain.nq)
        floors = model.geom_type == mujoco.mjtGeom.mjGEOM_PLANE
        assert floors.any() and (model.geom_matid[floors] >= 0).all()  # the grid material
        env = make_env(cfg)
        try:
            data = mujoco.MjData(model)
            mujoco.mj_forward(model, data)
            scene = mujoco.MjvScene(model, maxgeom=500)
            before = scene.ngeom
            draw_task(scene, env, data)
            return [int(scene.geoms[k].type) for k in range(before, scene.ngeom)]
        finally:
            env.close()

    arrow = int(mujoco.mjtGeom.mjGEOM_ARROW)
    assert decorations("g1_walk_flat", ["commands.velocity.params.standing_fraction=0"]) == [arrow]
    spheres = decorations("g1_motion_tracking", [])
    assert len(spheres) >= 14 and set(spheres) == {int(mujoco.mjtGeom.mjGEOM_SPHERE)}
