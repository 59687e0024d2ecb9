"""PPO: GAE against a plain loop, the normalizer, mini-batches, the adaptive learning rate,
time-out bootstrapping and one full iteration on a tiny env."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from rl_fake_env import SMALL_PPO, STEP_LEVELS, FakeEnv, cartpole_run_overrides, use_fake_env

from fuselab_rl.networks import ActorCritic, EmpiricalNormalization
from fuselab_rl.ppo import PPO, PPOCfg, PPOTrainer, _temporal_smoothness, compute_gae
from fuselab_rl.runner import compose_config
from fuselab_rl.storage import RolloutStorage
from fuselab_rl.threads import ThreadBudget


def make_trainer(monkeypatch, tmp_path, overrides=(), episode_steps=10):
    built = use_fake_env(monkeypatch, episode_steps)
    cfg = compose_config(["task=cartpole", "num_envs=8", *SMALL_PPO, *overrides])
    trainer = PPOTrainer(cfg, torch.device("cpu"), ThreadBudget.resolve(1), tmp_path)
    return trainer, built[-1]


def gae_oracle(rewards, values, dones, last_values, gamma, lam):
    steps, envs = rewards.shape
    advantages = np.zeros((steps, envs))
    for env in range(envs):
        running = 0.0
        for t in reversed(range(steps)):
            next_value = last_values[env] if t == steps - 1 else values[t + 1, env]
            if dones[t, env]:
                next_value, running = 0.0, 0.0
            delta = rewards[t, env] + gamma * next_value - values[t, env]
            running = delta + gamma * lam * running
            advantages[t, env] = running
    return advantages + values, advantages


def test_gae_matches_a_per_env_loop_across_episode_ends():
    rng = np.random.default_rng(0)
    rewards, values = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    dones = np.zeros((6, 3))
    dones[2, 0] = dones[5, 1] = dones[0, 2] = 1.0
    last_values = rng.normal(size=3)
    returns, advantages = compute_gae(
        *(torch.tensor(a, dtype=torch.float64) for a in (rewards, values, dones, last_values)),
        gamma=0.9,
        lam=0.8,
    )
    expected_returns, expected_advantages = gae_oracle(
        rewards, values, dones, last_values, 0.9, 0.8
    )
    np.testing.assert_allclose(advantages.numpy(), expected_advantages, rtol=1e-12)
    np.testing.assert_allclose(returns.numpy(), expected_returns, rtol=1e-12)


def test_normalizer_statistics_do_not_depend_on_batching():
    data = torch.randn(300, 5, dtype=torch.float64) * torch.arange(1, 6) + 3.0
    whole = EmpiricalNormalization(5).double()
    whole.update(data)
    batched = EmpiricalNormalization(5).double()
    for chunk in data.split([1, 50, 99, 150]):
        batched.update(chunk)
    for stats in (whole, batched):
        torch.testing.assert_close(stats.mean, data.mean(0))
        torch.testing.assert_close(stats.var, data.var(0, unbiased=False))
    assert float(batched.count) == 300
    normalized = whole(data)
    torch.testing.assert_close(normalized.mean(0), torch.zeros(5, dtype=torch.float64))


def test_mini_batches_visit_every_sample_once_per_epoch():
    storage = RolloutStorage(4, 6, 2, 3, 1, torch.device("cpu"))
    storage.actor_obs[:] = torch.arange(24.0).reshape(4, 6, 1)
    generator = torch.Generator().manual_seed(0)
    batches = list(storage.mini_batches(3, 2, generator))
    assert len(batches) == 6 and all(b.actor_obs.shape == (8, 2) for b in batches)
    assert all(b.steps is None and b.dones is None for b in batches)  # no pairs of steps
    for epoch in (batches[:3], batches[3:]):
        seen = torch.cat([b.actor_obs[:, 0] for b in epoch]).sort().values
        torch.testing.assert_close(seen, torch.arange(24.0))
    with pytest.raises(ValueError, match=r"algo.num_mini_batches: expected 1..24"):
        next(storage.mini_batches(25, 1, generator))
    # the order is one permutation of the samples per epoch, drawn from the trainer's generator
    (batch, _, _) = storage.mini_batches(3, 1, torch.Generator().manual_seed(7))
    expected = torch.randperm(24, generator=torch.Generator().manual_seed(7))[:8]
    torch.testing.assert_close(batch.actor_obs[:, 0], expected.float())


def test_whole_env_mini_batches_hold_every_step_of_their_envs_step_major():
    storage = RolloutStorage(4, 6, 1, 1, 1, torch.device("cpu"))
    storage.actor_obs[:] = torch.arange(24.0).reshape(4, 6, 1)  # value = t * 6 + env
    storage.dones[1, 2] = 1.0
    batches = list(storage.mini_batches(3, 2, torch.Generator().manual_seed(0), whole_envs=True))
    assert len(batches) == 6 and all(b.steps == 4 for b in batches)
    for epoch in (batches[:3], batches[3:]):
        envs = torch.cat([b.actor_obs.view(4, 2)[0] for b in epoch]).sort().values
        torch.testing.assert_close(envs, torch.arange(6.0))  # each env in one batch
    for batch in batches:
        obs = batch.actor_obs.view(4, 2)
        torch.testing.assert_close(obs[1:] - obs[:-1], torch.full((3, 2), 6.0))  # next step
        assert batch.dones is not None  # whole-env batches carry the episode ends
        torch.testing.assert_close(batch.dones.view(4, 2), storage.dones[:, obs[0].long()])
    with pytest.raises(ValueError, match=r"algo.num_mini_batches: expected 1..6 \(envs: "):
        next(storage.mini_batches(7, 1, torch.Generator(), whole_envs=True))


def test_the_smoothness_term_skips_the_step_across_an_episode_end():
    storage = RolloutStorage(3, 2, 1, 1, 1, torch.device("cpu"))
    storage.actor_obs[:] = torch.arange(2.0)[:, None]  # value = env
    storage.dones[0, 1] = 1.0  # env 1 starts a new episode at step 1
    (batch,) = storage.mini_batches(1, 1, torch.Generator().manual_seed(0), whole_envs=True)
    mean = torch.zeros(3, 2, 1)  # (step, env, action)
    mean[1:, 1] = 5.0  # env 1 jumps only where its episode ended
    mean[2, 0] = 1.0  # env 0 changes by 1 once, within its episode
    in_batch_order = mean[:, batch.actor_obs.view(3, 2)[0].long()].reshape(6, 1)
    smoothness = _temporal_smoothness(in_batch_order, batch)
    assert smoothness.item() == pytest.approx(1.0 / 3.0)  # pairs: env 0 two, env 1 one


def _random_rollout() -> RolloutStorage:
    """8 steps x 16 envs of random 3-wide observations (zero advantages and returns)."""
    torch.manual_seed(0)
    storage = RolloutStorage(8, 16, 3, 3, 2, torch.device("cpu"))
    storage.actor_obs[:] = torch.randn(8, 16, 3)  # observations that jump from step to step
    storage.step = 8
    return storage


def _small_policy_acting_in(storage: RolloutStorage) -> ActorCritic:
    """The same small policy every call, its own actions stored as the rollout's."""
    torch.manual_seed(1)
    policy = ActorCritic(3, 3, 2, actor_hidden_dims=[16], critic_hidden_dims=[16])
    with torch.no_grad():
        dist = policy.distribution(storage.actor_obs)
        storage.actions.copy_(dist.sample())
        storage.log_probs.copy_(dist.log_prob(storage.actions).sum(-1))
        storage.action_mean.copy_(dist.mean)
        storage.action_std.copy_(dist.stddev)
    return policy


