"""fuselab-eval: its metrics on states and commands whose errors are known, a rollout of a real
G1 checkpoint, and bad input named in one line."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from rl_fake_env import SMALL_PPO, use_fake_env

import fuselab_envs
from fuselab_rl.checkpoint import load_checkpoint
from fuselab_rl.evaluate import (
    COMMAND_KINDS,
    TrackingErrors,
    VelocityErrors,
    eval_config,
    evaluate,
    evaluate_policy,
    format_report,
    heading_frame_velocity,
    start_frames,
    walk_commands,
    worst_clips,
    write_report,
)
from fuselab_rl.play import load_policy
from fuselab_rl.runner import compose_config, create_training_handle

NO_LEAD = ["commands.motion.params.lead_in_s=0", "commands.motion.params.lead_out_s=0"]
RANGES = {"lin_vel_x": [-1.0, 1.0], "lin_vel_y": [-0.5, 0.5], "ang_vel_z": [-1.0, 1.0]}


def yaw_state(yaw: float, world_vel, body_ang_vel) -> tuple[np.ndarray, np.ndarray]:
    qpos = np.zeros((1, 7), np.float32)
    qpos[0, 3], qpos[0, 6] = math.cos(yaw / 2), math.sin(yaw / 2)
    qvel = np.zeros((1, 6), np.float32)
    qvel[0, :3], qvel[0, 3:] = world_vel, body_ang_vel
    return qpos, qvel


def test_heading_frame_velocity_of_a_turned_base():
    """Facing +y (yaw 90 degrees) and moving along world +y is moving forward; a body-frame
    angular velocity about z is the yaw rate, whatever the heading."""
    qpos, qvel = yaw_state(math.pi / 2, [0.0, 0.7, 0.1], [0.0, 0.0, 0.4])
    planar, yaw_rate = heading_frame_velocity(qpos, qvel)
    np.testing.assert_allclose(planar, [[0.7, 0.0]], atol=1e-6)
    np.testing.assert_allclose(yaw_rate, [0.4], atol=1e-6)
    qpos, qvel = yaw_state(-math.pi / 2, [0.5, 0.0, 0.0], [0.0, 0.0, 0.0])
    planar, _ = heading_frame_velocity(qpos, qvel)
    np.testing.assert_allclose(planar, [[0.0, 0.5]], atol=1e-6)  # facing -x: +x is to the left


def test_velocity_errors_are_the_rms_over_measured_samples_and_standing_is_the_command():
    commands = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], np.float32)
    errors = VelocityErrors(commands)
    planar = np.array([[0.5, 0.0], [0.0, 0.0]])
    errors.add(planar, np.array([0.0, 1.0]), np.array([0, 1]))
    errors.add(np.array([[1.0, 0.0], [9.0, 9.0]]), np.array([0.0, 9.0]), np.array([0]))
    summary = errors.summary(np.array([0, 1]), np.array([False, True]))
    # row 0: 0.5 then 0 m/s off; row 1 (measured once; its 9s are not read): on command
    assert summary["lin_vel_rms_mps"] == pytest.approx(math.sqrt(0.25 / 3))
    assert summary["yaw_rate_rms_radps"] == 0.0
    assert summary["fall_fraction"] == 0.5
    assert summary["standing_lin_vel_rms_mps"] == pytest.approx(math.sqrt(1.0 / 2))
    assert summary["standing_yaw_rate_rms_radps"] == pytest.approx(math.sqrt(1.0 / 2))


def test_walk_commands_give_every_kind_its_axis_within_the_training_ranges():
    commands, kinds = walk_commands(RANGES, 100, np.random.default_rng(0))
    assert np.bincount(kinds).tolist() == [20] * len(COMMAND_KINDS)
    forward, backward, lateral, turning, standing = (commands[kinds == k] for k in range(5))
    assert (forward[:, 0] >= 0.25).all() and (forward[:, 1:] == 0).all()
    assert (backward[:, 0] <= -0.25).all() and (backward[:, 0] >= -1.0).all()
    assert (np.abs(lateral[:, 1]) >= 0.125).all() and (np.abs(lateral[:, 1]) <= 0.5).all()
    assert (lateral[:, 1] > 0).any() and (lateral[:, 1] < 0).any()
    assert (np.abs(turning[:, 2]) >= 0.25).all() and (turning[:, :2] == 0).all()
    assert (standing == 0).all()


def test_tracking_errors_of_a_robot_on_the_clip_and_one_shifted_by_10_cm():
    env = fuselab_envs.make("g1_motion_tracking", num_envs=2, num_threads=1)
    motion = env.commands["motion"]
    frames = np.array([40, 200], np.int32)
    qpos, qvel = motion.reference_state(frames)
    env.write_state(np.arange(2), qpos, qvel)
    env.robot.update()
    motion.motion_frame[:] = frames + 1  # after a step: the frame it was scored on is behind
    errors = TrackingErrors(motion, ["left_ankle_roll_link", "right_wrist_yaw_link"], 2)
    errors.add(env, np.arange(2))
    on_clip = errors.summary(np.arange(2))
    assert all(type(value) is float for value in on_clip.values())  # what json.dumps takes
    for key in ("mpkpe_mm", "root_relative_mpkpe_mm", "end_effector_mm"):
        assert on_clip[key] < 1.0, key  # float32 forward kinematics of the clip's own bodies
    assert on_clip["joint_pos_rad"] < 1e-5 and on_clip["joint_vel_radps"] < 1e-4

    qpos, qvel = motion.reference_state(frames)
    qpos[:, 0] += 0.1
    env.write_state(np.arange(2), qpos, qvel)
    env.robot.update()
    shifted = TrackingErrors(motion, ["left_ankle_roll_link", "right_wrist_yaw_link"], 2)
    shifted.add(env, np.arange(2))
    result = shifted.summary(np.arange(2))
    assert shifted.summary(np.array([1]))["mpkpe_mm"] == pytest.approx(100.0, abs=1.0)
    assert result["mpkpe_mm"] == pytest.approx(100.0, abs=1.0)
    assert result["end_effector_mm"] == pytest.approx(100.0, abs=1.0)
    assert result["root_relative_mpkpe_mm"] < 1.0 and result["joint_pos_rad"] < 1e-5


def test_tracking_errors_measure_a_clips_own_frames_not_its_lead_frames():
    env = fuselab_envs.make("g1_motion_tracking", num_envs=2, num_threads=1)
    motion = env.commands["motion"]
    lead_in = int(motion.dataset.lead_in[0])
    assert lead_in > 0  # the task leads its clips in from the standing pose
    frames = np.array([lead_in - 1, lead_in], np.int32)  # the last lead frame, the clip's first
    qpos, qvel = motion.reference_state(frames)
    qpos[:, 0] += 0.1
    env.write_state(np.arange(2), qpos, qvel)
    env.robot.update()
    motion.motion_frame[:] = frames + 1
    errors = TrackingErrors(motion, ["left_ankle_roll_link"], 2)
    errors.add(env, np.arange(2))
    assert list(errors.samples) == [0, 1]
    assert errors.summary(np.arange(2))["mpkpe_mm"] == pytest.approx(100.0, abs=1.0)
    assert math.isnan(errors.summary(np.array([0]))["mpkpe_mm"])


def test_travel_ratio_is_how_far_the_robot_moves_along_the_clips_path():
    env = fuselab_envs.make("g1_motion_tracking", num_envs=4, num_threads=1)
    motion = env.commands["motion"]
    frames = int(motion.dataset.lead_in[0]) + np.arange(40, 44, dtype=np.int32)
    qpos, qvel = motion.reference_state(frames)
    # the robot's root: half the clip's speed (and sideways), backwards, still, and still
    qvel[:, :3] = [[0.5, 0.3, 0.0], [-0.2, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    env.write_state(np.arange(4), qpos, qvel)
    env.robot.update()
    motion.motion_frame[:] = frames + 1
    errors = TrackingErrors(motion, ["left_ankle_roll_link"], 4)
    clip_vel = errors.arrays["motion_body_lin_vel_w"].copy()
    clip_vel[frames[:3], errors.root] = [1.0, 0.0, 0.2]  # the clip's root walks along x at 1 m/s
    clip_vel[frames[3], errors.root] = [0.05, 0.0, 0.0]  # ... and at frame 43 stays in place
    errors.arrays = {**errors.arrays, "motion_body_lin_vel_w": clip_vel}
    errors.add(env, np.arange(4))
    travel = [errors.summary(np.array([row]))["travel_ratio"] for row in range(3)]
    assert travel == pytest.approx([0.5, -0.2, 0.0], abs=1e-6)
    assert errors.summary(np.arange(4))["travel_ratio"] == pytest.approx(0.1, abs=1e-6)
    assert math.isnan(errors.summary(np.array([3]))["travel_ratio"])


def test_a_dataset_is_tracked_clip_by_clip_from_its_first_frame_and_spread_starts(tmp_path):
    import torch

    from fuselab_envs.motion.synth import synth_clip

    for name, seconds in (("squat", 1.0), ("stand", 0.6)):
        synth_clip(seconds, 50.0).save(tmp_path / f"{name}.npz")
    overrides = [f"commands.motion.params.file={tmp_path}", *NO_LEAD]
    cfg = fuselab_envs.compose("g1_motion_tracking", overrides)
    motion_dataset = (
        fuselab_envs.make("g1_motion_tracking", overrides, num_envs=1).commands["motion"].dataset
    )
    clips = np.arange(6) % 2
    assert list(start_frames(motion_dataset, clips, spread=False)) == [0, 51, 0, 51, 0, 51]
    assert list(start_frames(motion_dataset, clips, spread=True)) == [0, 51, 16, 61, 33, 71]

    def hold_default(obs: torch.Tensor) -> torch.Tensor:  # the default pose, whatever the clip
        return torch.zeros(obs.shape[0], 29)

    report = evaluate_policy(cfg, hold_default, num_envs=6)
    first = report["metrics"]["from_first_frame"]
    assert set(first["clips"]) == {"squat", "stand"}
    assert first["clips"]["squat"]["envs"] == first["clips"]["stand"]["envs"] == 3
    weighted = sum(c["success_rate"] * c["envs"] for c in first["clips"].values()) / 6
    assert first["success_rate"] == pytest.approx(weighted)
    assert "clips" in report["metrics"]["from_spread_starts"]
    worst = worst_clips(report["metrics"])
    assert [w["clip"] for w in worst] == sorted(
        first["clips"],
        key=lambda c: (first["clips"][c]["success_rate"], -first["clips"][c]["mpkpe_mm"]),
    )
    text = format_report({**report, "checkpoint": "-", "iteration": 0})
    assert "  squat" in text and "worst clips from the first frame: " in text
    with pytest.raises(ValueError, match="num_envs: 1 envs cannot track the dataset's 2 clips"):
        evaluate_policy(cfg, hold_default, num_envs=1)


def test_each_failed_start_is_put_down_to_the_rules_that_ended_it():
    import torch

    # a position rule of 0.1 mm ends every start at its first step (the torso leaves the clip's)
    overrides = ["terminations.anchor_pos.params.threshold_m=0.0001", *NO_LEAD]
    cfg = fuselab_envs.compose("g1_motion_tracking", overrides)

    def hold_default(obs: torch.Tensor) -> torch.Tensor:
        return torch.zeros(obs.shape[0], 29)

    report = evaluate_policy(cfg, hold_default, num_envs=2)
    first = report["metrics"]["from_first_frame"]
    assert first["success_rate"] == 0.0
    assert first["failed_by"] == {  # time_out ends an episode but is no failure
        "anchor_height": 0.0,
        "anchor_pos": 1.0,
        "anchor_ori": 0.0,
        "end_effector_height": 0.0,
        "non_finite": 0.0,
    }
    text = format_report({**report, "checkpoint": "-", "iteration": 0})
    assert "from_first_frame: failures by rule (share of the starts): anchor_pos 100%" in text


def test_the_eval_config_keeps_the_nominal_robot_the_training_or_the_task_events_and_adds_pushes():
    from fuselab_env_core.events import EVENTS

    cfg = fuselab_envs.compose("g1_walk_flat")
    table = {name: spec for name, spec in cfg.events.items() if spec is not None}
    sets_state = [n for n, spec in table.items() if EVENTS.get(spec.term, n).state_inputs]
    assert sets_state and len(sets_state) < len(table)  # the task also randomizes the robot
    before = OmegaConf.to_yaml(cfg)
    nominal = eval_config(cfg, num_envs=6, seed=2)
    assert OmegaConf.to_yaml(cfg) == before  # a copy is edited
    assert (nominal.num_envs, nominal.backend, nominal.seed) == (6, "mujoco", 2)
    assert list(nominal.events) == sets_state  # the reset state only: the nominal robot
    assert list(eval_config(cfg, num_envs=6, seed=2, events="train").events) == list(table)
    untrained = fuselab_envs.compose("g1_walk_flat", ["env.randomize=false"])
    assert list(eval_config(untrained, 6, 2, events="train").events) == sets_state
    assert list(eval_config(untrained, 6, 2, events="randomized").events) == list(table)
    pushed = eval_config(cfg, num_envs=6, seed=2, push=0.5)
    push = pushed.events.eval_push
    assert list(pushed.events) == [*sets_state, "eval_push"]
    assert (push.term, push.mode) == ("push_by_setting_velocity", "interval")
    assert push.params.lin_vel_x_mps == push.params.lin_vel_y_mps == [-0.5, 0.5]
    env = fuselab_envs.registry.make_env(pushed)  # a table the env takes
    assert [e.entry for e in env.events.events] == [*sets_state, "eval_push"]
    env.backend.close()


@pytest.fixture(scope="module")
def walk_run(tmp_path_factory):
    """One PPO iteration of g1_walk_flat on 4 envs: a real checkpoint to evaluate."""
    run_dir = tmp_path_factory.mktemp("walk_run")
    cfg = compose_config(
        [
            "task=g1_walk_flat",
            "num_envs=4",
            f"run_dir={run_dir}",
            "progress=false",
            "export_onnx=false",
            "plot=false",
            "threads=1",
            *SMALL_PPO,
        ]
    )
    with create_training_handle(cfg) as handle:
        handle.train(1)
    return run_dir


def test_a_walk_checkpoint_is_rolled_out_and_reported(walk_run, tmp_path):
    report = evaluate(walk_run, num_envs=10, seconds=0.2)
    assert report["task"] == "g1_walk_flat" and report["iteration"] == 1
    metrics = report["metrics"]
    assert list(metrics) == ["overall", *COMMAND_KINDS]
    assert sum(metrics[kind]["envs"] for kind in COMMAND_KINDS) == 10
    assert metrics["standing"]["standing_lin_vel_rms_mps"] == 0.0
    assert metrics["forward"]["standing_lin_vel_rms_mps"] >= 0.25
    overall = metrics["overall"]
    assert 0.0 <= overall["fall_fraction"] <= 1.0
    assert overall["fall_fraction"] == 1.0 or math.isfinite(overall["lin_vel_rms_mps"])
    assert "lin_vel_rms_mps" in format_report(report)
    assert write_report(report, tmp_path / "eval.json").read_text().startswith("{")
    assert evaluate(walk_run, num_envs=10, seconds=0.2) == report  # deterministic


def test_the_runs_config_with_keys_changed_is_measured_and_a_wrong_key_is_named(
    walk_run, monkeypatch, tmp_path, caplog
):
    """``+config.KEY=VALUE`` changes a key of the run's config for the evaluation: here a fall
    rule so strict (0.01 rad of tilt) that every robot falls; the report says what changed."""
    import json

    from fuselab_rl import cli

    report = tmp_path / "eval.json"
    strict = "+config.terminations.fell_over.params.limit_angle_rad=0.01"
    argv = [f"run={walk_run}", "num_envs=4", "seconds=0.2", f"json={report}", strict]
    monkeypatch.setattr(sys, "argv", ["fuselab-eval", *argv])
    cli.evaluate()
    written = json.loads(report.read_text())
    assert written["config_changes"] == {
        "terminations": {"fell_over": {"params": {"limit_angle_rad": 0.01}}}
    }
    assert written["metrics"]["overall"]["fall_fraction"] == 1.0
    assert evaluate(walk_run, num_envs=4, seconds=0.2)["metrics"]["overall"]["fall_fraction"] < 1
    dotted = {"terminations.fell_over.params.limit_angle_rad": 0.01}  # a Python caller's form
    strict_again = evaluate(walk_run, num_envs=4, seconds=0.2, config=dotted)
    assert strict_again["metrics"]["overall"]["fall_fraction"] == 1.0
    with pytest.raises(KeyError, match="config.terminations.fell: no key 'terminations.fell' in "
                       "the run's config; did you mean 'terminations.fell_over'"):  # fmt: skip
        evaluate(walk_run, config={"terminations": {"fell": {"params": {"limit_angle_rad": 1}}}})


def test_any_policy_on_a_composed_config_is_measured_like_a_checkpoint(walk_run):
    # What the rsl-rl-lib side-by-side does: its own policy, the composed (unresolved) config.
    checkpoint = load_checkpoint(walk_run, field="run")
    policy = load_policy(checkpoint, "run")
    cfg = fuselab_envs.compose("g1_walk_flat", ["num_envs=4"])
    before = OmegaConf.to_yaml(cfg)
    composed = evaluate_policy(cfg, policy, num_envs=10, seconds=0.2)
    assert OmegaConf.to_yaml(cfg) == before  # the caller's config is left as it was
    saved = evaluate_policy(checkpoint["config"], policy, num_envs=10, seconds=0.2)
    assert composed == saved
    assert saved["metrics"] == evaluate(walk_run, num_envs=10, seconds=0.2)["metrics"]
    cartpole = OmegaConf.to_container(fuselab_envs.compose("cartpole"), resolve=True)
    with pytest.raises(
        ValueError,
        match="task_name: fuselab-eval measures tasks with a uniform_velocity or motion "
        "command; 'cartpole' has none",
    ):
        evaluate_policy(cartpole, policy)


def test_a_run_that_steered_to_headings_is_measured_on_held_yaw_rates(walk_run):
    checkpoint = load_checkpoint(walk_run, field="run")
    policy = load_policy(checkpoint, "run")
    config = checkpoint["config"]
    velocity = config["commands"]["velocity"]
    steering_velocity = {**velocity, "params": {**velocity["params"], "heading_fraction": 1.0}}
    steering = {**config, "commands": {**config["commands"], "velocity": steering_velocity}}
    held = evaluate_policy(config, policy, num_envs=10, seconds=0.2)
    assert evaluate_policy(steering, policy, num_envs=10, seconds=0.2) == held


def test_bad_input_is_named(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="num_envs: expected an int >= 1, got 0"):
        evaluate(tmp_path, num_envs=0)
    with pytest.raises(ValueError, match="seconds: expected a finite number > 0, got -1"):
        evaluate(tmp_path, seconds=-1)
    with pytest.raises(FileNotFoundError, match="run"):
        evaluate(tmp_path / "missing")
    (tmp_path / "model_1.pt").write_bytes(b"torn")
    with pytest.raises(ValueError, match="is not a readable fuselab checkpoint"):
        evaluate(tmp_path)

    use_fake_env(monkeypatch)
    cartpole_dir = tmp_path / "cartpole"
    cfg = compose_config(
        ["task=cartpole", "num_envs=4", f"run_dir={cartpole_dir}", "progress=false"]
        + ["export_onnx=false", "plot=false", "threads=1", *SMALL_PPO]
    )
    with create_training_handle(cfg) as handle:
        handle.train(1)
    with pytest.raises(
        ValueError,
        match="is a cartpole policy; task_name: fuselab-eval measures tasks with a "
        "uniform_velocity or motion command",
    ):
        evaluate(cartpole_dir)
    with pytest.raises(
        ValueError, match="events: expected one of nominal, train, randomized, got 'often'"
    ):
        evaluate(cartpole_dir, events="often")
    with pytest.raises(ValueError, match=r"push: expected a speed >= 0 \(m/s\) or null, got -1"):
        evaluate(cartpole_dir, push=-1)


def test_the_command_reports_a_missing_run_in_one_line(tmp_path):
    command = [Path(sys.executable).parent / "fuselab-eval", f"run={tmp_path / 'missing'}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if " E " in line]
    assert len(errors) == 1 and "run" in errors[0] and "Traceback" not in done.stderr
