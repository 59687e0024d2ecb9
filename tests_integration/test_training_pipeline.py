"""The whole stack on the G1 tasks: config -> env on a backend -> the runner for a few
iterations of PPO and FastSAC -> checkpoint -> resume -> play (MP4), on MuJoCo CPU and on
MuJoCo Warp (Warp's CPU device here, few worlds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import imageio.v2 as imageio
import pytest
import torch

from fuselab_rl.runner import _input_dim, compose_config, create_training_handle

# Small but real: every stage runs, nothing is stubbed; FastSAC updates from its first steps.
SMALL = {
    "ppo": "num_steps_per_env=8 policy.actor_hidden_dims=[64,64] policy.critic_hidden_dims=[64,64]",
    "fastsac": "mode=sync steps_per_iteration=4 learning_starts=4 batch_size=64 buffer_size=4096 "
    "actor_hidden_dims=[64,64] critic_hidden_dims=[64,64]",
}


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp"])
@pytest.mark.parametrize("task", ["g1_walk_flat", "g1_motion_tracking"])
@pytest.mark.parametrize("algo", ["ppo", "fastsac"])
def test_train_save_resume_and_play(tmp_path, algo, task, backend):
    run_dir = tmp_path / "run"
    overrides = [f"task={task}", f"algo={algo}", f"backend={backend}", "num_envs=4"]
    overrides += [f"run_dir={run_dir}", "progress=false", "plot=false"]
    overrides += [f"algo.{setting}" for setting in SMALL[algo].split()]
    with create_training_handle(compose_config(overrides)) as handle:
        metrics = handle.train(2)
        assert handle.iteration == 2
        for key in ("Perf/env_steps", "Perf/collect_steps_per_s", "Perf/learn_s"):
            assert metrics[key] > 0, key
        assert any(key.startswith("Reward/") for key in metrics)
        assert any(key.startswith("Loss/") for key in metrics)
        saved = handle.save()
        policy = handle.trainer.export_policy()
    assert saved.exists() and (run_dir / "policy.onnx").exists()

    with create_training_handle(compose_config([*overrides, f"resume={saved}"])) as resumed:
        assert resumed.iteration == 2
        again = resumed.trainer.export_policy()
        obs = torch.randn(3, _input_dim(policy))
        torch.testing.assert_close(again(obs), policy(obs))  # the same policy, restored exactly
        resumed.train(1)
        assert resumed.iteration == 3

    if backend == "mujoco" and task == "g1_motion_tracking":  # play renders with MuJoCo
        video = tmp_path / "play.mp4"
        # A fresh process: MuJoCo picks its GL backend (EGL here, no display) when it loads.
        command = [Path(sys.executable).parent / "fuselab-play", f"checkpoint={saved}"]
        command += ["video=true", f"video_path={video}", "steps=5", "width=160", "height=128"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        frames = imageio.mimread(video)
        assert len(frames) >= 5 and frames[0].shape == (128, 160, 3)
        assert frames[0].std() > 1.0  # a picture, not a blank frame
