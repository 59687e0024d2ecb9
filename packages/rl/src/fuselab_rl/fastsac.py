"""FastSAC: soft actor-critic for thousands of parallel envs.

Haarnoja et al.'s SAC with what makes it work at that scale: twin distributional critics (C51),
n-step returns from a per-env replay (:mod:`fuselab_rl.replay`), LayerNorm + SiLU networks
(:mod:`fuselab_rl.fastsac_networks`), observation normalization, several critic updates per env
step and a delayed actor and temperature update. Top to bottom: the config, the learner
(:class:`FastSAC`: losses, update) and the trainer (:class:`FastSACTrainer`), whose iteration is
``steps_per_iteration * updates_per_step`` updates on env steps from the collector of
``algo.mode`` (:mod:`fuselab_rl.fastsac_collector`).
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.nn import functional as F
from torch.optim import Adam, AdamW

from fuselab_env_core import ranges
from fuselab_env_core.ranges import LayerSizes, PositiveFloat, PositiveInt, Range, Section
from fuselab_env_core.timing import elapsed_ms
from fuselab_rl import distributed
from fuselab_rl.fastsac_collector import AsyncCollector, Collector, EnvSpec
from fuselab_rl.fastsac_networks import ActorPolicy, TwinDistributionalCritic, project_distribution
from fuselab_rl.learner_sizes import TABLES, check_sized, choose_learner_sizes, describe_sizes
from fuselab_rl.networks import EmpiricalNormalization
from fuselab_rl.replay import NStepBatch, NStepReplay
from fuselab_rl.threads import ThreadBudget

log = logging.getLogger(__name__)

UnitInterval = Annotated[float, Range(gt=0.0, le=1.0)]  # a discount, a soft-update rate


@dataclass
class CollectorCfg(Section):
    """``algo.collector``: the async collector process and its ring."""

    KEY = "algo.collector"

    threads: PositiveInt | None = None  # null: ThreadBudget.split decides (CPU learner: half)
    ring_slots: Annotated[int, Range(ge=2)] = 64
    publish_interval: PositiveInt = 1  # publish the policy every this many actor updates


@dataclass
class FastSACCfg(Section):
    """``algo`` of the composed config (configs/algo/fastsac.yaml)."""

    KEY = "algo"

    mode: Literal["async", "sync"]
    steps_per_iteration: PositiveInt
    updates_per_step: PositiveFloat
    actor_update_interval: PositiveInt
    learning_starts: Annotated[int, Range(ge=0)]
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
    action_bound: Literal["reach"] | PositiveFloat
    log_std_min: float
    log_std_max: float
    actor_lr: PositiveFloat
    critic_lr: PositiveFloat
    alpha_lr: PositiveFloat
    weight_decay: ranges.NonNegativeFloat
    max_grad_norm: ranges.NonNegativeFloat
    actor_hidden_dims: LayerSizes
    critic_hidden_dims: LayerSizes
    obs_normalization: bool
    bf16: bool
    compile: bool
    collector: CollectorCfg

    @classmethod
    def from_config(cls, algo: DictConfig) -> FastSACCfg:
        raw: dict[str, Any] = OmegaConf.to_container(algo, resolve=True)  # type: ignore[assignment]
        check_sized(raw)
        own = {k: v for k, v in raw.items() if k not in ("name", *TABLES)}
        if missing := sorted({f.name for f in fields(cls)} - {"collector"} - own.keys()):
            raise KeyError(f"algo: missing keys {missing} (see configs/algo/fastsac.yaml)")
        own["collector"] = ranges.build_section(CollectorCfg, own.get("collector", {}))
        return ranges.build_section(cls, own)

    def __post_init__(self) -> None:
        super().__post_init__()
        for low, high in (("v_min", "v_max"), ("log_std_min", "log_std_max")):
            if not getattr(self, low) < getattr(self, high):
                got = f"{getattr(self, low)!r}, {getattr(self, high)!r}"
                raise ValueError(f"algo.{low}, algo.{high}: expected {low} < {high}, got {got}")


def build_policy(cfg: FastSACCfg, spec: EnvSpec) -> ActorPolicy:
    """The acting policy for the env of ``spec`` (the collector process builds its own with
    this): its actions bounded by the env's reach (``action_bound: reach``) or a number."""
    bound = spec.action_reach if cfg.action_bound == "reach" else cfg.action_bound
    return policy_of(cfg, spec.obs_dims["actor"], spec.action_dim, bound)


