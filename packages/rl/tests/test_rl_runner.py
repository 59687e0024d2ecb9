"""The runner on a tiny env: every metric reaches TensorBoard and metrics.jsonl, save -> resume
is exact, a crash mid-save keeps the last good checkpoint, and config mistakes are named."""

from __future__ import annotations

import json
import logging
import signal
import sys
from datetime import datetime
from pathlib import Path

import pytest
import torch
from rl_fake_env import SMALL_PPO, STEP_LEVELS, cartpole_run_overrides, use_fake_env
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fuselab_rl import checkpoint as checkpoint_module
from fuselab_rl import runner
from fuselab_rl.checkpoint import load_checkpoint
from fuselab_rl.evaluate import eval_config
from fuselab_rl.ppo import PPOTrainer
from fuselab_rl.runner import compose_config, create_training_handle
from fuselab_rl.threads import ThreadBudget, available_cores


def ppo_of(handle) -> PPOTrainer:
    assert isinstance(handle.trainer, PPOTrainer)
    return handle.trainer


def config(run_dir, *overrides):
    return compose_config(cartpole_run_overrides(run_dir, *SMALL_PPO, *overrides))


def test_every_metric_goes_to_tensorboard_jsonl_and_the_console(monkeypatch, tmp_path, caplog):
    use_fake_env(monkeypatch)
    caplog.set_level(logging.INFO, logger="fuselab_rl")
    with create_training_handle(config(tmp_path, "save_interval=10")) as handle:
        metrics = handle.train(2)
    assert handle.iteration == 2 and handle.env_steps == 2 * 8 * 8

    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2]
    assert records[-1]["env_steps"] == 128 and records[-1]["wall_s"] > 0
    assert set(metrics) <= set(records[-1])

    events = EventAccumulator(str(tmp_path))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert set(metrics) <= scalars, set(metrics) - scalars
    assert [e.step for e in events.Scalars("Loss/value")] == [1, 2]

    console = [r.getMessage() for r in caplog.records if r.getMessage().startswith("it ")]
    assert len(console) == 2 and console[-1].startswith("it 2/2 | return ")
    assert (tmp_path / "model_2.pt").is_file()  # the end of train() saves
    assert "task_name: cartpole" in (tmp_path / "config.yaml").read_text()
    assert "torch" in json.loads((tmp_path / "versions.json").read_text())
    stages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("threads: 1 threads: physics 1") for m in stages)
    assert any(m.startswith("trainer ppo ready: ") and m.endswith(" ms") for m in stages)


def test_resume_continues_exactly_where_the_run_stopped(monkeypatch, tmp_path):
    built = use_fake_env(monkeypatch)
    first = tmp_path / "first"
    with create_training_handle(config(first, "save_interval=2")) as handle:
        handle.train(3)  # saves model_2.pt, then model_3.pt at the end
        uninterrupted = {k: v.clone() for k, v in ppo_of(handle).policy.state_dict().items()}
        uninterrupted_optimizer = ppo_of(handle).ppo.optimizer.state_dict()
        uninterrupted_lr = ppo_of(handle).ppo.learning_rate

    saved = load_checkpoint(first / "model_2.pt")
    with create_training_handle(
        config(tmp_path / "second", f"resume={first / 'model_2.pt'}")
    ) as resumed:
        assert resumed.iteration == 2 and resumed.env_steps == saved["env_steps"]
        env = built[-1]
        assert env.step_calls == 0  # building and restoring the trainer stepped no env
        restored = ppo_of(resumed).policy.state_dict()
        for name, value in saved["trainer"]["policy"].items():
            assert torch.equal(restored[name], value), name
        optimizer = ppo_of(resumed).ppo.optimizer.state_dict()
        assert optimizer["state"][0]["step"] == saved["trainer"]["optimizer"]["state"][0]["step"]
        assert torch.equal(
            optimizer["state"][0]["exp_avg"], saved["trainer"]["optimizer"]["state"][0]["exp_avg"]
        )
        resumed.train(1)
        assert resumed.iteration == 3
        assert env.step_calls == 8  # one rollout: the normalizers came from the checkpoint
        continued = ppo_of(resumed).policy.state_dict()
        for name, value in uninterrupted.items():
            assert torch.equal(continued[name], value), name
        assert ppo_of(resumed).ppo.learning_rate == uninterrupted_lr
        assert torch.equal(
            ppo_of(resumed).ppo.optimizer.state_dict()["state"][0]["exp_avg_sq"],
            uninterrupted_optimizer["state"][0]["exp_avg_sq"],
        )


