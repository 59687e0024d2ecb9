"""Data-parallel PPO and FastSAC on CPU (gloo), two ranks: the same parameters on every rank
after every update (bitwise), observation statistics merged over both ranks' envs, rank 0 alone
writing the run, differing configs refused naming the key, and fuselab-train under torchrun."""

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

from fuselab_rl.fastsac import FastSACTrainer
from fuselab_rl.networks import ActorCritic
from fuselab_rl.ppo import PPO, PPOCfg, PPOTrainer
from fuselab_rl.runner import compose_config, create_training_handle
from fuselab_rl.storage import RolloutStorage

SPAWN = mp.get_context("spawn")
SCRIPTS = Path(sys.executable).parent
ITERATIONS = 3
# FastSAC in this process (the fake env cannot reach a collector process), on 8 envs
SMALL_FASTSAC = [
    "algo=fastsac",
    "algo.mode=sync",
    "algo.learning_starts=2",
    "algo.steps_per_iteration=4",
    "algo.batch_size=16",
    "algo.actor_hidden_dims=[16,16]",
    "algo.critic_hidden_dims=[16,16]",
    "algo.num_atoms=11",
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _digest(trainer: PPOTrainer | FastSACTrainer) -> str:
    """Of everything a trainer learns: weights, normalizers, target critic, temperature."""
    if isinstance(trainer, PPOTrainer):
        state = trainer.policy.state_dict()
    else:
        learner = trainer.learner
        state = {
            f"{name}.{key}": value
            for name in ("policy", "critic_normalizer", "critic", "critic_target")
            for key, value in getattr(learner, name).state_dict().items()
        }
        state["log_alpha"] = learner.log_alpha.detach()
    return hashlib.sha256(b"".join(state[k].numpy().tobytes() for k in sorted(state))).hexdigest()


def _actor_normalizer(trainer: PPOTrainer | FastSACTrainer) -> torch.nn.Module:
    if isinstance(trainer, PPOTrainer):
        return trainer.policy.actor_normalizer
    return trainer.learner.policy.normalizer


def _environment(pid: int) -> dict[str, str]:
    items = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    return dict(item.split("=", 1) for item in items if "=" in item)


def _join(rank: int, port: int) -> None:
    """The variables torchrun sets for ``rank`` of two on this machine."""
    os.environ |= {
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def _rank(rank: int, port: int, run_dir: str, overrides: list[str], queue) -> None:
    """One rank, as torchrun would start it: the fake env, ITERATIONS iterations; reports the
    digest of what its trainer learned after each, or the error it raised."""
    _join(rank, port)
    with pytest.MonkeyPatch.context() as monkeypatch:
        # FastSAC's collector reads the fused plan, which the fake env has not: cartpole itself
        built = [] if "algo=fastsac" in overrides else use_fake_env(monkeypatch)
        cfg = compose_config(
            ["task=cartpole", "num_envs=8", f"run_dir={run_dir}", "progress=false"]
            + ["export_onnx=false", "plot=false", "threads=1", *overrides]
        )
        try:
            with create_training_handle(cfg) as handle:
                trainer = handle.trainer
                digests, saved = [_digest(trainer)], []
                for _ in range(ITERATIONS):
                    handle.train(1)
                    digests.append(_digest(trainer))
                    saved.append(Path(run_dir, f"model_{handle.iteration}.pt").exists())
                count = float(_actor_normalizer(trainer).count)
                iteration = handle.iteration
        except ValueError as error:
            queue.put((rank, "error", str(error)))
            return
        seeds = [env.rng.bit_generator.state["state"]["state"] for env in built]
        report = {"digests": digests, "count": count, "seeds": seeds, "iteration": iteration}
        report["saved"] = saved  # rank 0's checkpoint, as train() returned on this rank
        queue.put((rank, "ok", report))


def _run_ranks(tmp_path: Path, overrides=((), ()), algo=SMALL_PPO) -> dict[int, tuple[str, object]]:
    queue, port = SPAWN.Queue(), _free_port()
    processes = [
        SPAWN.Process(
            target=_rank, args=(rank, port, str(tmp_path), [*algo, *overrides[rank]], queue)
        )
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
    # no rank returns (and leaves the process group) while rank 0 still saves
    assert zero["saved"] == one["saved"] == [True] * ITERATIONS


STEPS, ENVS, ACTOR_DIM, CRITIC_DIM, ACTIONS = 8, 16, 4, 5, 2


def _small_policy() -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(
        ACTOR_DIM, CRITIC_DIM, ACTIONS, actor_hidden_dims=(16, 16), critic_hidden_dims=(16, 16)
    )


def _ppo_update_on_a_fixed_rollout(rank: int | None, port: int = 0, queue=None):
    """PPO's update (normalizers, advantages, 3 epochs of full batches, adaptive rate) on one
    fixed rollout of ENVS envs: alone on all of them (``rank`` None), or as one of two ranks on
    its half. Returns (or puts on ``queue``) the parameters after it."""
    halves = slice(None)
    if rank is not None:
        _join(rank, port)
        torch.distributed.init_process_group("gloo")
        halves = slice(rank * ENVS // 2, (rank + 1) * ENVS // 2)
    data = torch.Generator().manual_seed(0)

    def rollout(*shape: int, offset: float = 0.0) -> torch.Tensor:
        return (torch.randn(STEPS, ENVS, *shape, generator=data) + offset)[:, halves]

    actor_obs, critic_obs = rollout(ACTOR_DIM, offset=3.0), rollout(CRITIC_DIM, offset=-1.0)
    actions, rewards = rollout(ACTIONS), rollout()
    dones = (rollout() > 1.3).float()
    last_critic_obs = rollout(CRITIC_DIM)[-1]
    policy = _small_policy()
    policy.update_normalizers(actor_obs.flatten(0, 1), critic_obs.flatten(0, 1))
    storage = RolloutStorage(STEPS, actions.shape[1], ACTOR_DIM, CRITIC_DIM, ACTIONS, "cpu")
    with torch.no_grad():
        for t in range(STEPS):
            dist = policy.distribution(actor_obs[t])
            log_probs = dist.log_prob(actions[t]).sum(-1)
            values = policy.value(critic_obs[t])
            storage.add(
                actor_obs[t], critic_obs[t], actions[t], log_probs, values, dist.mean,
                dist.stddev, rewards[t], dones[t],
            )  # fmt: skip
        last_values = policy.value(last_critic_obs)
    ppo = PPO(policy, PPOCfg(num_mini_batches=1, num_learning_epochs=3))
    ppo.compute_returns(storage, last_values)
    ppo.update(storage, torch.Generator().manual_seed(rank or 0))
    state = {key: value.numpy().copy() for key, value in policy.state_dict().items()}
    if queue is None:
        return state
    queue.put((rank, state))
    torch.distributed.destroy_process_group()


def test_two_ranks_update_ppo_as_one_rank_on_all_their_envs():
    """Each rank's half of a rollout, gradients and KL averaged, advantages and observation
    statistics over both halves: the update of one rank stepping every env, to rounding."""
    queue, port = SPAWN.Queue(), _free_port()
    processes = [
        SPAWN.Process(target=_ppo_update_on_a_fixed_rollout, args=(rank, port, queue))
        for rank in (0, 1)
    ]
    for process in processes:
        process.start()
    try:
        ranks = dict(queue.get(timeout=120) for _ in processes)
    finally:
        for process in processes:
            process.join(30)
            process.kill()
    alone = _ppo_update_on_a_fixed_rollout(None)
    initial = _small_policy().state_dict()
    for key, value in alone.items():
        assert (ranks[0][key] == ranks[1][key]).all(), key  # bitwise on both ranks
        torch.testing.assert_close(ranks[0][key], value, rtol=1e-4, atol=1e-5, msg=key)
    moved = alone["actor.0.weight"] - initial["actor.0.weight"].numpy()
    assert abs(moved).max() > 1e-3  # the update did move the policy


def test_two_fastsac_ranks_hold_the_same_networks_after_every_iteration(tmp_path):
    results = _run_ranks(tmp_path, algo=SMALL_FASTSAC)
    (kind_0, zero), (kind_1, one) = results[0], results[1]
    assert kind_0 == kind_1 == "ok", results
    assert zero["digests"] == one["digests"]  # critics, actor, normalizers, temperature
    assert len(set(zero["digests"])) == ITERATIONS + 1
    # every env step of both ranks merged into the normalizers: 4 steps an iteration (and the
    # learning_starts - 1 = 1 that fill the replay before the first update) x 8 envs x 2 ranks
    assert zero["count"] == one["count"] == (ITERATIONS * 4 + 1) * 8 * 2
    saved = sorted(p.name for p in tmp_path.glob("model_*.pt"))
    assert saved == [f"model_{i}.pt" for i in range(1, ITERATIONS + 1)]


def test_two_async_fastsac_ranks_hold_the_same_networks_after_every_iteration(tmp_path):
    """Each rank with its collector process: the data differ, the updates line up."""
    algo = [o for o in SMALL_FASTSAC if o != "algo.mode=sync"] + ["algo.mode=async"]
    results = _run_ranks(tmp_path, algo=algo)
    (kind_0, zero), (kind_1, one) = results[0], results[1]
    assert kind_0 == kind_1 == "ok", results
    assert zero["digests"] == one["digests"]
    assert len(set(zero["digests"])) == ITERATIONS + 1


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


# async FastSAC: each rank with its collector process
ASYNC_FASTSAC = ["algo=fastsac", "algo.learning_starts=4", "algo.steps_per_iteration=4"]


@pytest.mark.parametrize("algo", [["algo=ppo"], ASYNC_FASTSAC], ids=["ppo", "fastsac"])
def test_fuselab_train_under_torchrun_trains_cartpole_with_two_ranks(tmp_path, algo):
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [SCRIPTS / "torchrun", "--standalone", "--nproc-per-node=2", "--no-python"]
        + [SCRIPTS / "fuselab-train", "task=cartpole", "num_envs=16", "max_iterations=2"]
        + ["progress=false", "plot=false", f"run_dir={run_dir}", *algo],
        capture_output=True,
        text=True,
        timeout=300,
    )
    # every rank's own lines (rank 1 logs warnings only) and torchrun's, not rank 0's log
    assert done.returncode == 0, "\n".join(
        line for line in done.stderr.splitlines() if " I [rank 0] " not in line
    )[-6000:]
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
