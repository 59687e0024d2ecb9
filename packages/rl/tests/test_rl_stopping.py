"""Stopping a real fuselab-train process loses nothing: a double SIGINT (a terminal's Ctrl-C plus
the copy ``uv run`` forwards) with the second one inside the save, a SIGTERM, a SIGKILLed FastSAC
collector. Each run ends with one line, no traceback, the exit status of its cause, a checkpoint
and a policy.onnx that load, no temporary files and no shared memory left behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fuselab_rl.checkpoint import load_checkpoint

SCRIPTS = Path(sys.executable).parent
CARTPOLE = ["task=cartpole", "num_envs=16", "progress=false", "plot=false", "threads=2"]
FASTSAC = [
    "algo=fastsac",
    "algo.learning_starts=4",
    "algo.steps_per_iteration=4",
    "algo.batch_size=64",
    "algo.actor_hidden_dims=[32]",
    "algo.critic_hidden_dims=[32]",
]
ALGOS = {"ppo": ["algo.num_steps_per_env=8"], "fastsac": FASTSAC}


class Training:
    """fuselab-train in its own process, its log in a file."""

    def __init__(self, tmp_path: Path, *overrides: str):
        self.run_dir = tmp_path / "run"
        self.log = tmp_path / "stderr.txt"
        command = [SCRIPTS / "fuselab-train", *CARTPOLE, f"run_dir={self.run_dir}", *overrides]
        with self.log.open("w") as sink:
            self.process = subprocess.Popen(
                [*command, "max_iterations=100000", "save_interval=100000"],
                stdout=sink,
                stderr=sink,
                # as in a terminal: a test runner started in the background ignores SIGINT,
                # and its children would inherit that
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                process_group=0,  # its own group, which signal() signals as a terminal does
            )

    def text(self) -> str:
        return self.log.read_text()

    def wait_for(self, pattern: str, timeout_s: float = 120.0) -> re.Match:
        deadline = time.monotonic() + timeout_s
        while (found := re.search(pattern, self.text())) is None:
            assert self.process.poll() is None, f"exited {self.process.returncode}:\n{self.text()}"
            assert time.monotonic() < deadline, f"no {pattern!r} in:\n{self.text()}"
            time.sleep(0.02)
        return found

    def signal(self, number: int) -> None:
        """To every process of the run (the FastSAC collector too), as a terminal does."""
        os.killpg(self.process.pid, number)

    def finish(self, timeout_s: float = 60.0) -> int:
        try:
            return self.process.wait(timeout=timeout_s)
        finally:
            self.process.kill()


def assert_nothing_lost(training: Training) -> int:
    """The run's newest checkpoint and its ONNX policy load; nothing half-written is left."""
    import onnxruntime

    text = training.text()
    assert "Traceback" not in text, text
    checkpoint = load_checkpoint(training.run_dir)
    said = re.search(r"checkpoint of iteration (\d+) saved: (\S+)", text)
    assert said is not None, text
    assert int(said.group(1)) == checkpoint["iteration"] and said.group(2) == checkpoint["path"]
    session = onnxruntime.InferenceSession(str(training.run_dir / "policy.onnx"))
    dim = session.get_inputs()[0].shape[1]
    (actions,) = session.run(None, {"obs": np.zeros((2, dim), np.float32)})
    assert np.isfinite(actions).all()
    assert not [p.name for p in training.run_dir.iterdir() if p.name.endswith(".tmp")]
    assert not [name for name in os.listdir("/dev/shm") if f"_{training.process.pid}_" in name]
    return checkpoint["iteration"]


@pytest.mark.parametrize("algo", ALGOS)
def test_a_double_sigint_with_the_second_inside_the_save_keeps_checkpoint_and_onnx(tmp_path, algo):
    training = Training(tmp_path, *ALGOS[algo])
    training.wait_for(r"it 3/")
    training.signal(signal.SIGINT)
    training.wait_for(r"save \S+model_\d+\.pt")  # the checkpoint is written; ONNX is next
    training.signal(signal.SIGINT)
    assert training.finish() == 128 + signal.SIGINT
    assert "SIGINT: already stopping; the save finishes first" in training.text()
    assert "stopped by SIGINT: checkpoint of iteration" in training.text()
    assert assert_nothing_lost(training) >= 3


def test_sigterm_stops_an_async_fastsac_run_saved_like_ctrl_c(tmp_path):
    training = Training(tmp_path, *FASTSAC)
    training.wait_for(r"it 2/")
    training.signal(signal.SIGTERM)
    assert training.finish() == 128 + signal.SIGTERM
    assert "stopped by SIGTERM: checkpoint of iteration" in training.text()
    assert "collector process" in training.text() and "stopped (exit code 0)" in training.text()
    assert_nothing_lost(training)


def test_a_killed_collector_ends_the_run_saved_with_one_line_naming_it(tmp_path):
    training = Training(tmp_path, *FASTSAC)
    collector = int(training.wait_for(r"collector process (\d+) spawned").group(1))
    training.wait_for(r"it 2/")
    os.kill(collector, signal.SIGKILL)
    assert training.finish() == 1
    assert re.search(
        rf"collector process \(pid {collector}\) failed: killed by SIGKILL \(exit code -9\); "
        r"checkpoint of iteration \d+ saved",
        training.text(),
    ), training.text()
    assert_nothing_lost(training)
