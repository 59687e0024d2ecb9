"""FastSAC's learning side: n-step replay against an oracle, the C51 projection, the squashed
Gaussian, the config, the env step both collectors take, learning cartpole in sync mode, state
round trip and the exported policy."""

from __future__ import annotations

import copy
import math
import time

import numpy as np
import pytest
import test_rl_fastsac_helpers as helpers  # first: see its docstring
import torch
from omegaconf import OmegaConf
from rl_fake_env import STEP_LEVELS, FakeEnv

from fuselab_rl.fastsac import FastSACCfg, FastSACTrainer, build_policy
from fuselab_rl.fastsac_collector import Collector, EnvSpec, EnvStepper, record_dtype
from fuselab_rl.fastsac_networks import (
    ActorPolicy,
    SquashedGaussianActor,
    project_distribution,
)
from fuselab_rl.learner_sizes import choose_learner_sizes, describe_sizes
from fuselab_rl.networks import EmpiricalNormalization
from fuselab_rl.replay import NStepReplay
from fuselab_rl.runner import compose_config, create_training_handle

# -- replay ----------------------------------------------------------------------------------------


def _nstep_oracle(history, step, env, n, gamma):
    """(return, discount, next_obs) of the transition at (step, env), by walking the history."""
    total, k = 0.0, 0
    while True:
        reward, terminated, truncated, next_obs = history[step + k][env]
        total += gamma**k * reward
        if terminated:
            return total, 0.0, next_obs
        if truncated or k == n - 1 or step + k + 1 == len(history):
            return total, gamma ** (k + 1), next_obs
        k += 1


@pytest.mark.parametrize("steps", [5, 23])  # not yet wrapped, and wrapped twice
def test_nstep_returns_match_an_oracle_with_terminations_truncations_and_the_newest_step(steps):
    num_envs, capacity, n, gamma = 4, 9, 3, 0.9
    replay = NStepReplay(
        num_envs=num_envs,
        capacity_steps=capacity,
        obs_dims={"actor": 2, "critic": 3},
        action_dim=1,
        n_step=n,
        gamma=gamma,
        device=torch.device("cpu"),
    )
    rng = np.random.default_rng(0)
    history = []
    for t in range(steps):
        reward = rng.normal(size=num_envs).astype(np.float32)
        terminated = rng.random(num_envs) < 0.15
        truncated = ~terminated & (rng.random(num_envs) < 0.15)
        next_critic = rng.normal(size=(num_envs, 3)).astype(np.float32)
        obs = {"actor": np.full((num_envs, 2), t, np.float32), "critic": np.zeros((num_envs, 3))}
        next_obs = {"actor": np.full((num_envs, 2), t + 0.5, np.float32), "critic": next_critic}
        replay.add(
            {g: torch.as_tensor(o, dtype=torch.float32) for g, o in obs.items()},
            torch.zeros(num_envs, 1),
            torch.from_numpy(reward),
            torch.from_numpy(terminated),
            torch.from_numpy(truncated),
            {g: torch.as_tensor(o, dtype=torch.float32) for g, o in next_obs.items()},
        )
        history.append(
            [(reward[e], terminated[e], truncated[e], next_critic[e]) for e in range(num_envs)]
        )
    stored = range(max(0, steps - capacity), steps)
    pairs = [(s, e) for s in stored for e in range(num_envs)]
    batch = replay.gather(torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs]))
    for i, (s, e) in enumerate(pairs):
        expected_return, expected_discount, expected_next = _nstep_oracle(history, s, e, n, gamma)
        assert batch.returns[i].item() == pytest.approx(expected_return, rel=1e-5, abs=1e-6)
        assert batch.discount[i].item() == pytest.approx(expected_discount, rel=1e-6)
        np.testing.assert_array_equal(batch.next_obs["critic"][i].numpy(), expected_next)
        assert batch.obs["actor"][i, 0].item() == s  # the first step's observation
    sampled = replay.sample(64)
    assert sampled.returns.shape == (64,) and sampled.next_obs["actor"].shape == (64, 2)
    assert ((sampled.obs["actor"][:, 0] >= stored[0]) & (sampled.obs["actor"][:, 0] < steps)).all()


# -- networks --------------------------------------------------------------------------------------