def test_the_smoothness_term_makes_the_mean_action_change_less_between_steps():
    storage = _random_rollout()

    def mean_change(policy):
        with torch.no_grad():
            means = policy.action_mean(storage.actor_obs)
        return (means[1:] - means[:-1]).square().sum(-1).mean().item()

    changes = {}
    for coef in (0.0, 1.0):
        policy = _small_policy_acting_in(storage)
        before = mean_change(policy)
        ppo = PPO(policy, PPOCfg(smoothness_coef=coef, learning_rate=1e-2))
        metrics = ppo.update(storage, torch.Generator().manual_seed(0))
        changes[coef] = mean_change(policy) / before
        assert ("Loss/smoothness" in metrics) == (coef > 0.0)
    assert changes[0.0] == pytest.approx(1.0)  # zero advantages: nothing else moves the mean
    assert changes[1.0] < 0.5


def test_the_spatial_smoothness_term_makes_the_mean_action_less_sensitive_to_obs_noise():
    storage = _random_rollout()
    noise_std = torch.tensor([0.0, 0.5, 0.0])  # one noisy column

    def noise_gain(policy):  # the mean action's squared change per unit of noise, per column
        with torch.no_grad():
            base = policy.action_mean(storage.actor_obs)
            gains = []
            for column in range(3):
                moved = storage.actor_obs.clone()
                moved[..., column] += 0.1
                gains.append((policy.action_mean(moved) - base).square().sum(-1).mean().item())
        return torch.tensor(gains)

    gains = {}
    for coef in (0.0, 1.0):
        policy = _small_policy_acting_in(storage)
        before = noise_gain(policy)
        cfg = PPOCfg(spatial_smoothness_coef=coef, learning_rate=1e-2)
        metrics = PPO(policy, cfg, noise_std).update(storage, torch.Generator().manual_seed(0))
        gains[coef] = noise_gain(policy) / before
        assert ("Loss/spatial_smoothness" in metrics) == (coef > 0.0)
    torch.testing.assert_close(gains[0.0], torch.ones(3))  # zero advantages: nothing moves
    assert gains[1.0][1] < 0.5  # the noisy column's gain falls most
    assert gains[1.0][1] < gains[1.0][0] and gains[1.0][1] < gains[1.0][2]


