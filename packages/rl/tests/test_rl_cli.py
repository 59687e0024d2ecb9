"""The command line: fuselab-train end to end on the G1, usage errors in one line with a non-zero
status, fuselab-play writing a playable MP4 (a fresh process: MUJOCO_GL must be set before
mujoco loads), fuselab-list."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest
from omegaconf import OmegaConf

from fuselab_rl import cli

SCRIPTS = Path(sys.executable).parent


def run_main(monkeypatch, entry, *overrides: str) -> None:
    """A Hydra entry point in this process, as its console script would run it."""
    monkeypatch.setattr(sys, "argv", [entry.__name__, *overrides])
    entry()


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("walk") / "run"
    with pytest.MonkeyPatch.context() as monkeypatch:
        run_main(
            monkeypatch,
            cli.train,
            "task=g1_walk_flat",
            "num_envs=16",
            "max_iterations=2",
            f"run_dir={run_dir}",
            "progress=false",
        )
    return run_dir


def test_train_end_to_end_writes_checkpoint_onnx_metrics_and_plot(trained_run):
    names = {p.name for p in trained_run.iterdir()}
    assert {"model_2.pt", "policy.onnx", "metrics.jsonl", "metrics.png", "config.yaml"} <= names
    assert any(name.startswith("events.out.tfevents") for name in names)
    lines = (trained_run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2]
    assert json.loads(lines[-1])["env_steps"] == 2 * 24 * 16
    assert "num_threads: " in (trained_run / "config.yaml").read_text()


@pytest.mark.parametrize(
    "script, override, nearest",
    [
        ("fuselab-train", "num_env=16", "'num_envs'"),
        ("fuselab-train", "algo.learning_rat=1e-3", "'algo.learning_rate'"),
        ("fuselab-eval", "numm_envs=3", "'num_envs'"),
    ],
)
def test_a_mistyped_key_is_one_line_naming_the_nearest_keys(script, override, nearest):
    done = subprocess.run(
        [SCRIPTS / script, "task=cartpole", override]
        if script == "fuselab-train"
        else [SCRIPTS / script, override],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    key = override.split("=")[0]
    assert f"override '{override}': no key '{key}' in the config; did you mean {nearest}" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_bad_torchrun_variable_is_one_line():
    environment = dict(os.environ, WORLD_SIZE="two")
    done = subprocess.run(
        [SCRIPTS / "fuselab-train", "task=cartpole"],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )
    assert done.returncode == 2
    assert "WORLD_SIZE: expected an int >= 0 (torchrun sets it), got 'two'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_checkpoint_is_named_and_exits_2(monkeypatch, tmp_path, caplog):
    missing = tmp_path / "nowhere"
    with pytest.raises(SystemExit) as exit_info:
        run_main(monkeypatch, cli.train, "task=cartpole", f"resume={missing}")
    assert exit_info.value.code == 2
    assert f"resume: no such file or directory '{missing}'" in caplog.text
    with pytest.raises(SystemExit) as exit_info:
        run_main(monkeypatch, cli.play, f"checkpoint={missing}")
    assert exit_info.value.code == 2
    assert f"checkpoint: no such file or directory '{missing}'" in caplog.text


def test_play_writes_a_playable_mp4(trained_run, tmp_path):
    video = tmp_path / "walk.mp4"
    done = subprocess.run(
        [
            SCRIPTS / "fuselab-play",
            f"checkpoint={trained_run / 'model_2.pt'}",
            "video=true",
            "steps=20",
            f"video_path={video}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    frames = read_frames(video)
    assert frames.shape == (21, 480, 640, 3)  # the reset state, then one frame per step
    assert frames.std() > 5  # a picture (floor, robot), not a blank frame
    assert not np.array_equal(frames[0], frames[-1])  # the robot moved


def test_play_names_a_gl_backend_that_cannot_render_in_one_line(trained_run):
    """A video with a MUJOCO_GL that cannot load: one line naming it and what to install; the
    same backend without a video does not matter (nothing is rendered)."""
    command = [SCRIPTS / "fuselab-play", f"checkpoint={trained_run / 'model_2.pt'}", "steps=2"]
    env = {**os.environ, "MUJOCO_GL": "no_such_backend"}
    done = subprocess.run(
        [*command, "video=true"], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == cli.EXIT_USAGE, done.stderr[-2000:]
    assert "video: MUJOCO_GL=no_such_backend cannot render here" in done.stderr
    assert "set MUJOCO_GL to one of egl, osmesa, glfw" in done.stderr
    assert "Traceback" not in done.stderr
    done = subprocess.run(
        [*command, "video=false"], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_list_names_tasks_and_algorithms(capsys):
    cli.list_all()
    out = capsys.readouterr().out
    for name in ("cartpole", "g1_walk_flat", "ppo", "fastsac"):
        assert name in out


def read_frames(path: Path) -> np.ndarray:
    with imageio.get_reader(path, format="FFMPEG") as reader:
        # iterate: list(reader) asks len() first, which is inf for a stream
        return np.stack([frame for frame in reader])  # pyright: ignore[reportGeneralTypeIssues]


def test_a_new_run_into_a_directory_holding_a_run_is_refused_and_nothing_is_touched(
    monkeypatch, trained_run
):
    before = {p.name: p.stat().st_mtime_ns for p in trained_run.iterdir()}
    with pytest.raises(SystemExit) as stopped:
        run_main(monkeypatch, cli.train, "task=g1_walk_flat", f"run_dir={trained_run}")
    assert stopped.value.code == cli.EXIT_USAGE
    assert {p.name: p.stat().st_mtime_ns for p in trained_run.iterdir()} == before


def test_a_config_that_fails_leaves_no_run_directory(monkeypatch, tmp_path):
    run_dir = tmp_path / "never"
    with pytest.raises(SystemExit):
        run_main(
            monkeypatch,
            cli.train,
            "task=g1_walk_flat",
            "num_envs=4",
            f"run_dir={run_dir}",
            "rewards.track_lin_vel.params.std=0",
        )
    assert not run_dir.exists()


def test_training_runs_with_a_gl_backend_that_cannot_load(tmp_path):
    """MUJOCO_GL=osmesa without libOSMesa: training renders nothing, so it must not care."""
    done = subprocess.run(
        [SCRIPTS / "fuselab-train", "task=cartpole", "max_iterations=1", "progress=false"]
        + ["export_onnx=false", "plot=false", f"run_dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MUJOCO_GL": "osmesa"},
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_resume_takes_task_and_algorithm_from_the_checkpoint(monkeypatch, tmp_path, caplog):
    run_dir = tmp_path / "cartpole"
    quick = ["max_iterations=1", "progress=false", "export_onnx=false", "plot=false"]
    run_main(monkeypatch, cli.train, "task=cartpole", "num_envs=8", f"run_dir={run_dir}", *quick)
    run_main(monkeypatch, cli.train, f"resume={run_dir}", "num_envs=8", *quick)  # no task=
    assert (run_dir / "model_2.pt").exists()
    with pytest.raises(SystemExit) as stopped:
        run_main(monkeypatch, cli.train, f"resume={run_dir}", "task=g1_walk_flat", *quick)
    assert stopped.value.code == cli.EXIT_USAGE
    assert "task: 'g1_walk_flat' given, but resume=" in caplog.text
    assert "is a 'cartpole' run" in caplog.text


def test_resume_overrides_apply_to_the_resumed_run_not_to_the_default_task(
    monkeypatch, tmp_path, caplog, capsys
):
    """Keys that only the resumed run's task has (cartpole's rewards; the default task is the
    walk) are taken without task=, and a typo names the nearest key of the resumed run."""
    from fuselab_rl.checkpoint import load_checkpoint

    run_dir = tmp_path / "cartpole"
    quick = ["max_iterations=1", "progress=false", "export_onnx=false", "plot=false"]
    run_main(monkeypatch, cli.train, "task=cartpole", "num_envs=8", f"run_dir={run_dir}", *quick)
    run_main(monkeypatch, cli.train, f"resume={run_dir}", "rewards.upright.weight=2", *quick)
    assert load_checkpoint(str(run_dir / "model_2.pt"))["config"]["rewards"]["upright"] == {
        "term": "pole_upright",
        "weight": 2.0,
    }
    for wrong, expected in [
        (["rewards.uprigt.weight=2"], "'rewards.upright.weight'"),
        (["--help"], "(of Hydra's flags only a final --cfg job), got ['--help']"),
    ]:
        with pytest.raises(SystemExit) as stopped:
            run_main(monkeypatch, cli.train, f"resume={run_dir}", *wrong, *quick)
        assert stopped.value.code == cli.EXIT_USAGE
        assert expected in caplog.text
    assert not (run_dir / "model_3.pt").exists()
    run_main(monkeypatch, cli.train, f"resume={run_dir}", "rewards.still.weight=-1", "--cfg", "job")
    shown = OmegaConf.create(capsys.readouterr().out)
    assert shown.task_name == "cartpole"
    assert (shown.rewards.upright.weight, shown.rewards.still.weight) == (2, -1)
    run_main(monkeypatch, cli.train, f"resume={run_dir}", "~rewards.still", "--cfg", "job")
    assert "still" not in OmegaConf.create(capsys.readouterr().out).rewards
    assert not (run_dir / "model_3.pt").exists()  # shown, not trained


def test_ctrl_c_during_the_first_kernel_compile_is_one_line(tmp_path):
    """SIGINT to a real process while Numba compiles the task's kernels (a fresh kernel cache):
    exit 130 with one warning, no traceback, no run directory."""
    import signal
    import time

    err = tmp_path / "stderr.txt"
    env = {**os.environ, "FUSELAB_CACHE_DIR": str(tmp_path / "kernels")}
    command = [SCRIPTS / "fuselab-train", "task=g1_walk_flat", "num_envs=4", "progress=false"]
    with err.open("w") as sink:
        process = subprocess.Popen(
            [*command, f"run_dir={tmp_path / 'run'}"],
            stderr=sink,
            stdout=sink,
            env=env,
            # as in a terminal: a test runner started in the background ignores SIGINT, and
            # its children would inherit that (Python then installs no handler)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        deadline = time.monotonic() + 120
        while "cache miss, compiling" not in err.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # inside the compile (several seconds for this task on few cores)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == cli.EXIT_INTERRUPTED
    text = err.read_text()
    assert "stopped while starting up: nothing was trained or saved" in text
    assert "Traceback" not in text and not (tmp_path / "run").exists()