def test_projection_keeps_mass_and_mean_and_clamps_to_the_support():
    atoms = torch.linspace(-2.0, 2.0, 21)
    probs = torch.softmax(torch.randn(5, 21), dim=-1)
    shift = torch.tensor([0.0, 0.13, -0.31, 0.2, 5.0])
    scale = torch.tensor([1.0, 0.9, 0.5, 0.0, 0.9])
    projected = project_distribution(probs, shift, scale, atoms)
    torch.testing.assert_close(projected.sum(-1), torch.ones(5))
    assert (projected >= 0).all()
    # rows 0..3 stay inside the support: linear splitting keeps the mean exactly
    means = (probs * atoms).sum(-1)
    torch.testing.assert_close((projected[:4] * atoms).sum(-1), shift[:4] + scale[:4] * means[:4])
    torch.testing.assert_close(projected[0], probs[0])  # identity lands on the atoms themselves
    assert projected[3, 11].item() == pytest.approx(1.0)  # scale 0: all mass at 0.2 = atom 11
    assert projected[4, -1].item() == pytest.approx(1.0)  # far above: all mass on v_max


def test_squashed_gaussian_log_prob_matches_torch_distributions():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(3, 2, [16], log_std_range=(-3.0, 0.0))
    obs = torch.randn(256, 3)
    torch.manual_seed(1)
    actions, log_prob = actor.sample(obs)
    mean, log_std = actor(obs)
    torch.manual_seed(1)
    pre_squash = mean + torch.randn_like(mean) * log_std.exp()
    reference = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()),
        torch.distributions.transforms.TanhTransform(cache_size=1),
    )
    squashed = torch.tanh(pre_squash)
    expected = reference.log_prob(squashed).sum(-1)  # cache_size=1 inverts exactly
    torch.testing.assert_close(actions, squashed)
    torch.testing.assert_close(log_prob, expected, rtol=1e-4, atol=1e-4)
    assert (log_std >= -3.0).all() and (log_std <= 0.0).all()


def test_a_bounded_actor_scales_its_actions_not_their_log_probability():
    """bound * tanh(u): each action within its bound; the log-probability is that of tanh(u),
    the unbounded actor's (a bound's constant log would pay an entropy bonus per step
    survived); the deterministic action scales alike."""
    bound = torch.tensor([2.0, 0.5])
    torch.manual_seed(0)
    actor = SquashedGaussianActor(3, 2, [16], log_std_range=(-3.0, 0.0), bound=bound.tolist())
    unbounded = copy.deepcopy(actor)
    unbounded.bound.fill_(1.0)
    obs = torch.randn(256, 3)
    torch.manual_seed(1)
    actions, log_prob = actor.sample(obs)
    torch.manual_seed(1)
    unit_actions, unit_log_prob = unbounded.sample(obs)
    torch.testing.assert_close(actions, unit_actions * bound)
    torch.testing.assert_close(log_prob, unit_log_prob)
    assert (actions.abs() <= bound).all() and (actions.abs() > bound * 0.5).any()
    policy = ActorPolicy(3, 2, [16], normalize=False, bound=bound.tolist())
    with torch.no_grad():
        torch.testing.assert_close(policy(obs), torch.tanh(policy.actor(obs)[0]) * bound)


def test_the_policy_is_bounded_by_the_envs_reach_and_its_checkpoint_keeps_the_bound():
    """action_bound=reach takes the env spec's per-action reach, a number bounds every action;
    a checkpoint's policy is rebuilt with its saved bound."""
    terms = ("alive",), ("time_out",)
    spec = EnvSpec(4, {"actor": 3, "critic": 4}, 2, *terms, action_reach=(6.0, 0.5))
    sized = ("actor_hidden_dims=[8]", "action_bound=reach")
    reach = FastSACCfg.from_config(helpers.compose(algo=sized).algo)
    torch.testing.assert_close(build_policy(reach, spec).actor.bound, torch.tensor([6.0, 0.5]))
    number = FastSACCfg.from_config(helpers.compose(algo=("action_bound=2",)).algo)
    assert build_policy(number, spec).actor.bound.tolist() == [2.0, 2.0]
    algo = helpers.compose(algo=sized).algo
    policy = build_policy(reach, spec)
    state = {"algorithm": "fastsac", "learner": {"policy": policy.state_dict()}}
    rebuilt = FastSACTrainer.inference_policy(algo, state)
    torch.testing.assert_close(rebuilt.actor.bound, torch.tensor([6.0, 0.5]))
    obs = torch.randn(5, 3)
    torch.testing.assert_close(rebuilt(obs), policy(obs))


# -- config ----------------------------------------------------------------------------------------