@pytest.mark.parametrize("noise_std", [None, torch.zeros(3)])
def test_the_spatial_smoothness_term_needs_observation_noise(noise_std):
    policy = ActorCritic(3, 3, 2, actor_hidden_dims=[4], critic_hidden_dims=[4])
    with pytest.raises(ValueError, match=r"algo.spatial_smoothness_coef: 0.5 needs observation"):
        PPO(policy, PPOCfg(spatial_smoothness_coef=0.5), noise_std)


def test_the_kl_guard_stops_an_update_once_the_policy_has_moved_that_far():
    storage = _random_rollout()
    storage.advantages.normal_(generator=torch.Generator().manual_seed(2))  # something to learn
    runs = {}
    for max_kl in (None, 1e-3, 1e9):
        policy = _small_policy_acting_in(storage)
        cfg = PPOCfg(max_kl=max_kl, learning_rate=1e-1, num_learning_epochs=3, num_mini_batches=4)
        metrics = PPO(policy, cfg).update(storage, torch.Generator().manual_seed(0))
        runs[max_kl] = metrics
    assert runs[None]["Policy/mini_batches"] == runs[1e9]["Policy/mini_batches"] == 12
    assert 1 <= runs[1e-3]["Policy/mini_batches"] < 12  # the first always steps
    assert runs[1e-3]["Policy/kl"] < runs[None]["Policy/kl"]


def test_adaptive_learning_rate_shrinks_on_large_kl_and_grows_on_small():
    ppo = PPO(ActorCritic(2, 2, 1, actor_hidden_dims=[4], critic_hidden_dims=[4]), PPOCfg())
    ppo._adapt_learning_rate(0.1)  # > 2 * desired_kl
    assert ppo.learning_rate == pytest.approx(1e-3 / 1.5)
    ppo._adapt_learning_rate(0.001)  # < desired_kl / 2
    assert ppo.learning_rate == pytest.approx(1e-3)
    ppo._adapt_learning_rate(0.01)  # within the band: unchanged
    assert ppo.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)


def test_the_entropy_coefficient_decays_linearly_over_its_iterations_and_resumes(
    monkeypatch, tmp_path
):
    decay = ["algo.entropy_decay_over=[2,4]", "algo.entropy_coef_final=0.002"]
    trainer, _ = make_trainer(monkeypatch, tmp_path, ["algo.entropy_coef=0.01", *decay])
    coefs = [trainer.iterate()["Loss/entropy_coef"] for _ in range(3)]
    assert coefs == pytest.approx([0.01, 0.01, 0.006])  # updates 1, 2 (the first), 3
    state = copy.deepcopy(trainer.state_dict())
    resumed, _ = make_trainer(monkeypatch, tmp_path, ["algo.entropy_coef=0.01", *decay])
    resumed.load_state_dict(state)
    assert [resumed.iterate()["Loss/entropy_coef"] for _ in range(2)] == pytest.approx(
        [0.002, 0.002]  # update 4, the last, and after it
    )
    assert PPO(resumed.policy, PPOCfg()).entropy_coef() == 0.01  # no decay: the coefficient