def test_a_resume_trains_what_its_run_trained_with_the_overrides_given_now_on_top(
    monkeypatch, tmp_path, caplog
):
    """A resumed run keeps every override it was started with (the task's defaults used to
    replace them: a run started nominal went on randomized); the overrides given now apply on
    top; how this invocation runs (max_iterations, run_dir, threads) is its own."""
    use_fake_env(monkeypatch)
    first = tmp_path / "first"
    started = ["rewards.centered.weight=-0.3", "~rewards.still", "env.episode_length_s=5.0"]
    with create_training_handle(config(first, *started, "max_iterations=7")) as handle:
        handle.train(1)
    cfg = compose_config([f"resume={first}", "algo.entropy_coef=0.02", "threads=2"])
    assert (cfg.num_envs, cfg.env.episode_length_s, cfg.rewards.centered.weight) == (8, 5.0, -0.3)
    assert "still" not in cfg.rewards and cfg.algo.policy.actor_hidden_dims == [16, 16]
    assert cfg.algo.entropy_coef == 0.02  # given now
    assert (cfg.max_iterations, cfg.threads, cfg.num_threads, cfg.run_dir) == (1000, 2, None, None)
    assert cfg.progress  # this invocation's default, not the run's progress=false
    again = compose_config(cartpole_run_overrides(first, *SMALL_PPO, *started, f"resume={first}"))
    assert again == compose_config([f"resume={first}", *cartpole_run_overrides(first)])
    assert "still" not in again.rewards  # the run's own command line given again resumes it
    added = compose_config([f"resume={first}", "+rewards.still={term: joint_vel_l2, weight: -0.5}"])
    assert added.rewards.still.weight == -0.5
    with create_training_handle(added) as handle:  # an entry only the resumed run has, changed
        handle.train(1)
    changed = compose_config([f"resume={first}", "rewards.still.weight=-0.1"])
    assert changed.rewards.still.weight == -0.1

    # a checkpoint saved before the code had a key: the task's default, named
    saved = load_checkpoint(first / "model_1.pt")
    del saved["config"]["env"]["episode_length_s"]
    torch.save(saved, first / "model_1.pt")
    with caplog.at_level(logging.WARNING, logger="fuselab_rl"):
        cfg = compose_config([f"resume={first / 'model_1.pt'}"])
    assert cfg.env.episode_length_s == 10.0
    assert "the checkpoint's config has no env.episode_length_s; the task's defaults" in caplog.text

    # a checkpoint saved under a setting's former name: its value under today's name, for a
    # resume and every other reader (fuselab-eval, -play, -sim2sim)
    saved["config"]["algo"].pop("entropy_decay_over")
    saved["config"]["algo"]["entropy_decay_iterations"] = [3, 9]
    torch.save(saved, first / "model_1.pt")
    cfg = compose_config([f"resume={first / 'model_1.pt'}"])
    assert cfg.algo.entropy_decay_over == [3, 9] and "entropy_decay_iterations" not in cfg.algo
    algo = load_checkpoint(first / "model_1.pt")["config"]["algo"]
    assert algo["entropy_decay_over"] == [3, 9] and "entropy_decay_iterations" not in algo


