"""PPO: rsl_rl's recipe (clipped surrogate, clipped value loss, GAE, adaptive-KL learning rate,
entropy bonus, gradient-norm clipping; optionally CAPS's temporal and spatial smoothness terms),
and PPOTrainer, which collects rollouts from a FusedEnv in this process and feeds them to it.

One iteration, top to bottom (:meth:`PPOTrainer.iterate`)::

    T steps x N envs: normalize obs -> sample actions -> env.step -> store (bootstrapping the
    value of time-outs from their terminal observation) -> GAE -> epochs x mini-batches of
    PPO.update -> merge the rollout into the normalizers

The first iteration of a new run starts with one more rollout, which only seeds the
normalizers (a resumed run has their statistics from its checkpoint).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from fuselab_env_core.ranges import (
    Fraction,
    Interval,
    LayerSizes,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    Range,
    Section,
    build_section,
    check_value,
)
from fuselab_env_core.timing import elapsed_ms
from fuselab_rl import distributed
from fuselab_rl.episode_stats import EpisodeStats
from fuselab_rl.learner_sizes import TABLES, check_sized, choose_learner_sizes, describe_sizes
from fuselab_rl.networks import ACTIVATIONS, ActorCritic
from fuselab_rl.storage import MiniBatch, RolloutStorage
from fuselab_rl.threads import ThreadBudget

log = logging.getLogger(__name__)

MIN_LEARNING_RATE, MAX_LEARNING_RATE = 1e-5, 1e-2  # bounds of the adaptive schedule
# what an update sums over its mini-batches (their means are its metrics)
UPDATE_SUMS = (
    "surrogate", "value", "entropy", "smoothness", "spatial_smoothness", "kl", "clip_fraction", "lr"
)  # fmt: skip


@dataclass
class PPOCfg(Section):
    """``algo.*`` of configs/algo/ppo.yaml (``policy`` is the network's; see ActorCritic)."""

    KEY = "algo"

    num_steps_per_env: PositiveInt = 24
    num_learning_epochs: PositiveInt = 5
    num_mini_batches: PositiveInt = 4
    learning_rate: PositiveFloat = 1e-3
    schedule: Literal["adaptive", "fixed"] = "adaptive"
    desired_kl: PositiveFloat = 0.01
    # a KL guard: an update stops (its remaining mini-batches and epochs skipped) once a
    # mini-batch finds the policy this far (KL) from the rollout's; null: every epoch runs
    max_kl: PositiveFloat | None = None
    gamma: Annotated[float, Range(gt=0.0, le=1.0)] = 0.99
    lam: Fraction = 0.95
    clip_param: PositiveFloat = 0.2
    value_loss_coef: NonNegativeFloat = 1.0
    use_clipped_value_loss: bool = True
    entropy_coef: NonNegativeFloat = 0.01
    # The entropy coefficient falls linearly from entropy_coef to entropy_coef_final while the
    # measure entropy_decay_by crosses entropy_decay_over = [first, last] (null: no decay):
    # explore widely while a gait forms, then let the exploration noise shrink. The measures
    # (DECAY_MEASURES): the update count, or what the policy has learned, so that the noise
    # narrows when the policy is ready, on any seed; the highest value seen counts.
    entropy_decay_by: str = "iteration"
    entropy_decay_over: Interval | None = None
    entropy_coef_final: NonNegativeFloat = 0.0
    max_grad_norm: PositiveFloat = 1.0
    smoothness_coef: NonNegativeFloat = 0.0
    spatial_smoothness_coef: NonNegativeFloat = 0.0
    clip_actions: PositiveFloat | None = None
    # augment: every mini-batch also learns from its samples mirrored left-right (rsl_rl's
    # symmetry augmentation: observations and actions mirrored, the same advantages, returns
    # and old log-probabilities), for a task whose robot and terms declare their mirror
    symmetry: Literal["none", "augment"] = "none"

    @classmethod
    def from_config(cls, algo: DictConfig) -> PPOCfg:
        values = OmegaConf.to_container(algo, resolve=True)
        assert isinstance(values, dict)
        check_sized(values)
        skip = ("name", "policy", *TABLES)
        own = {str(k): v for k, v in values.items() if k not in skip}
        return build_section(cls, own)

    def __post_init__(self) -> None:
        super().__post_init__()
        by = self.entropy_decay_by
        if by not in PLAIN_MEASURES and self.decay_curriculum is None:
            raise ValueError(
                f"algo.entropy_decay_by: expected one of {', '.join(DECAY_MEASURES)}, got {by!r}"
            )

    @property
    def decay_curriculum(self) -> str | None:
        """The curriculum whose level the entropy decay follows (``curriculum.NAME``), or None."""
        by = self.entropy_decay_by
        name = by.removeprefix(CURRICULUM_MEASURE)
        return name if by.startswith(CURRICULUM_MEASURE) and name else None

    def check_decay_measure(self, curricula: Iterable[str]) -> None:
        """A ``curriculum.NAME`` measure names one of the task's ``curricula``."""
        name = self.decay_curriculum
        if name is not None and name not in curricula:
            accepted = [*PLAIN_MEASURES, *(CURRICULUM_MEASURE + c for c in curricula)]
            raise ValueError(
                f"algo.entropy_decay_by: {self.entropy_decay_by!r} is none of the task's "
                f"curricula; accepted: {', '.join(accepted)}"
            )


# What algo.entropy_decay_by accepts: the update count, the finished episodes' mean length
# over the task's longest (0-1), the level of the task's curriculum NAME
PLAIN_MEASURES = ("iteration", "episode_length")
CURRICULUM_MEASURE = "curriculum."  # + the curriculum's name
DECAY_MEASURES = (*PLAIN_MEASURES, CURRICULUM_MEASURE + "NAME")


POLICY_KEYS = {  # algo.policy: ActorCritic's keyword arguments and what each accepts
    "actor_hidden_dims": LayerSizes,
    "critic_hidden_dims": LayerSizes,
    "activation": Literal[tuple(ACTIVATIONS)],  # pyright: ignore[reportInvalidTypeForm]
    "init_noise_std": PositiveFloat,
    "actor_obs_normalization": bool,
    "critic_obs_normalization": bool,
}


def network_kwargs(algo: DictConfig) -> dict[str, Any]:
    """``algo.policy``: the keyword arguments of :class:`ActorCritic`, each checked (before
    the env is built)."""
    values = OmegaConf.to_container(algo.policy, resolve=True)
    assert isinstance(values, dict)
    unknown = sorted({str(k) for k in values} - set(POLICY_KEYS))
    if unknown:
        raise ValueError(f"algo.policy: unknown keys {unknown}; accepted: {list(POLICY_KEYS)}")
    return {
        str(key): check_value(f"algo.policy.{key}", value, POLICY_KEYS[str(key)])
        for key, value in values.items()
    }


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_values: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over (T, N) tensors; returns (returns, advantages).

    ``dones[t]`` ends the episode after step t: nothing flows back across it (time-outs carry
    their bootstrapped value in ``rewards`` already).
    """
    advantages = torch.zeros_like(rewards)
    advantage = torch.zeros_like(last_values)
    next_values = last_values
    for t in reversed(range(rewards.shape[0])):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * not_done * next_values - values[t]
        advantage = delta + gamma * lam * not_done * advantage
        advantages[t] = advantage
        next_values = values[t]
    return advantages + values, advantages


@dataclass(frozen=True)
class Mirrors:
    """Left-right mirrors (column permutation, sign) of actor and critic observations and of
    actions, on the learner's device."""

    actor: tuple[torch.Tensor, torch.Tensor]
    critic: tuple[torch.Tensor, torch.Tensor]
    actions: tuple[torch.Tensor, torch.Tensor]

    @classmethod
    def of_env(cls, env: Any, device: torch.device) -> Mirrors:
        def tensors(mirror: tuple[np.ndarray, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
            perm, sign = mirror
            return torch.as_tensor(perm, device=device), torch.as_tensor(sign, device=device)

        return cls(
            tensors(env.observation_mirror("actor")),
            tensors(env.observation_mirror("critic")),
            tensors(env.action_mirror()),
        )

    def augment(self, batch: MiniBatch) -> MiniBatch:
        """The batch followed by its mirror image (advantages, returns, old values and old
        log-probabilities shared)."""

        def both(x: torch.Tensor, mirror: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            perm, sign = mirror
            return torch.cat([x, x[:, perm] * sign])

        def twice(x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, x])

        return MiniBatch(
            actor_obs=both(batch.actor_obs, self.actor),
            critic_obs=both(batch.critic_obs, self.critic),
            actions=both(batch.actions, self.actions),
            old_log_probs=twice(batch.old_log_probs),
            old_values=twice(batch.old_values),
            old_mean=both(batch.old_mean, self.actions),
            old_std=torch.cat([batch.old_std, batch.old_std[:, self.actions[0]]]),
            returns=twice(batch.returns),
            advantages=twice(batch.advantages),
            steps=None,
            dones=None,
        )


class PPO:
    """The update: epochs of mini-batches over one rollout."""

    def __init__(
        self,
        policy: ActorCritic,
        cfg: PPOCfg,
        actor_noise_std: torch.Tensor | None = None,
        mirrors: Mirrors | None = None,
    ):
        """``actor_noise_std``: the std of the env's noise on each actor observation column,
        which the spatial smoothness term perturbs the observations with; ``mirrors``: the
        env's left-right mirrors, which ``symmetry: augment`` needs."""
        if cfg.symmetry == "augment" and mirrors is None:
            raise ValueError("algo.symmetry: 'augment' needs the env's left-right mirrors")
        if cfg.symmetry == "augment" and (
            cfg.smoothness_coef > 0 or cfg.spatial_smoothness_coef > 0
        ):
            raise ValueError(
                "algo.symmetry: 'augment' does not combine with the smoothness terms "
                f"(smoothness_coef {cfg.smoothness_coef}, spatial_smoothness_coef "
                f"{cfg.spatial_smoothness_coef}); set both to 0 or algo.symmetry=none"
            )
        self.mirrors = mirrors if cfg.symmetry == "augment" else None
        if cfg.spatial_smoothness_coef > 0.0 and (
            actor_noise_std is None or not bool(actor_noise_std.any())
        ):
            raise ValueError(
                f"algo.spatial_smoothness_coef: {cfg.spatial_smoothness_coef} needs observation "
                "noise on the actor's group (observations.actor.noise: true and a term with "
                "noise_std > 0); accepted without it: 0.0"
            )
        self.policy, self.cfg = policy, cfg
        self.actor_noise_std = actor_noise_std
        self.learning_rate = cfg.learning_rate
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate)
        self.updates = 0  # updates made
        self.decay_measure = 0.0  # the highest value of a learned entropy_decay_by seen

    def observe_decay_measure(self, value: float) -> None:
        """The latest value of a learned ``entropy_decay_by`` (its highest counts: the
        coefficient never climbs back when, say, the episodes shorten for a while)."""
        self.decay_measure = max(self.decay_measure, value)

    def entropy_coef(self) -> float:
        """The entropy coefficient of the next update, the ``updates + 1``-th."""
        cfg = self.cfg
        if cfg.entropy_decay_over is None:
            return cfg.entropy_coef
        by_updates = cfg.entropy_decay_by == "iteration"
        measure = self.updates + 1 if by_updates else self.decay_measure
        first, last = cfg.entropy_decay_over
        done = (measure - first) / (last - first) if last > first else float(measure >= first)
        progress = min(max(done, 0.0), 1.0)
        return cfg.entropy_coef + progress * (cfg.entropy_coef_final - cfg.entropy_coef)

    def compute_returns(self, storage: RolloutStorage, last_values: torch.Tensor) -> None:
        returns, advantages = compute_gae(
            storage.rewards,
            storage.values,
            storage.dones,
            last_values,
            self.cfg.gamma,
            self.cfg.lam,
        )
        storage.returns.copy_(returns)
        # Normalized over the whole rollout (rsl_rl's default), not per mini-batch; under
        # torchrun over every rank's rollout, as one rank stepping all their envs would.
        mean, std = distributed.mean_and_std(advantages)
        storage.advantages.copy_((advantages - mean) / (std + 1e-8))

    def update(
        self,
        storage: RolloutStorage,
        generator: torch.Generator,
        noise_generator: torch.Generator | None = None,
    ) -> dict[str, float]:
        """Epochs of mini-batches in the order ``generator`` draws; the spatial smoothness
        term's perturbations come from ``noise_generator`` (on the learner's device; default:
        ``generator``, for a CPU learner)."""
        cfg = self.cfg
        entropy_coef = self.entropy_coef()
        sums = dict.fromkeys(UPDATE_SUMS, 0.0)
        allreduce_s = 0.0  # under torchrun: the time spent averaging over the ranks
        batches = 0
        smoothing = cfg.smoothness_coef > 0.0  # a loss over consecutive steps: whole-env batches
        for batch in storage.mini_batches(
            cfg.num_mini_batches, cfg.num_learning_epochs, generator, whole_envs=smoothing
        ):
            if self.mirrors is not None:
                batch = self.mirrors.augment(batch)
            dist = self.policy.distribution(batch.actor_obs)
            log_probs = dist.log_prob(batch.actions).sum(-1)
            values = self.policy.value(batch.critic_obs)
            entropy = dist.entropy().sum(-1).mean()

            with torch.no_grad():
                kl = _gaussian_kl(batch.old_mean, batch.old_std, dist.mean, dist.stddev).mean()
            if cfg.schedule == "adaptive" or cfg.max_kl is not None:
                started = time.perf_counter()  # every rank reads the mean KL: one decision
                mean_kl = distributed.average(kl.item(), kl.device)
                allreduce_s += time.perf_counter() - started
                if cfg.max_kl is not None and mean_kl > cfg.max_kl and batches > 0:
                    break  # the policy has moved far enough from the rollout's
                if cfg.schedule == "adaptive":
                    self._adapt_learning_rate(mean_kl)
            sums["lr"] += self.learning_rate

            ratio = torch.exp(log_probs - batch.old_log_probs)
            surrogate_loss = _clipped_surrogate(ratio, batch.advantages, cfg.clip_param)
            value_loss = self._value_loss(values, batch)
            loss = surrogate_loss + cfg.value_loss_coef * value_loss - entropy_coef * entropy
            for name, coef, term in self._smoothness_terms(
                dist, batch, noise_generator or generator
            ):
                loss = loss + coef * term
                sums[name] += term.item()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            started = time.perf_counter()
            distributed.average_gradients(self.policy.parameters())
            allreduce_s += time.perf_counter() - started
            nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
            self.optimizer.step()

            batches += 1
            sums["surrogate"] += surrogate_loss.item()
            sums["value"] += value_loss.item()
            sums["entropy"] += entropy.item()
            sums["kl"] += kl.item()
            sums["clip_fraction"] += ((ratio - 1.0).abs() > cfg.clip_param).float().mean().item()
        self.updates += 1
        means = {k: v / max(batches, 1) for k, v in sums.items()}
        return self._update_metrics(means, batches, entropy_coef, allreduce_s)

    def _value_loss(self, values: torch.Tensor, batch: MiniBatch) -> torch.Tensor:
        """The critic's squared error to the returns; clipped: no better than a value that
        moved at most clip_param from the rollout's (rsl_rl's clipped value loss)."""
        if not self.cfg.use_clipped_value_loss:
            return (values - batch.returns).square().mean()
        clip = self.cfg.clip_param
        values_clipped = batch.old_values + (values - batch.old_values).clamp(-clip, clip)
        return torch.max(
            (values - batch.returns).square(), (values_clipped - batch.returns).square()
        ).mean()

    def _smoothness_terms(
        self, dist: torch.distributions.Normal, batch: MiniBatch, generator: torch.Generator
    ) -> Iterator[tuple[str, float, torch.Tensor]]:
        """(name, coefficient, loss) of each CAPS term the config turns on."""
        cfg = self.cfg
        if cfg.smoothness_coef > 0.0:
            yield "smoothness", cfg.smoothness_coef, _temporal_smoothness(dist.mean, batch)
        if cfg.spatial_smoothness_coef > 0.0:
            assert self.actor_noise_std is not None  # checked when built
            spatial = _spatial_smoothness(
                self.policy, batch.actor_obs, dist.mean, self.actor_noise_std, generator
            )
            yield "spatial_smoothness", cfg.spatial_smoothness_coef, spatial

    def _update_metrics(
        self, means: dict[str, float], batches: int, entropy_coef: float, allreduce_s: float
    ) -> dict[str, float]:
        cfg = self.cfg
        optional_losses = {}
        if cfg.smoothness_coef > 0.0:
            optional_losses["Loss/smoothness"] = means["smoothness"]
        if cfg.spatial_smoothness_coef > 0.0:
            optional_losses["Loss/spatial_smoothness"] = means["spatial_smoothness"]
        if cfg.entropy_decay_over is not None:
            optional_losses["Loss/entropy_coef"] = entropy_coef
        return {
            "Loss/surrogate": means["surrogate"],
            "Loss/value": means["value"],
            "Loss/entropy": means["entropy"],
            **optional_losses,
            "Policy/kl": means["kl"],
            "Policy/clip_fraction": means["clip_fraction"],
            "Policy/mini_batches": float(batches),
            # The adaptive schedule moves the rate every mini-batch against the KL to the
            # rollout's policy, which grows over the epochs: the last mini-batches cut it (often
            # to its floor) and the next update regrows it. The mean is the step size used.
            "Policy/learning_rate": self.learning_rate,
            "Policy/learning_rate_mean": means["lr"],
            "Policy/noise_std": self.policy.log_std.detach().exp().mean().item(),
            "Perf/allreduce_s": allreduce_s,
        }

    def _adapt_learning_rate(self, kl: float) -> None:
        """rsl_rl's schedule: shrink the step when the policy moved too far, grow it when not."""
        if kl > 2.0 * self.cfg.desired_kl:
            self.learning_rate = max(MIN_LEARNING_RATE, self.learning_rate / 1.5)
        elif 0.0 < kl < 0.5 * self.cfg.desired_kl:
            self.learning_rate = min(MAX_LEARNING_RATE, self.learning_rate * 1.5)
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate


def _clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_param: float
) -> torch.Tensor:
    """PPO's pessimistic surrogate: the worse of the ratio's and the clipped ratio's."""
    surrogate = -advantages * ratio
    surrogate_clipped = -advantages * ratio.clamp(1.0 - clip_param, 1.0 + clip_param)
    return torch.max(surrogate, surrogate_clipped).mean()


def _temporal_smoothness(mean: torch.Tensor, batch: MiniBatch) -> torch.Tensor:
    """How much the mean action changes from one step to the next within an episode: the
    squared change summed over joints, averaged over consecutive pairs of a whole-env batch
    (CAPS's temporal term, Mysore et al. 2021, squared here). Unlike an action-rate reward it
    sees the policy's mean, not the exploration noise, so it damps the chatter a deterministic
    policy shows on a robot without making exploration expensive."""
    assert batch.steps is not None and batch.dones is not None, "needs whole-env mini-batches"
    mean = mean.view(batch.steps, -1, mean.shape[-1])
    same_episode = 1.0 - batch.dones.view(batch.steps, -1)[:-1]
    change = (mean[1:] - mean[:-1]).square().sum(-1)
    return (change * same_episode).sum() / same_episode.sum().clamp(min=1.0)


def _spatial_smoothness(
    policy: ActorCritic,
    actor_obs: torch.Tensor,
    mean: torch.Tensor,
    noise_std: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    """How much the mean action moves when the observations get another draw of the env's
    observation noise: the squared change summed over joints, averaged over the batch (CAPS's
    spatial term, Mysore et al. 2021, squared here). A deterministic policy feeds its sensors'
    noise into its actions; this term lowers that gain where the noise is, and leaves the
    response to real state changes (a gait's) to the other losses."""
    uniform = torch.rand(
        actor_obs.shape, generator=generator, device=actor_obs.device, dtype=actor_obs.dtype
    )
    noise = (2.0 * uniform - 1.0) * (math.sqrt(3.0) * noise_std)  # the env's: uniform, this std
    perturbed = policy.action_mean(actor_obs + noise)
    return (perturbed - mean).square().sum(-1).mean()


def _gaussian_kl(
    mean_0: torch.Tensor, std_0: torch.Tensor, mean_1: torch.Tensor, std_1: torch.Tensor
) -> torch.Tensor:
    """KL(N(mean_0, std_0) || N(mean_1, std_1)) summed over action dimensions."""
    return torch.sum(
        torch.log(std_1 / std_0)
        + (std_0.square() + (mean_0 - mean_1).square()) / (2.0 * std_1.square())
        - 0.5,
        dim=-1,
    )


class PPOTrainer:
    """The :class:`fuselab_rl.runner.Trainer` of PPO: a FusedEnv in this process, collected
    synchronously, the update on ``device``."""

    def __init__(self, cfg: DictConfig, device: torch.device, threads: ThreadBudget, run_dir: Path):
        from fuselab_envs.registry import make_env

        self.cfg, self.device, self.threads, self.run_dir = cfg, device, threads, run_dir
        chosen = choose_learner_sizes(cfg, device)
        log.info("PPO sizes, %s", describe_sizes(cfg, chosen, device))
        self.algo = PPOCfg.from_config(cfg.algo)
        self.algo.check_decay_measure(cfg.get("curriculum") or {})
        network = network_kwargs(cfg.algo)  # checked before the env is built
        started = time.perf_counter()
        self.env = make_env(cfg)
        self.num_envs = self.env.num_envs
        obs = self.env.reset_all()
        actor_dim, critic_dim = obs["actor"].shape[1], obs["critic"].shape[1]
        self.action_dim = self.env.action_dim
        log.info(
            "env %s: %d envs on %s, actor obs %d, critic obs %d, actions %d (%.1f ms)",
            cfg.task_name,
            self.num_envs,
            cfg.backend,
            actor_dim,
            critic_dim,
            self.action_dim,
            elapsed_ms(started),
        )
        try:
            self._build_learner(obs, network)
        except BaseException:  # a network torch cannot build (memory): the env's threads end too
            self.close()
            raise

    def _build_learner(self, obs: dict[str, np.ndarray], network: dict[str, Any]) -> None:
        cfg, device = self.cfg, self.device
        actor_dim, critic_dim = obs["actor"].shape[1], obs["critic"].shape[1]
        started = time.perf_counter()
        torch.manual_seed(cfg.seed)  # the networks' initial weights
        self.generator = torch.Generator().manual_seed(cfg.seed)  # batch order (on the host)
        # action noise (and the spatial smoothness term's perturbations), drawn on the learner's
        # device; a CPU learner draws it from the batch order's generator (one stream: a run
        # replays from its seed alone)
        self.noise_generator = (
            self.generator
            if device.type == "cpu"
            else torch.Generator(device=device).manual_seed(cfg.seed)
        )
        self.policy = ActorCritic(actor_dim, critic_dim, self.action_dim, **network).to(device)
        distributed.broadcast_state(self.policy)  # every rank starts from rank 0's weights
        actor_noise_std = None  # what the spatial smoothness term perturbs the observations by
        if self.algo.spatial_smoothness_coef > 0.0:
            std = self.env.terms.observation_noise_std("actor")
            actor_noise_std = torch.as_tensor(std, device=device)
        mirrors = Mirrors.of_env(self.env, device) if self.algo.symmetry == "augment" else None
        self.ppo = PPO(self.policy, self.algo, actor_noise_std, mirrors)
        self.storage = RolloutStorage(
            self.algo.num_steps_per_env,
            self.num_envs,
            actor_dim,
            critic_dim,
            self.action_dim,
            device,
        )
        # checked before the first rollout: whole-env batches need num_mini_batches <= envs
        self.storage.mini_batch_units(
            self.algo.num_mini_batches, whole_envs=self.algo.smoothness_coef > 0.0
        )
        self.stats = EpisodeStats(self.num_envs)
        self.actor_obs = torch.zeros(self.num_envs, actor_dim, device=device)
        self.critic_obs = torch.zeros(self.num_envs, critic_dim, device=device)
        self._set_obs(obs)
        self._allocate_step_buffers()
        parameters = sum(p.numel() for p in self.policy.parameters())
        log.info(
            "PPO ready: %d parameters on %s, %d steps x %d envs per iteration (%.1f ms)",
            parameters,
            device,
            self.algo.num_steps_per_env,
            self.num_envs,
            elapsed_ms(started),
        )

    # -- the Trainer contract --------------------------------------------------------------------

    def iterate(self) -> dict[str, float]:
        if self.policy.has_empty_normalizer():  # a new run; a resumed one loaded its statistics
            self._seed_normalizers()
        collect = self._collect()
        episodes = self.stats.metrics()
        self._observe_decay_measure(episodes)
        started = time.perf_counter()
        self.policy.train()
        losses = self.ppo.update(self.storage, self.generator, self.noise_generator)
        # After the update: a rollout and its update see one normalization, so the stored log
        # probabilities and values are those the update recomputes before its first step.
        self.policy.update_normalizers(
            self.storage.actor_obs.flatten(0, 1), self.storage.critic_obs.flatten(0, 1)
        )
        learn_s = time.perf_counter() - started
        env_steps = self.algo.num_steps_per_env * self.num_envs
        return {
            **episodes,
            **losses,
            "Perf/env_steps": float(env_steps),
            "Perf/collect_s": collect["collect_s"],
            "Perf/collect_steps_per_s": env_steps / collect["collect_s"],
            "Perf/env_s": collect["env_s"],
            "Perf/env_steps_per_s": env_steps / collect["env_s"],
            "Perf/learn_s": learn_s,
        }

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "policy": self.policy.state_dict(),
            "optimizer": self.ppo.optimizer.state_dict(),
            "learning_rate": self.ppo.learning_rate,
            "updates": self.ppo.updates,
            "entropy_decay_measure": self.ppo.decay_measure,
            "generator": self.generator.get_state(),
            "episode_stats": self.stats.state_dict(),
            "num_envs": self.num_envs,
        }
        if self.noise_generator is not self.generator:  # a learner on an accelerator
            state["noise_generator"] = self.noise_generator.get_state()
        # An env that can save itself (tensors and plain values, what a weights-only torch.load
        # reads) resumes mid-episode; FusedEnv cannot, and a resumed run starts new episodes.
        if hasattr(self.env, "state_dict"):
            state["env"] = self.env.state_dict()
            state["obs"] = {"actor": self.actor_obs.cpu(), "critic": self.critic_obs.cpu()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.ppo.optimizer.load_state_dict(state["optimizer"])
        if self.algo.schedule == "adaptive":  # where the schedule had taken it; fixed: the config's
            self.ppo.learning_rate = float(state["learning_rate"])
        for group in self.ppo.optimizer.param_groups:
            group["lr"] = self.ppo.learning_rate
        self.ppo.updates = int(state["updates"])
        self.ppo.decay_measure = float(state.get("entropy_decay_measure", 0.0))
        self.generator.set_state(state["generator"])
        if self.noise_generator is not self.generator and "noise_generator" in state:
            self.noise_generator.set_state(state["noise_generator"])
        self.stats.load_state_dict(state["episode_stats"])
        same_envs = state.get("num_envs") == self.num_envs
        if "env" in state and same_envs and hasattr(self.env, "load_state_dict"):
            self.env.load_state_dict(state["env"])
            self.actor_obs.copy_(state["obs"]["actor"])
            self.critic_obs.copy_(state["obs"]["critic"])

    def export_policy(self) -> nn.Module:
        return self.policy.policy(self.algo.clip_actions)

    @staticmethod
    def inference_policy(algo: DictConfig, state: dict[str, Any]) -> nn.Module:
        """What :meth:`export_policy` returns, from a checkpoint's ``algo`` config and
        ``trainer`` state: the network sized from its saved weights."""
        weights = state["policy"]
        network = ActorCritic(*ActorCritic.saved_dims(weights), **network_kwargs(algo))
        network.load_state_dict(weights)
        return network.policy(PPOCfg.from_config(algo).clip_actions)

    def close(self) -> None:
        self.env.close()

    # -- collection ------------------------------------------------------------------------------

    def _observe_decay_measure(self, episodes: Mapping[str, float]) -> None:
        """Give the update the learned measure its entropy decay follows, from this rollout's
        episodes (the same on every rank: their mean; a rollout where no episode finished
        keeps the measure where it was)."""
        by = self.algo.entropy_decay_by
        if self.algo.entropy_decay_over is None or by == "iteration":
            return
        if by == "episode_length":
            length = episodes.get("Episode/length")
            value = None if length is None else length / float(self.env.max_episode_steps.max())
        else:
            value = episodes.get(f"Curriculum/{self.algo.decay_curriculum}")
        value = self.ppo.decay_measure if value is None else value
        self.ppo.observe_decay_measure(distributed.average(value, self.device))

    def _seed_normalizers(self) -> None:
        """Start the normalizers from one rollout of the untrained policy, not learned from:
        with identity statistics the first update sees raw joint velocities, moves the policy
        far (KL ~0.1 on the G1) and the adaptive schedule drops the learning rate to its floor.
        The rollout's episodes are not reported (the runner counts only iterations' steps)."""
        started = time.perf_counter()
        self._collect()
        self.policy.update_normalizers(
            self.storage.actor_obs.flatten(0, 1), self.storage.critic_obs.flatten(0, 1)
        )
        self.stats = EpisodeStats(self.num_envs)
        log.info(
            "PPO normalizers seeded: one rollout of %d steps x %d envs (%.1f ms)",
            self.algo.num_steps_per_env,
            self.num_envs,
            elapsed_ms(started),
        )

    @torch.no_grad()
    def _collect(self) -> dict[str, float]:
        algo, storage, policy = self.algo, self.storage, self.policy
        started = time.perf_counter()
        env_s = 0.0
        policy.eval()
        storage.clear()
        rewards, dones, time_out = self._rewards, self._dones, self._time_out_host
        for _ in range(algo.num_steps_per_env):
            dist = policy.distribution(self.actor_obs)
            self._noise.normal_(generator=self.noise_generator)
            actions = torch.mul(dist.stddev, self._noise, out=self._actions).add_(dist.mean)
            log_probs = dist.log_prob(actions).sum(-1)
            values = policy.value(self.critic_obs)
            self._env_actions.copy_(actions)
            if algo.clip_actions is not None:
                self._env_actions.clamp_(-algo.clip_actions, algo.clip_actions)

            step_started = time.perf_counter()
            result = self.env.step(self._env_actions_np)
            env_s += time.perf_counter() - step_started

            rewards.copy_(torch.from_numpy(result.reward))
            np.logical_or(result.terminated, result.truncated, out=self._done_host)
            dones.copy_(torch.from_numpy(self._done_host))
            np.logical_not(result.terminated, out=time_out)
            np.logical_and(time_out, result.truncated, out=time_out)
            if time_out.any():  # the episode did not fail: its return continues past the cut
                time_outs = np.flatnonzero(time_out)
                terminal = result.info["terminal_obs"]["critic"][time_outs]
                terminal_values = policy.value(torch.as_tensor(terminal, device=self.device))
                rows = torch.as_tensor(time_outs, device=self.device)
                rewards[rows] += algo.gamma * terminal_values
            storage.add(
                self.actor_obs,
                self.critic_obs,
                actions,
                log_probs,
                values,
                dist.mean,
                dist.stddev,
                rewards,
                dones,
            )
            self._set_obs(result.obs)
            self.stats.add(result.info)
        last_values = policy.value(self.critic_obs)
        self.ppo.compute_returns(storage, last_values)
        if not math.isfinite(float(storage.returns.abs().max())):
            raise FloatingPointError(
                "PPO: non-finite returns this rollout (rewards or values diverged)"
            )
        return {"collect_s": time.perf_counter() - started, "env_s": env_s}

    def _allocate_step_buffers(self) -> None:
        """What one collection step writes, allocated once: the action noise and the actions on
        the learner's device, the actions the env reads (a host copy, pinned for a CUDA
        learner), the rewards and done flags going to the storage."""
        n, a, device = self.num_envs, self.action_dim, self.device
        self._noise = torch.empty(n, a, device=device)
        self._actions = torch.empty(n, a, device=device)
        self._env_actions = torch.empty(n, a, pin_memory=device.type == "cuda")
        self._env_actions_np = self._env_actions.numpy()
        self._rewards = torch.empty(n, device=device)
        self._dones = torch.empty(n, device=device)
        self._done_host = np.empty(n, np.bool_)
        self._time_out_host = np.empty(n, np.bool_)

    def _set_obs(self, obs: dict[str, np.ndarray]) -> None:
        """Copy the env's observation buffers (the env reuses them) to the learner's device."""
        self.actor_obs.copy_(torch.from_numpy(obs["actor"]))
        self.critic_obs.copy_(torch.from_numpy(obs["critic"]))