def test_the_entropy_coefficient_follows_the_episode_length_and_never_climbs_back(
    monkeypatch, tmp_path
):
    """The fake env's episodes last at most 10 steps; the decay runs over [0.5, 1.0] of that."""
    decay = [
        "algo.entropy_decay_by=episode_length",
        "algo.entropy_decay_over=[0.5,1.0]",
        "algo.entropy_coef=0.01",
    ]
    trainer, _ = make_trainer(monkeypatch, tmp_path, decay)
    highest = 0.0
    for _ in range(3):
        metrics = trainer.iterate()
        highest = max(highest, metrics["Episode/length"] / 10)
        expected = 0.01 * (1.0 - min(max((highest - 0.5) / 0.5, 0.0), 1.0))
        assert metrics["Loss/entropy_coef"] == pytest.approx(expected)
    assert 0.5 < highest <= 1.0 and trainer.ppo.decay_measure == pytest.approx(highest)
    trainer.ppo.observe_decay_measure(0.1)  # shorter episodes later do not bring it back
    assert trainer.ppo.entropy_coef() == pytest.approx(expected)
    state = copy.deepcopy(trainer.state_dict())
    resumed, _ = make_trainer(monkeypatch, tmp_path, decay)
    resumed.load_state_dict(state)
    assert resumed.ppo.entropy_coef() == pytest.approx(expected)


def test_the_entropy_coefficient_follows_a_curriculum_level(tmp_path):
    """The real cartpole env with a curriculum whose level rises 0.01 a step, 8 steps a
    rollout: 0.08 after the rollout that seeds the normalizers, then 0.16, 0.24, 0.32."""
    overrides = [
        STEP_LEVELS,
        "algo.entropy_decay_by=curriculum.levels",
        "algo.entropy_decay_over=[0.0,0.32]",
        "algo.entropy_coef=0.01",
        "algo.entropy_coef_final=0.0",
    ]
    cfg = compose_config(cartpole_run_overrides(tmp_path, *SMALL_PPO, *overrides))
    trainer = PPOTrainer(cfg, torch.device("cpu"), ThreadBudget.resolve(1), tmp_path)
    try:
        metrics = [trainer.iterate() for _ in range(3)]
    finally:
        trainer.close()
    assert [m["Curriculum/levels"] for m in metrics] == pytest.approx([0.16, 0.24, 0.32])
    assert [m["Loss/entropy_coef"] for m in metrics] == pytest.approx([0.005, 0.0025, 0.0])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algo.entropy_decay_by=episodes"],
            r"algo.entropy_decay_by: expected one of iteration, episode_length, curriculum.NAME, "
            r"got 'episodes'",
        ),
        (
            ["algo.entropy_decay_by=curriculum.speeds", STEP_LEVELS],
            r"algo.entropy_decay_by: 'curriculum.speeds' is none of the task's curricula; "
            r"accepted: iteration, episode_length, curriculum.levels",
        ),
    ],
)
def test_a_bad_entropy_decay_measure_is_named_before_the_env_is_built(
    monkeypatch, tmp_path, overrides, message
):
    built = use_fake_env(monkeypatch)
    cfg = compose_config(["task=cartpole", "num_envs=8", *overrides])
    with pytest.raises(ValueError, match=message):
        PPOTrainer(cfg, torch.device("cpu"), ThreadBudget.resolve(1), tmp_path)
    assert built == []