def policy_of(cfg: FastSACCfg, obs_dim: int, action_dim: int, bound: Any = 1.0) -> ActorPolicy:
    """The acting policy of ``cfg``'s sizes; a checkpoint's loads its own bound over ``bound``."""
    std_range = (cfg.log_std_min, cfg.log_std_max)
    dims, normalize = cfg.actor_hidden_dims, cfg.obs_normalization
    return ActorPolicy(obs_dim, action_dim, dims, normalize, log_std_range=std_range, bound=bound)


class FastSAC:
    """Networks, optimizers, replay, the losses and the update; knows nothing about processes."""

    def __init__(self, cfg: FastSACCfg, spec: EnvSpec, device: torch.device):
        started = time.perf_counter()
        self.cfg, self.spec, self.device = cfg, spec, device
        critic_dim, action_dim = spec.obs_dims["critic"], spec.action_dim
        self.policy = build_policy(cfg, spec).to(device)
        normalizer = EmpiricalNormalization(critic_dim) if cfg.obs_normalization else nn.Identity()
        self.critic_normalizer: nn.Module = normalizer.to(device)
        atoms, dims = torch.linspace(cfg.v_min, cfg.v_max, cfg.num_atoms), cfg.critic_hidden_dims
        self.critic = TwinDistributionalCritic(critic_dim, action_dim, dims, atoms).to(device)
        distributed.broadcast_state(self.policy)  # under torchrun: rank 0's initial weights
        distributed.broadcast_state(self.critic)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(math.log(cfg.alpha_init), device=device, requires_grad=True)
        self.target_entropy = -cfg.target_entropy_scale * action_dim
        actor, decay = self.policy.actor.parameters(), cfg.weight_decay
        self.actor_optimizer = AdamW(actor, cfg.actor_lr, weight_decay=decay)
        self.critic_optimizer = AdamW(self.critic.parameters(), cfg.critic_lr, weight_decay=decay)
        self.alpha_optimizer = Adam([self.log_alpha], cfg.alpha_lr)
        steps = max(cfg.buffer_size // spec.num_envs, cfg.n_step)
        shape = spec.num_envs, steps, spec.obs_dims, action_dim
        self.replay = NStepReplay(*shape, cfg.n_step, cfg.gamma, device)
        normalizers = {"actor": self.policy.normalizer, "critic": self.critic_normalizer}
        self.normalizers = {g: n for g, n in normalizers.items() if not isinstance(n, nn.Identity)}
        # under torchrun the normalizers accumulate each rank's env steps and merge them where
        # every rank stands at the same update (the first, iteration ends); alone, at once
        self.merge_at_once = distributed.world_size() == 1
        self.updates = self.actor_updates = 0
        self.critic_loss, self.actor_loss = self._critic_loss, self._actor_loss
        if cfg.compile:  # the kernels build on the first update
            self.critic_loss = torch.compile(self._critic_loss)
            self.actor_loss = torch.compile(self._actor_loss)
        self._sums: dict[str, list] = {}  # metric -> [sum on the device, count]
        self._allreduce_s = 0.0  # under torchrun: the time spent averaging gradients
        log.info(
            "FastSAC learner on %s: actor %s, critics 2 x %s over %d atoms [%g, %g], "
            "%d-step returns, bf16 %s, compile %s (%.1f ms)",
            *(device, list(cfg.actor_hidden_dims), list(cfg.critic_hidden_dims), cfg.num_atoms),
            *(cfg.v_min, cfg.v_max, cfg.n_step, cfg.bf16, cfg.compile, elapsed_ms(started)),
        )

    def observe(self, records: Sequence[np.ndarray]) -> None:
        """Store env steps (records, in order); their observations go to the normalizers."""
        for record in records:
            obs, next_obs = (
                {g: torch.from_numpy(record[f"{k}.{g}"]) for g in self.spec.obs_dims}
                for k in ("obs", "next_obs")
            )
            step = ("actions", "reward", "terminated", "truncated")
            self.replay.add(obs, *(torch.from_numpy(record[k]) for k in step), next_obs=next_obs)
        written = self.replay.steps_written
        rows = torch.arange(written - len(records), written, device=self.device)
        rows %= self.replay.capacity
        for group, normalizer in self.normalizers.items():
            normalizer.accumulate(self.replay.obs[group][rows].flatten(0, 1))
        if self.merge_at_once:
            self.merge_normalizers()

    def merge_normalizers(self) -> None:
        """Fold the observations added since the last merge into the statistics (under
        torchrun those of every rank: every rank calls it at the same point)."""
        for normalizer in self.normalizers.values():
            normalizer.merge()

    def _critic_loss(self, batch: NStepBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-entropy of each critic's distribution against the n-step target distribution
        (projected onto the support) of the target critic whose mean is lower; the mean Q."""
        atoms, next_obs = self.critic.atoms, batch.next_obs
        with torch.no_grad():
            next_actions, next_log_prob = self.policy.actor.sample(
                self.policy.normalizer(next_obs["actor"])
            )
            logits = self.critic_target(self.critic_normalizer(next_obs["critic"]), next_actions)
            probs = torch.softmax(logits.float(), dim=-1)  # (2, B, K)
            lower = (probs * atoms).sum(-1).argmin(0)  # clipped double Q, per sample
            chosen = probs[lower, torch.arange(lower.shape[0], device=lower.device)]
            # the entropy bonus counts from the target entropy: raw, it pays alpha * entropy for
            # every step an episode lasts, and an entropy below zero (the target is -A/2) makes
            # ending an episode early pay; centred, it averages 0 once the entropy is on target
            surprise = next_log_prob.float() + self.target_entropy
            shift = batch.returns - batch.discount * self.log_alpha.exp() * surprise
            target = project_distribution(chosen, shift, batch.discount, atoms)
        logits = self.critic(self.critic_normalizer(batch.obs["critic"]), batch.actions)
        log_probs = F.log_softmax(logits.float(), dim=-1)
        loss = -(target * log_probs).sum(-1).mean(-1).sum()
        return loss, (log_probs.exp() * atoms).sum(-1).mean().detach()

    def _actor_loss(self, batch: NStepBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """alpha * log pi - (the lower of the critics' Q); and the actions' log-probabilities."""
        actions, log_prob = self.policy.actor.sample(self.policy.normalizer(batch.obs["actor"]))
        logits = self.critic(self.critic_normalizer(batch.obs["critic"]), actions)
        q = self.critic.expected(logits).min(0).values
        loss = (self.log_alpha.detach().exp() * log_prob.float() - q).mean()
        return loss, log_prob.detach().float()

    def update(self) -> None:
        """One critic update and the soft update of its target; every ``actor_update_interval``
        an actor and temperature update. Metrics accumulate on the device (:meth:`metrics`)."""
        if self.updates == 0 and not self.merge_at_once:
            self.merge_normalizers()  # the warm-up's env steps, before anything learns from them
        batch = self.replay.sample(self.cfg.batch_size)
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.cfg.bf16):
            critic_loss, q = self.critic_loss(batch)
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self._step(self.critic_optimizer, self.critic.parameters())
        with torch.no_grad():  # target <- target + tau * (online - target), one fused call
            target: list[torch.Tensor] = [*self.critic_target.parameters()]
            torch._foreach_lerp_(target, [*self.critic.parameters()], self.cfg.tau)
        self.updates += 1
        self._add({"Loss/critic": critic_loss, "Policy/q": q})
        if self.updates % self.cfg.actor_update_interval == 0:
            self._update_actor(batch)
            self.actor_updates += 1

    def _update_actor(self, batch: NStepBatch) -> None:
        """The actor and the temperature: their losses share no parameter (each sees the other's
        input detached), so one backward pass and one gradient average serve both."""
        self.critic.requires_grad_(False)
        try:
            with torch.autocast(self.device.type, torch.bfloat16, enabled=self.cfg.bf16):
                actor_loss, log_prob = self.actor_loss(batch)
            alpha_loss = -(self.log_alpha * (log_prob + self.target_entropy)).mean()
            self.actor_optimizer.zero_grad(set_to_none=True)
            self.alpha_optimizer.zero_grad(set_to_none=True)
            (actor_loss + alpha_loss).backward()
        finally:
            self.critic.requires_grad_(True)
        self._step(self.actor_optimizer, self.policy.actor.parameters(), [self.log_alpha])
        self.alpha_optimizer.step()
        entropy = -log_prob.mean()
        self._add({"Loss/actor": actor_loss, "Loss/alpha": alpha_loss, "Policy/entropy": entropy})

    def _step(self, optimizer: Any, parameters: Iterable[torch.Tensor], more: Any = ()) -> None:
        """Average the gradients over torchrun's ranks (with ``more``'s, in one all-reduce; timed
        on the host: with NCCL, until it is queued), clip them, step."""
        started, parameters = time.perf_counter(), list(parameters)
        distributed.average_gradients([*parameters, *more])
        self._allreduce_s += time.perf_counter() - started
        if self.cfg.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(parameters, self.cfg.max_grad_norm)
        optimizer.step()

    def _add(self, values: Mapping[str, torch.Tensor]) -> None:
        for key, value in values.items():
            total = self._sums.setdefault(key, [0.0, 0])
            total[0], total[1] = total[0] + value.detach().float(), total[1] + 1

    def metrics(self) -> dict[str, float]:
        """Means since the last call (one device sync), and the temperature."""
        out = {key: float(total) / count for key, (total, count) in self._sums.items()}
        self._sums.clear()
        out["Policy/alpha"] = float(self.log_alpha.detach().exp())
        out["Perf/allreduce_s"], self._allreduce_s = self._allreduce_s, 0.0
        return out

    def _stateful(self) -> dict[str, Any]:
        names = ["policy", "critic_normalizer", "critic", "critic_target"]
        names += ["actor_optimizer", "critic_optimizer", "alpha_optimizer"]
        return {name: getattr(self, name) for name in names}

    def state_dict(self) -> dict[str, Any]:
        state = {name: part.state_dict() for name, part in self._stateful().items()}
        counts = {"updates": self.updates, "actor_updates": self.actor_updates}
        return state | {"log_alpha": self.log_alpha.detach().clone(), **counts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, part in self._stateful().items():
            part.load_state_dict(state[name])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.updates, self.actor_updates = int(state["updates"]), int(state["actor_updates"])


class FastSACTrainer:
    """The runner's Trainer (:mod:`fuselab_rl.runner`): the learner, fed by the mode's collector."""

    def __init__(self, cfg: DictConfig, device: torch.device, threads: ThreadBudget, run_dir: Path):
        started = time.perf_counter()
        self.device = torch.device(device)
        chosen = choose_learner_sizes(cfg, self.device)
        log.info("FastSAC sizes, %s", describe_sizes(cfg, chosen, self.device))
        self.cfg = algo = FastSACCfg.from_config(cfg.algo)
        self.updates_per_iteration = max(1, round(algo.steps_per_iteration * algo.updates_per_step))
        torch.manual_seed(int(cfg.seed))
        self.collector = self._make_collector(cfg, threads)
        self.spec = self.collector.spec
        try:
            self.learner = FastSAC(algo, self.spec, self.device)
            self.env_steps = self.iterations = 0  # env steps (of every env) taken, over resumes
            self.earned = 0.0  # updates the env steps taken have paid for, not yet done
            self.collector.start(self.learner)
        except BaseException:
            self.close()
            raise
        log.info("FastSAC trainer ready (%.1f ms)", elapsed_ms(started))

    def _make_collector(self, cfg: DictConfig, budget: ThreadBudget) -> Collector:
        """The env in this process (sync), or in a collector process that gets its threads."""
        seed, random_steps = int(cfg.seed), self.cfg.learning_starts
        if self.cfg.mode == "sync":
            # the env first: torch reading its thread count before the env is built lets the
            # build move it (1 -> 2 threads here)
            collector = Collector(cfg, seed=seed, random_steps=random_steps)
            log.info("sync FastSAC: torch %d threads on %s", torch.get_num_threads(), self.device)
            return collector
        threads = budget.split(self.device.type, self.cfg.collector.threads)
        torch.set_num_threads(threads[1])
        message = "async FastSAC: %d threads -> collector %d (physics, kernel, policy), learner %d"
        log.info(message + " (torch on %s)", budget.total, *threads, self.device)
        env_cfg: dict = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
        env_cfg.pop("algo", None)
        make_policy, slots = (
            functools.partial(build_policy, self.cfg),
            self.cfg.collector.ring_slots,
        )
        return AsyncCollector(env_cfg, make_policy, random_steps, slots, threads[0], seed)

    def iterate(self) -> dict[str, float]:
        """``updates_per_iteration`` updates. Each env step, once the replay holds
        ``learning_starts``, earns ``updates_per_step``; with none earned, the learner waits for
        the next env step (sync: steps the env). At most an iteration's worth is banked, so a
        learner behind a fast collector does not later update far past its data."""
        started, env_steps, learn_s = time.perf_counter(), self.env_steps, 0.0
        self.collector.check()
        for _ in range(self.updates_per_iteration):
            self._take_env_steps(wait=False)
            while self.earned < 1.0:
                self._take_env_steps(wait=True)
            update_started, actor_updates = time.perf_counter(), self.learner.actor_updates
            self.learner.update()
            self.earned -= 1.0
            published = self.learner.actor_updates % self.cfg.collector.publish_interval == 0
            if published and self.learner.actor_updates != actor_updates:
                self.collector.publish()
            learn_s += time.perf_counter() - update_started
        self.learner.merge_normalizers()  # under torchrun: every rank did the same updates
        self.iterations += 1
        perf = {
            "Perf/learn_s": learn_s,
            "Perf/env_steps": float((self.env_steps - env_steps) * self.spec.num_envs),
            "Perf/updates_per_s": self.updates_per_iteration / max(learn_s, 1e-9),
            "Perf/iteration_s": time.perf_counter() - started,
            "Perf/updates": float(self.learner.updates),
        }
        return self.collector.metrics() | self.learner.metrics() | perf

    def _take_env_steps(self, wait: bool) -> None:
        taken = self.collector.feed(wait)
        self.env_steps += taken
        warm = self.learner.replay.steps_written - self.cfg.learning_starts + 1
        earned = self.earned + min(taken, max(warm, 0)) * self.cfg.updates_per_step
        self.earned = min(earned, self.updates_per_iteration)

    def state_dict(self) -> dict[str, Any]:
        learner, episodes = self.learner.state_dict(), self.collector.episodes.state_dict()
        counts = {"env_steps": self.env_steps, "iterations": self.iterations}
        return {"algorithm": "fastsac", "learner": learner, "episode_stats": episodes, **counts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _check_state(state)
        self.learner.load_state_dict(state["learner"])
        self.collector.episodes.load_state_dict(state["episode_stats"])
        self.env_steps, self.iterations = int(state["env_steps"]), int(state["iterations"])
        # a trained policy acts from the first step; the replay (not saved) fills up again for
        # learning_starts steps before the updates resume
        self.collector.publish()

    def export_policy(self) -> nn.Module:
        """Deterministic CPU policy: actor obs (B, D) -> the squashed mean (B, A)."""
        return copy.deepcopy(self.learner.policy).to("cpu").eval().requires_grad_(False)

    @staticmethod
    def inference_policy(algo: DictConfig, state: dict[str, Any]) -> nn.Module:
        """:meth:`export_policy` from a checkpoint's ``algo`` config and ``trainer`` state."""
        _check_state(state)
        weights = state["learner"]["policy"]
        dims = ActorPolicy.saved_dims(weights)
        policy = policy_of(FastSACCfg.from_config(algo), *dims)  # the bound: the saved one
        policy.load_state_dict(weights)
        return policy.eval().requires_grad_(False)

    def close(self) -> None:
        self.collector.close()


def _check_state(state: dict[str, Any]) -> None:
    if (got := state.get("algorithm")) != "fastsac":
        raise ValueError(f"checkpoint: expected a FastSAC state, got algorithm {got!r}")
