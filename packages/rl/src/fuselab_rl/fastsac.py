"""FastSAC: soft actor-critic for many parallel envs.

The learner (:class:`FastSAC`) is the SAC of Haarnoja et al. with the changes that make it
work at thousands of envs: twin distributional critics (C51, the n-step target distribution
projected onto the support, the lower-mean target of the two per sample), n-step returns
from a per-env replay (:mod:`fuselab_rl.replay`), LayerNorm + SiLU networks, running
observation normalization, several critic updates per env step and a delayed actor and
temperature update.

:class:`FastSACTrainer` feeds it from a collector (:mod:`fuselab_rl.async_collect`, one
interface), chosen by ``algo.mode``:

- ``async``: a collector process steps the env and writes transitions into a shared-memory
  ring while this process learns and publishes the policy. Each env step received earns
  ``updates_per_step`` updates, with at most one iteration's worth banked: a learner faster
  than that waits for data; a collector faster than that just fills the replay faster
  (unless ``collector.min_updates_per_step`` holds it back). An iteration is
  ``steps_per_iteration * updates_per_step`` critic updates.
- ``sync``: one env step, then the updates it earned, in this process (debugging, tests); an
  iteration is ``steps_per_iteration`` env steps.

The replay first fills with ``learning_starts`` env steps (random actions if the policy is new).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.nn import functional as F

from fuselab_env_core.ranges import (
    LayerSizes,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    Range,
    Section,
    build_section,
)
from fuselab_rl import distributed
from fuselab_rl.async_collect import (
    AsyncCollector,
    Collector,
    EnvSpec,
    InProcessCollector,
)
from fuselab_rl.episode_stats import EpisodeStats
from fuselab_rl.fastsac_networks import (
    ActorPolicy,
    TwinDistributionalCritic,
    project_distribution,
)
from fuselab_rl.learner_sizes import TABLES, auto_keys, choose_learner_sizes, describe_sizes
from fuselab_rl.networks import EmpiricalNormalization
from fuselab_rl.replay import NStepBatch, NStepReplay
from fuselab_rl.threads import ThreadBudget

log = logging.getLogger(__name__)

UnitInterval = Annotated[float, Range(gt=0.0, le=1.0)]  # a discount, a soft-update rate
NonNegativeInt = Annotated[int, Range(ge=0)]


@dataclass
class CollectorCfg(Section):
    """``algo.collector``: the async collector process and its ring."""

    KEY = "algo.collector"

    threads: PositiveInt | None = None  # null: split_threads decides (CPU learner: half)
    ring_slots: Annotated[int, Range(ge=2)] = 64
    publish_interval: PositiveInt = 1
    min_updates_per_step: NonNegativeFloat = 0.0


@dataclass
class FastSACConfig(Section):
    """``algo`` of the composed config (configs/algo/fastsac.yaml), each field checked against
    its type when built."""

    KEY = "algo"

    mode: Literal["async", "sync"]
    steps_per_iteration: PositiveInt
    updates_per_step: PositiveFloat
    actor_update_interval: PositiveInt
    learning_starts: NonNegativeInt
    batch_size: PositiveInt
    buffer_size: PositiveInt
    gamma: UnitInterval
    n_step: PositiveInt
    tau: UnitInterval
    num_atoms: Annotated[int, Range(ge=2)]
    v_min: float
    v_max: float
    alpha_init: PositiveFloat
    target_entropy_scale: float
    log_std_min: float
    log_std_max: float
    actor_lr: PositiveFloat
    critic_lr: PositiveFloat
    alpha_lr: PositiveFloat
    weight_decay: NonNegativeFloat
    max_grad_norm: NonNegativeFloat
    actor_hidden_dims: LayerSizes
    critic_hidden_dims: LayerSizes
    obs_normalization: bool
    bf16: bool
    compile: bool
    collector: CollectorCfg

    @classmethod
    def from_cfg(cls, algo: DictConfig) -> FastSACConfig:
        raw: dict[str, Any] = OmegaConf.to_container(algo, resolve=True)  # type: ignore[assignment]
        unsized = auto_keys(raw)
        if unsized:
            raise ValueError(
                f"algo.{unsized[0]}: 'auto' is chosen for the learner's device when the trainer "
                f"starts (choose_learner_sizes); here expected a value"
            )
        # per_task: a table of per-task values the configs of older checkpoints hold
        own = {k: v for k, v in raw.items() if k not in ("name", "per_task", *TABLES)}
        missing = sorted({f.name for f in fields(cls)} - {"collector"} - own.keys())
        if missing:
            raise KeyError(f"algo: missing keys {missing} (see configs/algo/fastsac.yaml)")
        own["collector"] = build_section(CollectorCfg, own.get("collector", {}))
        return build_section(cls, own)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.collector.min_updates_per_step <= self.updates_per_step:
            raise ValueError(
                "algo.collector.min_updates_per_step: expected a value in [0, updates_per_step "
                f"= {self.updates_per_step}], got {self.collector.min_updates_per_step!r}"
            )
        for low, high in (("v_min", "v_max"), ("log_std_min", "log_std_max")):
            if not getattr(self, low) < getattr(self, high):
                raise ValueError(
                    f"algo.{low}, algo.{high}: expected {low} < {high}, got "
                    f"{getattr(self, low)!r}, {getattr(self, high)!r}"
                )


def policy_builder(
    cfg: FastSACConfig, obs_dim: int, action_dim: int
) -> functools.partial[ActorPolicy]:
    """Builds the acting policy; picklable, so the collector process builds its own copy."""
    return functools.partial(
        ActorPolicy,
        obs_dim,
        action_dim,
        cfg.actor_hidden_dims,
        normalize=cfg.obs_normalization,
        log_std_min=cfg.log_std_min,
        log_std_max=cfg.log_std_max,
    )


class FastSAC:
    """Networks, optimizers, replay and the update; knows nothing about processes."""

    def __init__(self, cfg: FastSACConfig, spec: EnvSpec, device: torch.device):
        started = time.perf_counter()
        self.cfg, self.spec, self.device = cfg, spec, device
        actor_dim, critic_dim = spec.obs_dims["actor"], spec.obs_dims["critic"]
        action_dim = spec.action_dim
        self.policy_builder = policy_builder(cfg, actor_dim, action_dim)
        self.policy = self.policy_builder().to(device)
        self.critic_normalizer: nn.Module = (
            EmpiricalNormalization(critic_dim) if cfg.obs_normalization else nn.Identity()
        ).to(device)
        self.critic = TwinDistributionalCritic(
            critic_dim,
            action_dim,
            cfg.critic_hidden_dims,
            num_atoms=cfg.num_atoms,
            v_min=cfg.v_min,
            v_max=cfg.v_max,
        ).to(device)
        distributed.broadcast_state(self.policy)  # under torchrun: rank 0's initial weights
        distributed.broadcast_state(self.critic)
        self._normalizers = [
            (group, normalizer)
            for group, normalizer in (
                ("actor", self.policy.normalizer),
                ("critic", self.critic_normalizer),
            )
            if isinstance(normalizer, EmpiricalNormalization)
        ]
        # Under torchrun each rank takes records at its own pace: the normalizers accumulate
        # them and merge over the ranks where every rank stands at the same update (before
        # the first one, and at iteration ends: merge_normalizers); alone, records merge at once.
        self._merge_at_once = distributed.world_size() == 1
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        # the soft update's operands; load_state_dict copies into these same tensors
        self._target_parameters: list[torch.Tensor] = list(self.critic_target.parameters())
        self._online_parameters: list[torch.Tensor] = list(self.critic.parameters())
        self.log_alpha = torch.tensor(math.log(cfg.alpha_init), device=device, requires_grad=True)
        self.target_entropy = -cfg.target_entropy_scale * action_dim
        self.actor_optimizer = torch.optim.AdamW(
            self.policy.actor.parameters(), lr=cfg.actor_lr, weight_decay=cfg.weight_decay
        )
        self.critic_optimizer = torch.optim.AdamW(
            self.critic.parameters(), lr=cfg.critic_lr, weight_decay=cfg.weight_decay
        )
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.alpha_lr)
        self.replay = NStepReplay(
            num_envs=spec.num_envs,
            capacity_steps=max(cfg.buffer_size // spec.num_envs, cfg.n_step),
            obs_dims=spec.obs_dims,
            action_dim=action_dim,
            n_step=cfg.n_step,
            gamma=cfg.gamma,
            device=device,
        )
        self.updates = 0  # critic updates so far
        self.actor_updates = 0
        self._critic_loss = self._critic_loss_eager
        self._actor_loss = self._actor_loss_eager
        if cfg.compile:
            self._compile()
        self._sums: dict[str, torch.Tensor] = {}
        self._counts: dict[str, int] = {}
        self._allreduce_s = 0.0  # under torchrun: the time spent averaging gradients
        log.info(
            "FastSAC learner on %s: actor %s, critics 2 x %s over %d atoms [%g, %g], "
            "%d-step returns, bf16 %s, compile %s (%.1f ms)",
            device,
            list(cfg.actor_hidden_dims),
            list(cfg.critic_hidden_dims),
            cfg.num_atoms,
            cfg.v_min,
            cfg.v_max,
            cfg.n_step,
            cfg.bf16,
            cfg.compile,
            (time.perf_counter() - started) * 1e3,
        )

    def _compile(self) -> None:
        if not hasattr(torch, "compile"):
            log.warning("algo.compile: this torch has no torch.compile; running eagerly")
            return
        started = time.perf_counter()
        self._critic_loss = torch.compile(self._critic_loss_eager)
        self._actor_loss = torch.compile(self._actor_loss_eager)
        log.info(
            "torch.compile wrapped the losses (%.1f ms; kernels build on the first update)",
            (time.perf_counter() - started) * 1e3,
        )

    # -- data ------------------------------------------------------------------------------------

    def observe(self, records: Sequence[dict[str, np.ndarray]]) -> None:
        """Store env steps (transition records, in order) and add their observations to the
        normalizers, once for all of them."""
        for record in records:
            self.replay.add(
                {g: torch.from_numpy(record[f"obs.{g}"]) for g in self.spec.obs_dims},
                torch.from_numpy(record["actions"]),
                torch.from_numpy(record["reward"]),
                torch.from_numpy(record["terminated"]),
                torch.from_numpy(record["truncated"]),
                {g: torch.from_numpy(record[f"next_obs.{g}"]) for g in self.spec.obs_dims},
            )
        written = self.replay.steps_written
        rows = torch.arange(written - len(records), written, device=self.device)
        rows %= self.replay.capacity
        for group, normalizer in self._normalizers:
            normalizer.accumulate(self.replay.obs[group][rows].flatten(0, 1))
        if self._merge_at_once:
            self.merge_normalizers()

    def merge_normalizers(self) -> None:
        """Fold the observations added since the last merge into the statistics (under
        torchrun those of every rank: every rank calls it at the same point)."""
        for _, normalizer in self._normalizers:
            normalizer.merge()

    # -- update ----------------------------------------------------------------------------------

    def update(self) -> None:
        """One critic update, and every ``actor_update_interval`` an actor and temperature
        update. Metrics accumulate on the device; :meth:`metrics` reads them once."""
        if self.updates == 0 and not self._merge_at_once:
            self.merge_normalizers()  # the warm-up's records, before anything learns from them
        batch = self.replay.sample(self.cfg.batch_size)
        self._update_critic(batch)
        self.updates += 1
        if self.updates % self.cfg.actor_update_interval == 0:
            self._update_actor(batch)
            self.actor_updates += 1

    def _autocast(self) -> contextlib.AbstractContextManager:
        if not self.cfg.bf16:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def _update_critic(self, batch: NStepBatch) -> None:
        with self._autocast():
            loss, q = self._critic_loss(
                batch.obs["critic"],
                batch.actions,
                batch.returns,
                batch.discount,
                batch.next_obs["actor"],
                batch.next_obs["critic"],
            )
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._average_gradients(self.critic.parameters())
        self._clip(self.critic)
        self.critic_optimizer.step()
        with torch.no_grad():  # target <- target + tau * (online - target), one fused call
            torch._foreach_lerp_(self._target_parameters, self._online_parameters, self.cfg.tau)
        self._add("Loss/critic", loss)
        self._add("Policy/q", q)

    def _critic_loss_eager(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        returns: torch.Tensor,
        discount: torch.Tensor,
        next_actor_obs: torch.Tensor,
        next_critic_obs: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            next_actions, next_log_prob = self.policy.actor.sample(
                self.policy.normalizer(next_actor_obs)
            )
            target_logits = self.critic_target(
                self.critic_normalizer(next_critic_obs), next_actions
            )
            target_probs = torch.softmax(target_logits.float(), dim=-1)  # (2, B, K)
            atoms = self.critic.atoms
            lower = (target_probs * atoms).sum(-1).argmin(0)  # clipped double Q, per sample
            chosen = target_probs[lower, torch.arange(lower.shape[0], device=lower.device)]
            alpha = self.log_alpha.exp()
            shift = returns - discount * alpha * next_log_prob.float()
            target = project_distribution(chosen, shift, discount, atoms)
        logits = self.critic(self.critic_normalizer(obs), actions)
        log_probs = F.log_softmax(logits.float(), dim=-1)
        loss = -(target * log_probs).sum(-1).mean(-1).sum()
        q = (log_probs.exp() * atoms).sum(-1).mean()
        return loss, q.detach()

    def _update_actor(self, batch: NStepBatch) -> None:
        """The actor and the temperature: their losses share no parameter (each sees the
        other's input detached), so one backward pass and one gradient average serve both."""
        self.critic.requires_grad_(False)
        try:
            with self._autocast():
                actor_loss, log_prob = self._actor_loss(batch.obs["actor"], batch.obs["critic"])
            alpha_loss = -(self.log_alpha * (log_prob + self.target_entropy)).mean()
            self.actor_optimizer.zero_grad(set_to_none=True)
            self.alpha_optimizer.zero_grad(set_to_none=True)
            (actor_loss + alpha_loss).backward()
        finally:
            self.critic.requires_grad_(True)
        self._average_gradients([*self.policy.actor.parameters(), self.log_alpha])
        self._clip(self.policy.actor)
        self.actor_optimizer.step()
        self.alpha_optimizer.step()
        self._add("Loss/actor", actor_loss)
        self._add("Loss/alpha", alpha_loss)
        self._add("Policy/entropy", -log_prob.mean())

    def _actor_loss_eager(
        self, actor_obs: torch.Tensor, critic_obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        actions, log_prob = self.policy.actor.sample(self.policy.normalizer(actor_obs))
        logits = self.critic(self.critic_normalizer(critic_obs), actions)
        q = self.critic.expected(logits).min(0).values
        alpha = self.log_alpha.detach().exp()
        loss = (alpha * log_prob.float() - q).mean()
        return loss, log_prob.detach().float()

    def _average_gradients(self, parameters: Iterable[torch.Tensor]) -> None:
        """Under torchrun, every rank's mean gradient: the same step on every rank (the time is
        the host's: with NCCL, until the all-reduce is queued)."""
        started = time.perf_counter()
        distributed.average_gradients(parameters)
        self._allreduce_s += time.perf_counter() - started

    def _clip(self, module: nn.Module) -> None:
        if self.cfg.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(module.parameters(), self.cfg.max_grad_norm)

    def _add(self, key: str, value: torch.Tensor) -> None:
        value = value.detach().float()
        self._sums[key] = self._sums[key] + value if key in self._sums else value
        self._counts[key] = self._counts.get(key, 0) + 1

    def metrics(self) -> dict[str, float]:
        """Means since the last call (one device sync), and the temperature."""
        out = {k: float(v) / self._counts[k] for k, v in self._sums.items()}
        self._sums.clear()
        self._counts.clear()
        out["Policy/alpha"] = float(self.log_alpha.detach().exp())
        out["Perf/allreduce_s"] = self._allreduce_s
        self._allreduce_s = 0.0
        return out

    # -- state -----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "critic_normalizer": self.critic_normalizer.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "updates": self.updates,
            "actor_updates": self.actor_updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.critic_normalizer.load_state_dict(state["critic_normalizer"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.updates = int(state["updates"])
        self.actor_updates = int(state["actor_updates"])


class StepStats:
    """Per-iteration sums over transition records: episodes and terms (through the runner's
    :class:`EpisodeStats`, fed the step summaries the records carry), timing, policy lag."""

    def __init__(self, spec: EnvSpec):
        self.spec = spec
        self.episodes = EpisodeStats(spec.num_envs)
        self.last_commit: float | None = None  # the newest record's commit time, kept across
        self.reset()

    def reset(self) -> None:
        self.steps = 0
        self.busy_s = self.env_s = self.blocked_s = self.lag_sum = 0.0
        self.first_start: float | None = None

    def add(self, record: dict[str, np.ndarray], learner_updates: int) -> None:
        self.steps += 1
        finished, return_sum, length_sum = (float(x) for x in record["episodes"])
        self.episodes.add_step(
            dict(zip(self.spec.reward_terms, record["reward_terms"].tolist(), strict=True)),
            dict(zip(self.spec.terminations, record["terminations"].tolist(), strict=True)),
            int(finished),
            episode_return=return_sum / finished if finished else 0.0,
            episode_length=length_sum / finished if finished else 0.0,
        )
        busy_s, env_s, blocked_s, commit = (float(x) for x in record["timing"])
        self.busy_s += busy_s
        self.env_s += env_s
        self.blocked_s += blocked_s
        self.lag_sum += learner_updates - int(record["policy_updates"])
        if self.first_start is None:
            self.first_start = commit - busy_s - blocked_s
        self.last_commit = commit

    def metrics(self, since: float | None, continuous: bool) -> dict[str, float]:
        """This iteration's metrics. ``continuous``: the collector runs all the time (its own
        process), so its rate is over wall-clock time since ``since`` (the previous iteration's
        last commit), waits on a full ring included; else over its busy time, as in PPO."""
        out = self.episodes.metrics()
        if self.steps == 0:
            return out
        start = since if since is not None else self.first_start
        assert start is not None and self.last_commit is not None
        env_steps = self.steps * self.spec.num_envs
        collect_s = self.last_commit - start if continuous else self.busy_s
        out |= {
            "Perf/collect_steps_per_s": env_steps / max(collect_s, 1e-9),
            "Perf/collect_s": self.busy_s,
            "Perf/env_s": self.env_s,
            "Perf/env_steps_per_s": env_steps / max(self.env_s, 1e-9),
            "Perf/collect_blocked_s": self.blocked_s,
            "Perf/policy_lag_updates": self.lag_sum / self.steps,
        }
        return out

    def state_dict(self) -> dict[str, Any]:
        return self.episodes.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episodes.load_state_dict(state)


class FastSACTrainer:
    """The runner's Trainer for FastSAC (see :mod:`fuselab_rl.runner`): the learner, fed by the
    mode's :class:`~fuselab_rl.async_collect.Collector`."""

    def __init__(self, cfg: DictConfig, device: torch.device, threads: ThreadBudget, run_dir: Path):
        started = time.perf_counter()
        self.device = torch.device(device)
        chosen = choose_learner_sizes(cfg, self.device)
        log.info("FastSAC sizes, %s", describe_sizes(cfg, chosen, self.device))
        self.cfg = FastSACConfig.from_cfg(cfg.algo)
        self.run_dir = Path(run_dir)
        torch.manual_seed(int(cfg.seed))
        self._collector = self._make_collector(cfg, threads.total)
        self.spec = self._collector.spec
        try:
            self.learner = FastSAC(self.cfg, self.spec, self.device)
            self.stats = StepStats(self.spec)
            self.env_steps = 0  # env steps (of every env) received, over resumes
            self.iterations = 0
            self._records_taken = 0  # from this collector (its records' sequence numbers)
            self._update_credit = 0.0  # updates the ratio allows now
            self._updates_owed = 0.0  # minimum updates due before the next record is taken
            self._previous_commit: float | None = None
            self._collector.start(self.learner, random_steps=self.cfg.learning_starts)
        except BaseException:
            self.close()
            raise
        log.info("FastSAC trainer ready (%.1f ms)", (time.perf_counter() - started) * 1e3)

    def _make_collector(self, cfg: DictConfig, total_threads: int) -> Collector:
        """The mode's collector: the env in this process (sync), or a collector process that
        builds it (async), with the threads split between that process and this one."""
        if self.cfg.mode == "sync":
            collector = InProcessCollector(cfg, seed=int(cfg.seed))
            log.info(
                "sync FastSAC: env %s with %d envs in this process; torch %d threads on %s",
                cfg.task_name,
                collector.spec.num_envs,
                torch.get_num_threads(),
                self.device,
            )
            return collector
        collector_threads, learner_threads = split_threads(
            total_threads, self.device, self.cfg.collector.threads
        )
        torch.set_num_threads(learner_threads)
        log.info(
            "async FastSAC: %d threads -> collector %d (physics, fused kernel, policy on "
            "cpu), learner %d (torch on %s)",
            total_threads,
            collector_threads,
            learner_threads,
            self.device,
        )
        env_cfg = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(env_cfg, dict)
        env_cfg.pop("algo", None)
        return AsyncCollector(
            env_cfg,
            num_threads=collector_threads,
            seed=int(cfg.seed),
            ring_slots=self.cfg.collector.ring_slots,
        )

    # -- the Trainer contract --------------------------------------------------------------------

    def iterate(self) -> dict[str, float]:
        started = time.perf_counter()
        env_steps = self.env_steps
        updates_goal = max(1, round(self.cfg.steps_per_iteration * self.cfg.updates_per_step))
        learn_s, updates = self._learn(
            *self._collector.iteration_limits(self.cfg.steps_per_iteration, updates_goal)
        )
        self.learner.merge_normalizers()  # under torchrun: every rank did the same updates
        metrics = self.stats.metrics(self._previous_commit, continuous=self._collector.free_running)
        self._previous_commit = self.stats.last_commit
        self.stats.reset()
        metrics |= self.learner.metrics()
        metrics["Perf/learn_s"] = learn_s
        metrics |= self._collector.metrics()
        metrics |= {
            "Perf/env_steps": float((self.env_steps - env_steps) * self.spec.num_envs),
            "Perf/updates_per_s": updates / max(learn_s, 1e-9),
            "Perf/iteration_s": time.perf_counter() - started,
            "Perf/updates": float(self.learner.updates),
        }
        self.iterations += 1
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {
            "algorithm": "fastsac",
            "learner": self.learner.state_dict(),
            "episode_stats": self.stats.state_dict(),
            "env_steps": self.env_steps,
            "iterations": self.iterations,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _check_state(state)
        self.learner.load_state_dict(state["learner"])
        self.stats.load_state_dict(state["episode_stats"])
        self.env_steps = int(state["env_steps"])
        self.iterations = int(state["iterations"])
        # a trained policy acts from the first step; the replay (not saved) fills up again
        # for learning_starts steps before the updates resume
        self._collector.publish()

    def export_policy(self) -> nn.Module:
        """Deterministic CPU policy: actor obs (B, D) -> tanh of the mean (B, A)."""
        policy = copy.deepcopy(self.learner.policy).to("cpu").eval()
        return policy.requires_grad_(False)

    @staticmethod
    def inference_policy(algo: DictConfig, state: dict[str, Any]) -> nn.Module:
        """What :meth:`export_policy` returns, from a checkpoint's ``algo`` config and
        ``trainer`` state: the policy sized from its saved weights."""
        _check_state(state)
        weights = state["learner"]["policy"]
        policy = policy_builder(FastSACConfig.from_cfg(algo), *ActorPolicy.saved_dims(weights))()
        policy.load_state_dict(weights)
        return policy.eval().requires_grad_(False)

    def close(self) -> None:
        self._collector.close()

    # -- the schedule ----------------------------------------------------------------------------

    def _learn(self, max_records: float, max_updates: float) -> tuple[float, int]:
        """One iteration: take records and update, each update paid for by the credit that
        records earn (:meth:`_credit_updates`); with no credit left, wait for the next record
        (an in-process collector steps the env for it). Ends at ``max_updates`` updates, or
        once ``max_records`` records are taken and their credit is spent. Returns the seconds
        spent updating and the updates done."""
        collector = self._collector
        learn_s, updates, records = 0.0, 0, 0
        collector.check()
        while updates < max_updates:
            records += self._drain()
            if self._update_credit >= 1.0:
                update_started = time.perf_counter()
                self._update()
                learn_s += time.perf_counter() - update_started
                updates += 1
                continue
            if records >= max_records:
                break
            collector.wait_for_records(1)
            self._take_records(1)
            records += 1
        return learn_s, updates

    def _credit_updates(self, steps: int) -> None:
        """Env steps arrived: each one, once the replay holds ``learning_starts`` of them,
        earns ``updates_per_step`` updates (kept to one iteration's worth, so a learner that
        fell behind a fast collector does not later update far past the data it has) and
        owes ``min_updates_per_step`` of them before the next is taken."""
        warm = self.learner.replay.steps_written - self.cfg.learning_starts + 1
        earning = min(steps, max(warm, 0))
        cap = self.cfg.updates_per_step * self.cfg.steps_per_iteration
        self._update_credit = min(self._update_credit + earning * self.cfg.updates_per_step, cap)
        self._updates_owed += earning * self.cfg.collector.min_updates_per_step

    def _update(self) -> None:
        """One learner update; every ``publish_interval`` actor updates, the policy goes to the
        collector."""
        actor_updates = self.learner.actor_updates
        self.learner.update()
        self._update_credit -= 1.0
        self._updates_owed = max(0.0, self._updates_owed - 1.0)
        if (
            self.learner.actor_updates != actor_updates
            and self.learner.actor_updates % self.cfg.collector.publish_interval == 0
        ):
            self._collector.publish()

    def _drain(self) -> int:
        """Take what the collector holds (returns how many); with ``min_updates_per_step`` > 0,
        one record at a time and only while no minimum updates are owed, so a slow learner
        holds the collector back."""
        collector = self._collector
        if self.cfg.collector.min_updates_per_step <= 0:
            available = collector.available()
            if available:
                self._take_records(available)
            return available
        taken = 0
        while collector.available() and self._updates_owed < 1.0:
            self._take_records(1)
            taken += 1
        return taken

    def _take_records(self, count: int) -> None:
        """The collector's next ``count`` records into the learner and the statistics."""
        collector = self._collector
        records = [collector.peek(k) for k in range(count)]
        for k, record in enumerate(records):
            if int(record["seq"]) != self._records_taken + k:
                raise RuntimeError(
                    f"transition ring: expected record {self._records_taken + k}, got "
                    f"{int(record['seq'])} (a lost or repeated env step)"
                )
        self.learner.observe(records)
        for record in records:
            self.stats.add(record, self.learner.updates)
        self.env_steps += count
        self._records_taken += count
        self._credit_updates(count)
        collector.release(count)


def _check_state(state: dict[str, Any]) -> None:
    if state.get("algorithm") != "fastsac":
        raise ValueError(
            f"checkpoint: expected a FastSAC state, got algorithm {state.get('algorithm')!r}"
        )


def split_threads(
    total: int, device: torch.device, collector_threads: int | None
) -> tuple[int, int]:
    """(collector, learner) threads out of ``total``: a CUDA learner needs one thread to feed
    the GPU, a CPU learner gets half; the collector never gets fewer than one."""
    if collector_threads is not None:
        if not 1 <= collector_threads <= total:
            raise ValueError(
                f"algo.collector.threads: expected null or an int in 1..{total} (the thread "
                f"budget), got {collector_threads!r}"
            )
        return collector_threads, max(1, total - collector_threads)
    if total <= 1:
        return 1, 1
    if device.type == "cuda":
        return total - 1, 1
    return max(1, total // 2), total - max(1, total // 2)