def test_a_tasks_algo_task_file_applies_and_a_command_line_value_wins():
    cartpole = FastSACCfg.from_config(helpers.compose("cartpole").algo)
    assert (cartpole.batch_size, cartpole.actor_hidden_dims) == (256, (64, 64))  # its own sizes
    assert (cartpole.learning_starts, cartpole.target_entropy_scale) == (16, 1.0)
    walk = FastSACCfg.from_config(helpers.compose("g1_walk_flat").algo)
    assert (walk.batch_size, walk.learning_starts, walk.target_entropy_scale) == (2048, 32, 0.5)
    assert (
        FastSACCfg.from_config(helpers.compose("cartpole", algo=("batch_size=77",)).algo).batch_size
        == 77
    )


def test_learner_sizes_follow_the_learner_device_and_every_one_is_an_override():
    def sized(device: str, *overrides: str) -> tuple[dict, str, FastSACCfg]:
        cfg = compose_config(["task=g1_walk_flat", "algo=fastsac", *overrides])
        chosen = choose_learner_sizes(cfg, torch.device(device))
        return chosen, describe_sizes(cfg, chosen, device), FastSACCfg.from_config(cfg.algo)

    chosen, line, cpu = sized("cpu")
    assert (cpu.batch_size, cpu.actor_hidden_dims, cpu.critic_hidden_dims) == (
        2048, (256, 128), (256, 256)
    )  # fmt: skip
    assert chosen == {
        "batch_size": 2048, "actor_hidden_dims": [256, 128], "critic_hidden_dims": [256, 256]
    }  # fmt: skip
    assert line == (
        "cpu learner: batch_size 2048, actor_hidden_dims [256, 128], critic_hidden_dims [256, 256]"
    )
    _, _, cuda = sized("cuda")
    assert (cuda.batch_size, cuda.critic_hidden_dims) == (4096, (768, 384, 192))
    chosen, line, mixed = sized("cpu", "algo.batch_size=512", "algo.critic_hidden_dims=[64]")
    assert (mixed.batch_size, mixed.actor_hidden_dims, mixed.critic_hidden_dims) == (
        512, (256, 128), (64,)
    )  # fmt: skip
    assert chosen == {"actor_hidden_dims": [256, 128]}
    assert line == (
        "cpu learner: batch_size 512 (set in the config), actor_hidden_dims [256, 128], "
        "critic_hidden_dims [64] (set in the config)"
    )
    unresolved = compose_config(["task=g1_walk_flat", "algo=fastsac"])
    with pytest.raises(ValueError, match=r"algo.batch_size: 'auto' is chosen for the learner"):
        FastSACCfg.from_config(unresolved.algo)


def test_a_resume_keeps_the_learner_sizes_its_run_chose(tmp_path):
    """The sizes table (or the device) may differ when a run resumes: the weights decide."""
    overrides = ["task=cartpole", "algo=fastsac", "algo.mode=sync", "algo.learning_starts=2"]
    overrides += ["algo.steps_per_iteration=2", "threads=1", "progress=false", "plot=false"]
    overrides += ["export_onnx=false", f"run_dir={tmp_path}"]
    overrides += ["algo.actor_hidden_dims=auto", "algo.batch_size=auto"]  # from the table
    table = "algo.learner_sizes.cpu"
    first = compose_config(
        [*overrides, f"{table}.actor_hidden_dims=[32]", f"{table}.batch_size=32"]
    )
    with create_training_handle(first) as handle:
        handle.train(1)
    with create_training_handle(compose_config([*overrides, f"resume={tmp_path}"])) as resumed:
        # the table says [256, 128] and 2048 now: the saved weights load into the run's own sizes
        assert resumed.trainer.cfg.actor_hidden_dims == (32,)
        assert resumed.trainer.cfg.batch_size == resumed.cfg.algo.batch_size == 32
    explicit = compose_config([*overrides, f"resume={tmp_path}", "algo.batch_size=16"])
    with create_training_handle(explicit) as resumed:
        assert resumed.trainer.cfg.batch_size == 16  # a value given on resume wins


