"""Data-parallel PPO on CPU (gloo), two ranks: the same parameters on every rank after every
update (bitwise), observation statistics merged over both ranks' envs, rank 0 alone writing
the run, differing configs refused naming the key, and fuselab-train under torchrun."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rl_fake_env import SMALL_PPO, use_fake_env

from fuselab_rl.ppo import PPOTrainer
from fuselab_rl.runner import compose_config, create_training_handle

SPAWN = mp.get_context("spawn")
SCRIPTS = Path(sys.executable).parent
ITERATIONS = 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _digest(module: torch.nn.Module) -> str:
    state = module.state_dict()
    return hashlib.sha256(b"".join(state[k].numpy().tobytes() for k in sorted(state))).hexdigest()


def _environment(pid: int) -> dict[str, str]:
    items = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    return dict(item.split("=", 1) for item in items if "=" in item)


def _rank(rank: int, port: int, run_dir: str, overrides: list[str], queue) -> None:
    """One rank, as torchrun would start it: the fake env, ITERATIONS iterations; reports the
    digest of its policy (weights and normalizers) after each, or the error it raised."""
    os.environ |= {
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    with pytest.MonkeyPatch.context() as monkeypatch:
        built = use_fake_env(monkeypatch)
        cfg = compose_config(
            ["task=cartpole", "num_envs=8", f"run_dir={run_dir}", "progress=false"]
            + ["export_onnx=false", "plot=false", *SMALL_PPO, *overrides]
        )
        try:
            with create_training_handle(cfg) as handle:
                trainer = handle.trainer
                assert isinstance(trainer, PPOTrainer)
                digests = [_digest(trainer.policy)]
                for _ in range(ITERATIONS):
                    handle.train(1)
                    digests.append(_digest(trainer.policy))
                count = float(trainer.policy.actor_normalizer.count)
                iteration = handle.iteration
        except ValueError as error:
            queue.put((rank, "error", str(error)))
            return
        seeds = [env.rng.bit_generator.state["state"]["state"] for env in built]
        report = {"digests": digests, "count": count, "seeds": seeds, "iteration": iteration}
        queue.put((rank, "ok", report))


def _run_ranks(tmp_path: Path, overrides=((), ())) -> dict[int, tuple[str, object]]:
    queue, port = SPAWN.Queue(), _free_port()
    processes = [
        SPAWN.Process(target=_rank, args=(rank, port, str(tmp_path), list(overrides[rank]), queue))
        for rank in (0, 1)
    ]
    for process in processes:
        process.start()
    try:
        reports = [queue.get(timeout=180) for _ in processes]
        results = {rank: (kind, value) for rank, kind, value in reports}
    finally:
        for process in processes:
            process.join(30)
            process.kill()
    return results


def test_two_ranks_hold_the_same_parameters_after_every_update_and_merge_statistics(tmp_path):
    results = _run_ranks(tmp_path)
    (kind_0, zero), (kind_1, one) = results[0], results[1]
    assert kind_0 == kind_1 == "ok", results
    assert zero["digests"] == one["digests"]  # bitwise, from the start on
    assert len(set(zero["digests"])) == ITERATIONS + 1  # and training changed them
    assert zero["seeds"] != one["seeds"]  # each rank its own episodes
    # the normalizers saw both ranks' envs: seeding rollout + ITERATIONS, 8 steps x 8 envs x 2
    assert zero["count"] == one["count"] == (1 + ITERATIONS) * 8 * 8 * 2
    records = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["iteration"] for r in records] == list(range(1, ITERATIONS + 1))
    saved = sorted(p.name for p in tmp_path.glob("model_*.pt"))  # each train(1) saves
    assert saved == [f"model_{i}.pt" for i in range(1, ITERATIONS + 1)]


def test_a_two_rank_run_resumes_on_two_ranks_from_rank_0s_checkpoint(tmp_path):
    first = _run_ranks(tmp_path)
    resume = [f"resume={tmp_path}"]
    second = _run_ranks(tmp_path, overrides=(resume, resume))
    for rank in (0, 1):
        assert second[rank][0] == "ok", second
        assert second[rank][1]["iteration"] == 2 * ITERATIONS
        # the resumed weights are the saved ones, on both ranks
        assert second[rank][1]["digests"][0] == first[0][1]["digests"][-1]
    assert second[0][1]["digests"] == second[1][1]["digests"]


def test_ranks_given_different_configs_refuse_to_start_naming_the_key(tmp_path):
    results = _run_ranks(tmp_path, overrides=((), ("algo.learning_rate=0.002",)))
    for rank in (0, 1):
        kind, message = results[rank]
        assert kind == "error"
        assert message == (
            "algo.learning_rate: rank 0 has 0.001, rank 1 has 0.002; every rank must be given "
            "the same config"
        )
    assert not tmp_path.joinpath("config.yaml").exists()


def test_fuselab_train_under_torchrun_trains_cartpole_with_two_ranks(tmp_path):
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [SCRIPTS / "torchrun", "--standalone", "--nproc-per-node=2", "--no-python"]
        + [SCRIPTS / "fuselab-train", "task=cartpole", "num_envs=16", "max_iterations=2"]
        + ["progress=false", "plot=false", f"run_dir={run_dir}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "distributed: rank 0 of 2 (local 0 of 2), gloo backend" in done.stderr
    assert {"model_2.pt", "policy.onnx", "config.yaml"} <= {p.name for p in run_dir.iterdir()}
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2]


def test_more_ranks_than_cores_is_refused(monkeypatch, tmp_path):
    from fuselab_rl.threads import available_cores

    use_fake_env(monkeypatch)
    ranks = available_cores() + 1
    monkeypatch.setenv("WORLD_SIZE", str(ranks))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(ranks))
    monkeypatch.setattr("fuselab_rl.distributed.join", lambda ranks, device: None)
    cfg = compose_config(["task=cartpole", f"run_dir={tmp_path}", *SMALL_PPO])
    with pytest.raises(ValueError, match=rf"torchrun: {ranks} ranks on a machine with"):
        create_training_handle(cfg)


def test_a_killed_rank_stops_the_others_within_seconds_with_the_checkpoint_saved(tmp_path):
    import signal
    import time

    from fuselab_rl.checkpoint import load_checkpoint

    run_dir, log = tmp_path / "run", tmp_path / "stderr.txt"
    with log.open("w") as sink:
        launcher = subprocess.Popen(
            [SCRIPTS / "torchrun", "--standalone", "--nproc-per-node=2", "--no-python"]
            + [SCRIPTS / "fuselab-train", "task=cartpole", "num_envs=16", "progress=false"]
            + ["plot=false", "save_interval=2", "max_iterations=100000", f"run_dir={run_dir}"],
            stdout=sink,
            stderr=sink,
        )
    try:
        deadline = time.monotonic() + 180
        while "it 4/" not in log.read_text():
            assert launcher.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        workers = subprocess.run(
            ["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True
        ).stdout.split()
        rank_1 = next(int(pid) for pid in workers if _environment(int(pid)).get("RANK") == "1")
        killed = time.monotonic()
        os.kill(rank_1, signal.SIGKILL)
        code = launcher.wait(timeout=120)
        stopped_s = time.monotonic() - killed
    finally:
        launcher.kill()
    text = log.read_text()
    assert code != 0 and stopped_s < 60, (code, stopped_s, text[-3000:])
    assert "another rank stopped answering" in text, text[-3000:]
    assert "checkpoint of iteration" in text
    assert load_checkpoint(run_dir)["iteration"] >= 4