def test_runs_started_in_the_same_second_get_a_directory_each(monkeypatch, tmp_path):
    """Seeds launched together: each new run creates its time-stamped directory as it starts,
    so the second takes the next name instead of writing into the first's; a run whose trainer
    cannot be built removes the directory it made."""

    class SameSecond:
        @staticmethod
        def now():
            return datetime(2026, 1, 2, 3, 4, 5)

    use_fake_env(monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner, "datetime", SameSecond)
    quiet = ["task=cartpole", "num_envs=8", "progress=false", "plot=false", "export_onnx=false"]
    first = create_training_handle(compose_config([*quiet, *SMALL_PPO, "seed=1"]))
    with first, create_training_handle(compose_config([*quiet, *SMALL_PPO, "seed=2"])) as second:
        first.train(1)
        second.train(1)
    runs = Path("runs") / "cartpole"  # relative to the working directory, tmp_path
    assert (first.run_dir, second.run_dir) == (
        runs / "2026-01-02_03-04-05",
        runs / "2026-01-02_03-04-05_1",
    )
    assert [
        load_checkpoint(h.run_dir / "model_1.pt")["config"]["seed"] for h in (first, second)
    ] == [1, 2]
    # the name is taken the moment it is chosen, before the trainer is built (seconds, with
    # the env's kernels), so two runs starting up side by side cannot choose the same
    cfg = compose_config(quiet)
    chosen = [runner._run_dir(cfg, None)[0], runner._run_dir(cfg, None)[0]]
    assert [p.name for p in chosen] == ["2026-01-02_03-04-05_2", "2026-01-02_03-04-05_3"]
    assert all(p.is_dir() for p in chosen)
    for path in chosen:
        path.rmdir()
    bad = ["algo.smoothness_coef=0.1", "algo.num_mini_batches=16"]  # refused by the trainer
    with pytest.raises(ValueError, match="algo.num_mini_batches"):
        create_training_handle(compose_config([*quiet, *SMALL_PPO, *bad]))
    assert sorted(p.name for p in runs.iterdir()) == [
        "2026-01-02_03-04-05",
        "2026-01-02_03-04-05_1",
    ]


def test_a_curriculum_level_is_logged_saved_and_resumed_and_left_out_of_evaluations(tmp_path):
    first = tmp_path / "first"
    with create_training_handle(config(first, STEP_LEVELS)) as handle:
        metrics = handle.train(2)
        level = handle.trainer.env.curricula["levels"].level
    assert level > 0.0 and metrics["Curriculum/levels"] == level
    saved = load_checkpoint(first / "model_2.pt")
    assert saved["curriculum"] == {"levels": level}
    resumed = compose_config([f"resume={first}"])
    assert resumed.curriculum.levels.params == {"per_step": 0.01, "start": level}
    with create_training_handle(resumed) as handle:
        assert handle.trainer.env.curricula["levels"].level == level
        assert handle.train(1)["Curriculum/levels"] > level
    assert "curriculum" not in eval_config(saved["config"], num_envs=2, seed=0)


def test_a_fixed_schedule_resumes_at_the_configured_rate_not_the_saved_one(monkeypatch, tmp_path):
    use_fake_env(monkeypatch)
    first = tmp_path / "first"
    with create_training_handle(config(first, "save_interval=1")) as handle:
        handle.train(1)  # adaptive: the rate moved away from 1e-3
        assert ppo_of(handle).ppo.learning_rate != 1e-3
    resume = ["algo.schedule=fixed", "algo.learning_rate=5e-4", f"resume={first}"]
    with create_training_handle(config(tmp_path / "second", *resume)) as resumed:
        assert ppo_of(resumed).ppo.learning_rate == 5e-4
        assert [g["lr"] for g in ppo_of(resumed).ppo.optimizer.param_groups] == [5e-4]


def test_resume_from_a_run_directory_takes_its_latest_checkpoint_and_keeps_its_logs(
    monkeypatch, tmp_path
):
    use_fake_env(monkeypatch)
    with create_training_handle(config(tmp_path, "save_interval=2")) as handle:
        handle.train(3)
    # A session that crashed after iteration 3 left lines past the checkpoint it resumes from.
    (tmp_path / "model_3.pt").unlink()
    cfg = config(tmp_path, f"resume={tmp_path}")
    cfg.run_dir = None  # a resumed run writes into its own directory
    with create_training_handle(cfg) as resumed:
        assert resumed.iteration == 2 and resumed.run_dir == tmp_path
        lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(line)["iteration"] for line in lines] == [1, 2]
        resumed.train(1)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3]