def test_config_errors_name_the_key_and_the_accepted_values():
    with pytest.raises(ValueError, match=r"algo.mode: expected one of async, sync, got 'fast'"):
        FastSACCfg.from_config(helpers.compose(algo=("mode=fast",)).algo)
    with pytest.raises(ValueError, match=r"algo.n_step: expected >= 1, got 0"):
        FastSACCfg.from_config(helpers.compose(algo=("n_step=0",)).algo)
    for override, message in (
        ("actor_hidden_dims=[]", r"algo.actor_hidden_dims: expected a non-empty list, each"),
        ("critic_hidden_dims=[64,0]", r"algo.critic_hidden_dims: .* got \[64, 0\]"),
        ("num_atoms=1", r"algo.num_atoms: expected >= 2, got 1"),
        ("v_min=10.0", r"algo.v_min, algo.v_max: expected v_min < v_max, got 10.0, 10.0"),
        ("log_std_min=3.0", r"algo.log_std_min, algo.log_std_max: expected log_std_min <"),
        ("gamma=1.5", r"algo.gamma: expected > 0 and <= 1, got 1.5"),
        ("critic_lr=0", r"algo.critic_lr: expected > 0, got 0"),
        ("weight_decay=-0.1", r"algo.weight_decay: expected >= 0, got -0.1"),
        ("collector.ring_slots=1", r"algo.collector.ring_slots: expected >= 2, got 1"),
        ("action_bound=0", r"algo.action_bound: expected one of reach or > 0, got 0"),
        ("action_bound=joints", r"algo.action_bound: expected one of reach or a finite number"),
    ):
        with pytest.raises(ValueError, match=message):
            FastSACCfg.from_config(helpers.compose(algo=(override,)).algo)
    misspelt = helpers.compose().algo
    OmegaConf.set_struct(misspelt, False)
    misspelt.actor_lrr = 1e-3
    with pytest.raises(ValueError, match=r"algo: unknown keys \['actor_lrr'\]; accepted: "):
        FastSACCfg.from_config(misspelt)
    with pytest.raises(
        ValueError, match=r"algo.collector.threads: expected null or an int in 1..2"
    ):
        helpers.threads(2).split("cpu", 3)


def test_thread_split_gives_a_cuda_learner_one_thread_and_a_cpu_learner_half():
    assert helpers.threads(2).split("cpu", None) == (1, 1)
    assert helpers.threads(16).split("cuda", None) == (15, 1)
    assert helpers.threads(16).split("cpu", None) == (8, 8)
    assert helpers.threads(1).split("cpu", None) == (1, 1)
    assert helpers.threads(16).split("cuda", 4) == (4, 12)


# -- training (sync mode) --------------------------------------------------------------------------

THRESHOLD = 4.0  # cartpole's return: max ~10 (0.02 per upright step, 500 steps)


def _train_until(trainer, threshold: float, budget_s: float) -> tuple[float, int, float]:
    started, iterations, best = time.perf_counter(), 0, -math.inf
    while time.perf_counter() - started < budget_s:
        metrics = trainer.iterate()
        iterations += 1
        best = max(best, metrics.get("Episode/return", -math.inf))
        if best >= threshold:
            break
    return best, iterations, time.perf_counter() - started


def test_sync_fastsac_learns_cartpole_well_above_a_random_policy(tmp_path):
    torch.set_num_threads(1)
    cfg = helpers.compose("cartpole", algo=("mode=sync",))
    random_return = helpers.random_policy_return(cfg)
    assert 3 * random_return < THRESHOLD, f"random policy returns {random_return:.2f}"
    trainer = FastSACTrainer(cfg, torch.device("cpu"), helpers.threads(1), tmp_path)
    try:
        best, iterations, elapsed = _train_until(trainer, THRESHOLD, budget_s=75.0)
        metrics = trainer.iterate()
    finally:
        trainer.close()
    assert best >= THRESHOLD, (
        f"return {best:.2f} after {iterations} iterations ({elapsed:.0f} s); random "
        f"{random_return:.2f}"
    )
    expected = {
        "Episode/return",
        "Episode/length",
        "Reward/upright",
        "Termination/pole_fell",
        "Termination/time_out",
        "Perf/env_steps",
        "Perf/collect_steps_per_s",
        "Perf/collect_s",
        "Perf/learn_s",
        "Perf/updates_per_s",
        "Loss/critic",
        "Loss/actor",
        "Loss/alpha",
        "Policy/alpha",
        "Policy/entropy",
    }
    assert expected <= metrics.keys()
    assert all(math.isfinite(v) for v in metrics.values())


# -- state and export ------------------------------------------------------------------------------