def test_config_errors_name_the_key_value_and_accepted_range():
    with pytest.raises(
        ValueError, match=r"algo.schedule: expected one of adaptive, fixed, got 'cosine'"
    ):
        PPOCfg(schedule="cosine")
    with pytest.raises(ValueError, match=r"algo.gamma: expected > 0 and <= 1, got 1.5"):
        PPOCfg(gamma=1.5)
    with pytest.raises(ValueError, match=r"algo.entropy_coef: expected >= 0, got -0.01"):
        PPOCfg(entropy_coef=-0.01)
    with pytest.raises(
        ValueError, match=r"algo.entropy_decay_over: expected \[low, high\], .* or null"
    ):
        PPOCfg(entropy_decay_over=(500, 250))
    with pytest.raises(ValueError, match=r"algo: unknown keys \['learning_rat'\]; accepted: "):
        PPOCfg.from_config(OmegaConf.create({"name": "ppo", "policy": {}, "learning_rat": 1}))
    with pytest.raises(ValueError, match=r"algo.policy.activation: expected one of elu, relu"):
        ActorCritic(2, 2, 1, activation="gelu")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("+algo.policy.hidden_dims=[8]", r"algo.policy: unknown keys \['hidden_dims'\]; accepted:"),
        ("algo.policy.init_noise_std=-1", r"algo.policy.init_noise_std: expected > 0, got -1"),
        (
            "algo.policy.actor_hidden_dims=[64,0]",
            r"algo.policy.actor_hidden_dims: expected a non-empty list, each >= 1, got \[64, 0\]",
        ),
        ("algo.policy.activation=gelu", r"algo.policy.activation: expected one of elu, relu"),
    ],
)
def test_a_bad_policy_key_is_named_before_the_env_is_built(
    monkeypatch, tmp_path, override, message
):
    built = use_fake_env(monkeypatch)
    cfg = compose_config(["task=cartpole", "num_envs=8", override])
    with pytest.raises(ValueError, match=message):
        PPOTrainer(cfg, torch.device("cpu"), ThreadBudget.resolve(1), tmp_path)
    assert built == []


def test_the_policy_keys_are_actor_critics_keyword_arguments():
    import inspect

    from fuselab_rl.ppo import POLICY_KEYS

    signature = inspect.signature(ActorCritic).parameters.values()
    assert list(POLICY_KEYS) == [p.name for p in signature if p.kind == p.KEYWORD_ONLY]


def test_whole_env_batches_need_as_many_envs_as_mini_batches_before_the_first_rollout(
    monkeypatch, tmp_path
):
    built = use_fake_env(monkeypatch)
    overrides = ["algo.smoothness_coef=0.1", "algo.num_mini_batches=16"]
    cfg = compose_config(["task=cartpole", "num_envs=8", *SMALL_PPO, *overrides])
    message = r"algo.num_mini_batches: expected 1..8 \(envs: algo.smoothness_coef > 0 batches"
    with pytest.raises(ValueError, match=message):
        PPOTrainer(cfg, torch.device("cpu"), ThreadBudget.resolve(1), tmp_path)
    assert [(env.step_calls, env.backend_closed) for env in built] == [(0, True)]


def test_the_trainer_refuses_spatial_smoothness_on_an_env_without_observation_noise(
    monkeypatch, tmp_path
):
    built = use_fake_env(monkeypatch)  # its terms report no noise
    cfg = compose_config(["task=cartpole", *SMALL_PPO, "algo.spatial_smoothness_coef=0.1"])
    with pytest.raises(ValueError, match=r"algo.spatial_smoothness_coef: 0.1 needs observation"):
        PPOTrainer(cfg, torch.device("cpu"), ThreadBudget.resolve(1), tmp_path)
    assert [(env.step_calls, env.backend_closed) for env in built] == [(0, True)]


def test_a_network_torch_rejects_closes_the_env_already_built(monkeypatch, tmp_path):
    built = use_fake_env(monkeypatch)

    def rejected(*args, **kwargs):
        raise RuntimeError("not enough memory")  # e.g. CUDA out of memory

    monkeypatch.setattr("fuselab_rl.ppo.ActorCritic", rejected)
    cfg = compose_config(["task=cartpole", "num_envs=8"])
    with pytest.raises(RuntimeError, match="not enough memory"):
        PPOTrainer(cfg, torch.device("cpu"), ThreadBudget.resolve(1), tmp_path)
    assert [env.backend_closed for env in built] == [True]