def test_a_crash_mid_save_leaves_the_last_good_checkpoint_and_no_temporary_file(
    monkeypatch, tmp_path
):
    use_fake_env(monkeypatch)
    with create_training_handle(config(tmp_path, "save_interval=1")) as handle:
        handle.train(1)
        good = (tmp_path / "model_1.pt").read_bytes()
        real_save = torch.save

        def torn_save(obj, handle_, *args, **kwargs):
            real_save(obj, handle_, *args, **kwargs)
            handle_.seek(len(good) // 2)
            handle_.truncate()
            raise OSError("disk full")

        monkeypatch.setattr(checkpoint_module.torch, "save", torn_save)
        # saving again at iteration 1 overwrites model_1.pt: the tear must not reach it
        with pytest.raises(OSError, match="disk full"):
            handle.save()
    assert (tmp_path / "model_1.pt").read_bytes() == good
    assert load_checkpoint(tmp_path / "model_1.pt")["iteration"] == 1
    assert sorted(p.name for p in tmp_path.iterdir() if "tmp" in p.name) == []


def test_missing_checkpoint_and_mismatched_task_are_named(monkeypatch, tmp_path):
    use_fake_env(monkeypatch)
    with pytest.raises(FileNotFoundError, match=r"resume: no such file or directory '.*nowhere'"):
        create_training_handle(config(tmp_path, f"resume={tmp_path / 'nowhere'}"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        FileNotFoundError, match=r"resume: run directory '.*empty' holds no checkpoint"
    ):
        create_training_handle(config(tmp_path, f"resume={tmp_path / 'empty'}"))
    (tmp_path / "model_7.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(
        ValueError, match=r"resume: '.*model_7.pt' is not a readable fuselab checkpoint"
    ):
        create_training_handle(config(tmp_path, f"resume={tmp_path}"))
    (tmp_path / "model_7.pt").unlink()
    with create_training_handle(config(tmp_path)) as handle:
        handle.train(1)
    with pytest.raises(
        ValueError, match=r"task: 'g1_walk_flat' given, but resume='.*model_1.pt' is a 'cartpole'"
    ):
        config(tmp_path, f"resume={tmp_path}", "task=g1_walk_flat")
    cfg = config(tmp_path, "task=g1_walk_flat")  # a config given its resume by hand
    cfg.resume = str(tmp_path)
    with pytest.raises(
        ValueError,
        match=r"resume: '.*model_1.pt' is a task 'cartpole' checkpoint, but the config asks for 'g1_walk_flat'; add task=cartpole",
    ):
        create_training_handle(cfg)


def test_run_keys_are_checked_before_anything_is_built(monkeypatch, tmp_path):
    built = use_fake_env(monkeypatch)
    for override, message in (
        ("num_envs=0", r"num_envs: expected an int >= 1, got 0"),
        ("save_interval=0", r"save_interval: expected an int >= 1, got 0"),
        ("backend=bullet", r"backend: expected one of mujoco, mjwarp, motrix, got 'bullet'"),
        ("algo.name=a2c", r"algo.name: expected one of ppo, fastsac, got 'a2c'"),
        ("device=tpu", r"device: expected auto, cpu, cuda or cuda:N, got 'tpu'"),
        ("threads=0", r"threads: expected null \(every core this process may use\) or an int"),
        ("num_threads=2", r"num_threads: 2 conflicts with the thread budget \(1\); set threads=2"),
    ):
        with pytest.raises(ValueError, match=message):
            create_training_handle(config(tmp_path / "bad", override))
    assert built == []


def test_thread_budget_gives_every_pool_the_budget():
    budget = ThreadBudget.resolve(None)
    assert budget.total == budget.physics == budget.kernel == budget.torch == available_cores()
    assert ThreadBudget.resolve(1).torch == 1
    with pytest.raises(
        ValueError, match=r"threads: expected null \(every core this process may use\) or an int"
    ):
        ThreadBudget.resolve("two")  # type: ignore[arg-type]
    cores = available_cores()
    assert ThreadBudget.resolve(None, processes=cores).total == 1  # torchrun: each rank a share
    with pytest.raises(ValueError, match=rf"torchrun: {cores + 1} ranks on a machine with {cores}"):
        ThreadBudget.resolve(None, processes=cores + 1)


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_ends_the_run_after_its_iteration_and_a_second_cannot_cut_the_save(
    monkeypatch, tmp_path, number
):
    """A real signal to this process in iteration 3 (as a terminal's Ctrl-C or a scheduler's
    SIGTERM), and another one in the middle of the save it causes (uv forwards a second SIGINT):
    the run stops after iteration 3 with that checkpoint whole on disk."""
    use_fake_env(monkeypatch)
    handler_before = signal.getsignal(number)
    with create_training_handle(config(tmp_path, "save_interval=100")) as handle:
        trainer = ppo_of(handle)
        real_iterate, real_state_dict, calls = trainer.iterate, trainer.state_dict, []

        def iterate():
            calls.append(1)
            if len(calls) == 3:
                signal.raise_signal(number)
            return real_iterate()

        def state_dict():
            signal.raise_signal(number)  # its handler runs here, inside the save
            return real_state_dict()

        monkeypatch.setattr(trainer, "iterate", iterate)
        monkeypatch.setattr(trainer, "state_dict", state_dict)
        handle.train(10)
    assert handle.iteration == 3 and handle.stop_signal == number
    assert load_checkpoint(tmp_path)["iteration"] == 3
    assert handle.last_checkpoint == tmp_path / "model_3.pt"
    assert signal.getsignal(number) == handler_before  # the run's handlers are gone


def test_a_resumed_run_removes_the_temporaries_a_killed_save_left(monkeypatch, tmp_path, caplog):
    use_fake_env(monkeypatch)
    with create_training_handle(config(tmp_path, "save_interval=1")) as handle:
        handle.train(1)
    stale = [tmp_path / ".model_2.pt.k3x9_q.tmp", tmp_path / ".policy.onnx.a1b2.tmp"]
    for path in stale:
        path.write_bytes(b"half a file")
    with create_training_handle(config(tmp_path, f"resume={tmp_path}")) as handle:
        assert handle.iteration == 1
    assert not any(path.exists() for path in stale)
    assert "left by a run killed while saving" in caplog.text


def test_plot_against_minutes_or_env_steps_needs_matplotlib_only_when_asked(monkeypatch, tmp_path):
    from fuselab_rl.plot import plot_metrics, plot_runs

    (tmp_path / "metrics.jsonl").write_text(
        '{"iteration": 1, "wall_s": 1.0, "env_steps": 64, "Episode/return": 0.5, '
        '"Episode/length": 20}\n'
        '{"iteration": 2, "wall_s": 2.0, "env_steps": 128, "Episode/return": 0.7, '
        '"Episode/length": 30}\n'
    )
    assert plot_metrics(tmp_path).stat().st_size > 5000
    side_by_side = plot_runs([tmp_path, tmp_path], tmp_path / "b.png", "env_steps", ["a", "b"])
    assert side_by_side.stat().st_size > 5000
    with pytest.raises(ValueError, match="x: expected one of minutes, env_steps, got 'hours'"):
        plot_runs([tmp_path], tmp_path / "c.png", "hours")
    with pytest.raises(ValueError, match="labels: 1 given for 2 runs"):
        plot_runs([tmp_path, tmp_path], tmp_path / "c.png", labels=["a"])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    with pytest.raises(
        ImportError, match=r"plot: matplotlib is not installed; `pip install 'fuselab-rl\[plot\]'`"
    ):
        plot_metrics(tmp_path)