def _assert_same(a, b, path="state"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype, path
        assert torch.equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _assert_same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A sync trainer after a few iterations with updates (normalizers and optimizers moved)."""
    torch.set_num_threads(1)
    cfg = helpers.compose(
        "cartpole", algo=("mode=sync", "learning_starts=2", "steps_per_iteration=4")
    )
    trainer = FastSACTrainer(
        cfg, torch.device("cpu"), helpers.threads(1), tmp_path_factory.mktemp("r")
    )
    for _ in range(3):
        trainer.iterate()
    yield cfg, trainer
    trainer.close()


def test_state_dict_round_trip_is_exact(trained, tmp_path):
    cfg, trainer = trained
    state = copy.deepcopy(trainer.state_dict())
    assert state["learner"]["updates"] > 0 and state["learner"]["actor_optimizer"]["state"]
    fresh = FastSACTrainer(cfg, torch.device("cpu"), helpers.threads(1), tmp_path)
    try:
        with pytest.raises(AssertionError):  # a fresh trainer differs: the comparison can fail
            _assert_same(state, fresh.state_dict())
        path = tmp_path / "state.pt"
        torch.save(state, path)
        fresh.load_state_dict(torch.load(path, weights_only=False))
        _assert_same(state, fresh.state_dict())
        obs = torch.randn(32, 4) * 3
        torch.testing.assert_close(
            fresh.export_policy()(obs), trainer.export_policy()(obs), rtol=0, atol=0
        )
        # resumed: the replay refills for learning_starts steps, then the usual ratio (no
        # burst of updates for the env steps counted before the checkpoint)
        metrics = fresh.iterate()
        algo = fresh.cfg
        updates = fresh.learner.updates - state["learner"]["updates"]
        assert updates == algo.steps_per_iteration * 2  # an iteration's updates, 2 per env step
        steps = algo.learning_starts - 1 + algo.steps_per_iteration  # the refill earns nothing
        assert metrics["Perf/env_steps"] == steps * fresh.spec.num_envs
    finally:
        fresh.close()
    with pytest.raises(ValueError, match="checkpoint: expected a FastSAC state"):
        trainer.load_state_dict({"algorithm": "ppo"})


def test_exported_policy_is_deterministic_on_cpu_and_is_the_squashed_mean(trained):
    _, trainer = trained
    policy = trainer.export_policy()
    learner_policy: ActorPolicy = trainer.learner.policy
    normalizer = learner_policy.normalizer
    assert isinstance(normalizer, EmpiricalNormalization)
    stats = normalizer.state_dict()
    assert stats["count"].item() > 0  # the normalizer is really in play
    assert not torch.equal(stats["mean"], torch.zeros(4))
    obs = torch.randn(64, 4, dtype=torch.float32) * 2
    first, second = policy(obs), policy(obs)
    assert first.shape == (64, 1) and first.dtype == torch.float32
    assert first.device.type == "cpu"
    assert torch.equal(first, second)
    assert (first.abs() <= 1).all()
    with torch.no_grad():
        normalized = (obs - stats["mean"]) / (stats["var"].sqrt() + normalizer.eps)
        mean, _ = learner_policy.actor(normalized)
    torch.testing.assert_close(first, torch.tanh(mean))
    trainer.iterate()  # the export is a copy: training on does not change it
    assert torch.equal(policy(obs), first)
    assert not any(p.requires_grad for p in policy.parameters())


def test_sync_iterations_are_env_steps_collected_in_process_with_the_learners_policy(trained):
    _, trainer = trained
    collector = trainer.collector
    assert type(collector) is Collector and not collector.free_running
    taken, updates = trainer.env_steps, trainer.learner.updates
    metrics = trainer.iterate()
    assert trainer.env_steps == taken + trainer.cfg.steps_per_iteration  # warmed up: 2 updates each
    assert trainer.learner.updates == updates + trainer.cfg.steps_per_iteration * 2
    assert metrics["Perf/policy_lag_updates"] == 0  # it acts with the learner's policy itself
    assert metrics["Perf/collect_blocked_s"] == 0
    assert not {"Perf/learn_wait_s", "Perf/ring_fill"} & metrics.keys()  # no ring to wait on


def test_the_soft_update_moves_every_target_parameter_tau_of_the_way_to_the_critic(trained):
    _, trainer = trained
    learner = trainer.learner
    before = [p.detach().clone() for p in learner.critic_target.parameters()]
    learner.update()
    after = list(learner.critic_target.parameters())
    online = list(learner.critic.parameters())
    assert len(before) == len(after) == len(online) > 0
    for old, target, critic in zip(before, after, online, strict=True):
        torch.testing.assert_close(target, old + learner.cfg.tau * (critic - old))
    assert not all(torch.equal(old, target) for old, target in zip(before, after, strict=True))


def test_the_in_process_collector_numbers_records_and_warms_up_with_seeded_uniform_actions(
    tmp_path,
):
    torch.set_num_threads(1)
    cfg = helpers.compose("cartpole", algo=("mode=sync", "learning_starts=2"))
    trainer = FastSACTrainer(cfg, torch.device("cpu"), helpers.threads(1), tmp_path)
    collector = trainer.collector
    rng = np.random.default_rng(int(cfg.seed))
    shape = (trainer.spec.num_envs, trainer.spec.action_dim)
    try:
        for step in range(3):
            assert collector.feed(wait=False) == 0  # it steps only when waited for
            assert collector.feed(wait=True) == 1 == trainer.learner.replay.steps_written - step
            record = collector.record
            assert int(record["seq"]) == step and int(record["policy_updates"]) == 0
            uniform = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
            if step < 2:  # learning_starts random steps, the numbers uniform() draws
                np.testing.assert_array_equal(record["actions"], uniform)
            else:  # then the (untrained) policy acts
                assert not np.array_equal(record["actions"], uniform)
                assert (np.abs(record["actions"]) <= 1).all()
    finally:
        trainer.close()


def test_the_env_step_of_both_collectors_acts_at_random_only_while_the_policy_is_new():
    """EnvStepper.step, which the in-process collector and the collector process both call:
    the record's fields, and the warm-up rule (a published update ends it at once)."""
    env = FakeEnv(num_envs=4, episode_steps=3)
    terms = ("alive", "distance"), ("left", "time_out")
    spec = EnvSpec(4, {"actor": 3, "critic": 4}, 2, *terms, action_reach=(1.0, 1.0))
    record = np.zeros((), record_dtype(spec))
    torch.manual_seed(0)
    bound = np.array([2.0, 0.5])  # the warm-up's actions span the policy's bound
    stepper = EnvStepper(env, ActorPolicy(3, 2, [8], bound=bound.tolist()), seed=5, random_steps=3)
    rng = np.random.default_rng(5)
    uniform = [(rng.uniform(-1.0, 1.0, (4, 2)) * bound).astype(np.float32) for _ in range(3)]
    for step, policy_updates in enumerate([0, 0, 7, 0]):  # random_steps 3, an update at step 2
        obs = env.obs["actor"].copy()
        stepper.step(record, policy_updates, blocked_s=0.25)
        if step < 2:
            np.testing.assert_array_equal(record["actions"], uniform[step])
        else:  # the policy acts: after an update, and after random_steps
            assert not np.array_equal(record["actions"], uniform[2])
        assert int(record["seq"]) == step and int(record["policy_updates"]) == policy_updates
        np.testing.assert_array_equal(record["obs.actor"], obs)
        assert record["timing"][2] == 0.25 and record["timing"][0] >= record["timing"][1] > 0
        if step == 2:  # every episode timed out: the next observations are the terminal ones
            assert record["episodes"][0] == 4 and record["truncated"].all()
            np.testing.assert_array_equal(record["next_obs.critic"], env.terminal_obs["critic"])
            assert not np.array_equal(record["next_obs.critic"], env.obs["critic"])
    assert env.step_calls == 4


def test_the_runner_trains_saves_exports_and_resumes_fastsac(tmp_path):
    overrides = [
        "task=cartpole",
        "algo=fastsac",
        "algo.mode=sync",
        "algo.learning_starts=2",
        "algo.steps_per_iteration=4",
        "threads=1",
        "max_iterations=2",
        "save_interval=2",
        "progress=false",
        "plot=false",
        f"run_dir={tmp_path}",
        STEP_LEVELS,  # the curriculum's level reaches the metrics through the records
    ]
    with create_training_handle(compose_config(overrides)) as handle:
        level = handle.train()["Curriculum/levels"]
        exported = handle.trainer.export_policy()
    assert (tmp_path / "model_2.pt").exists() and (tmp_path / "policy.onnx").exists()
    assert level == handle.trainer.collector.env.curricula["levels"].level > 0.0
    resumed_cfg = compose_config([*overrides, f"resume={tmp_path}", "max_iterations=1"])
    with create_training_handle(resumed_cfg) as handle:  # checkpoints load with weights_only
        assert handle.iteration == 2
        obs = torch.randn(8, 4)
        assert torch.equal(handle.trainer.export_policy()(obs), exported(obs))
        metrics = handle.train()
    assert handle.iteration == 3 and math.isfinite(metrics["Loss/critic"])
    assert metrics["Curriculum/levels"] > level  # from where the run stopped