def test_one_iteration_updates_every_parameter_and_reports_the_shared_metric_keys(
    monkeypatch, tmp_path
):
    trainer, env = make_trainer(monkeypatch, tmp_path)
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    assert float(before["actor_normalizer.count"]) == 0 and env.step_calls == 0  # built, no rollout
    metrics = trainer.iterate()
    after = trainer.policy.state_dict()
    for name in ("actor.0.weight", "critic.0.weight", "log_std"):
        assert not torch.equal(before[name], after[name]), name
    # the first iteration seeds the normalizers with one rollout of the untrained policy (8 steps
    # x 8 envs), then collects and updates, and learns that rollout's statistics after its update
    assert float(after["actor_normalizer.count"]) == 2 * 8 * 8
    assert float(after["critic_normalizer.count"]) == 2 * 8 * 8
    assert env.step_calls == 2 * 8
    trainer.iterate()  # seeded once only
    assert env.step_calls == 3 * 8
    for key in (
        "Episode/return",
        "Episode/length",
        "Reward/alive",
        "Reward/distance",
        "Termination/left_box",
        "Termination/time_out",
        "Perf/env_steps",
        "Perf/collect_steps_per_s",
        "Perf/collect_s",
        "Perf/learn_s",
        "Loss/surrogate",
        "Loss/value",
        "Loss/entropy",
        "Policy/kl",
        "Policy/learning_rate",
        "Policy/noise_std",
    ):
        assert key in metrics and np.isfinite(metrics[key]), key
    assert metrics["Perf/env_steps"] == 64
    assert metrics["Reward/alive"] == pytest.approx(0.02)
    assert metrics["Termination/time_out"] + metrics["Termination/left_box"] == pytest.approx(1.0)
    assert metrics["Episode/length"] <= 10
    policy = trainer.export_policy()
    assert next(policy.parameters()).device.type == "cpu"
    obs = torch.randn(5, FakeEnv.actor_dim)
    torch.testing.assert_close(policy(obs), trainer.policy.action_mean(obs))


def test_the_first_update_sees_seeded_normalizers(monkeypatch, tmp_path):
    trainer, _ = make_trainer(monkeypatch, tmp_path)
    counts = []
    real_update = trainer.ppo.update

    def update(storage, generator, noise_generator):
        counts.append(float(trainer.policy.actor_normalizer.count))
        return real_update(storage, generator, noise_generator)

    monkeypatch.setattr(trainer.ppo, "update", update)
    trainer.iterate()
    assert counts == [8 * 8]


def test_without_normalizers_nothing_is_seeded(monkeypatch, tmp_path):
    trainer, env = make_trainer(
        monkeypatch,
        tmp_path,
        ["algo.policy.actor_obs_normalization=false", "algo.policy.critic_obs_normalization=false"],
    )
    assert not trainer.policy.has_empty_normalizer()
    trainer.iterate()
    assert env.step_calls == 8


DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


@pytest.mark.parametrize("device", DEVICES)
def test_action_noise_is_drawn_on_the_learners_device_reproducibly_and_resumes(
    monkeypatch, tmp_path, device
):
    use_fake_env(monkeypatch)

    def rollout(seed: int) -> tuple[PPOTrainer, torch.Tensor]:
        cfg = compose_config(["task=cartpole", "num_envs=8", f"seed={seed}", *SMALL_PPO])
        trainer = PPOTrainer(cfg, torch.device(device), ThreadBudget.resolve(1), tmp_path)
        trainer._collect()
        return trainer, trainer.storage.actions.clone()

    trainer, first = rollout(0)
    assert trainer.noise_generator.device.type == device
    assert first.device.type == device
    _, again = rollout(0)
    _, other = rollout(1)
    assert torch.equal(first, again) and not torch.equal(first, other)
    state = copy.deepcopy(trainer.state_dict())  # with the env's state: a resume is exact
    trainer._collect()
    continued = trainer.storage.actions.clone()
    trainer.load_state_dict(state)
    trainer._collect()
    assert torch.equal(trainer.storage.actions, continued)
    assert not torch.equal(continued, first)


def test_time_outs_bootstrap_from_the_terminal_observation(monkeypatch, tmp_path):
    # Episodes of 3 steps with a far boundary: every 3rd step is a time-out for every env.
    trainer, env = make_trainer(
        monkeypatch, tmp_path, ["algo.num_steps_per_env=3"], episode_steps=3
    )
    captured = {}
    original = env.step

    def step(actions):
        result = original(actions)
        captured["reward"] = result.reward.copy()
        captured["terminal"] = result.info["terminal_obs"]["critic"].copy()
        captured["truncated"] = result.truncated.copy()
        captured["done"] = result.terminated | result.truncated
        return result

    env.step = step
    trainer._collect()
    timed_out = torch.as_tensor(captured["truncated"])
    assert timed_out.any()
    with torch.no_grad():
        terminal_values = trainer.policy.value(torch.as_tensor(captured["terminal"]))
    expected = torch.as_tensor(captured["reward"]) + 0.99 * terminal_values * timed_out
    torch.testing.assert_close(trainer.storage.rewards[-1], expected)
    assert torch.equal(trainer.storage.dones[-1].bool(), torch.as_tensor(captured["done"]))
