"""RolloutStorage: one PPO rollout (T steps x N envs) and its mini-batch generator.

The collector writes step t with :meth:`RolloutStorage.add`; PPO fills ``returns`` and
``advantages`` (GAE), then reads shuffled mini-batches of the flattened T * N samples, or
mini-batches of whole envs (every step of a subset of envs) for a loss over consecutive steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch


@dataclass
class MiniBatch:
    actor_obs: torch.Tensor
    critic_obs: torch.Tensor
    actions: torch.Tensor
    old_log_probs: torch.Tensor
    old_values: torch.Tensor
    old_mean: torch.Tensor
    old_std: torch.Tensor
    returns: torch.Tensor
    advantages: torch.Tensor
    # whole-env batches: rows step-major, `steps` of each env, and whether the episode ended
    # after each row's step (what pairs consecutive steps); shuffled batches: None, None
    steps: int | None
    dones: torch.Tensor | None


class RolloutStorage:
    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        actor_obs_dim: int,
        critic_obs_dim: int,
        action_dim: int,
        device: torch.device,
    ):
        self.num_steps, self.num_envs, self.device = num_steps, num_envs, device

        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros(num_steps, num_envs, *shape, device=device)

        self.actor_obs = zeros(actor_obs_dim)
        self.critic_obs = zeros(critic_obs_dim)
        self.actions = zeros(action_dim)
        self.log_probs = zeros()
        self.values = zeros()
        self.action_mean = zeros(action_dim)
        self.action_std = zeros(action_dim)
        self.rewards = zeros()  # time-outs already carry the bootstrapped value
        self.dones = zeros()  # 1.0 where the episode ended after this step (failure or time-out)
        self.returns = zeros()
        self.advantages = zeros()
        self.step = 0

    def add(
        self,
        actor_obs: torch.Tensor,
        critic_obs: torch.Tensor,
        actions: torch.Tensor,
        log_probs: torch.Tensor,
        values: torch.Tensor,
        action_mean: torch.Tensor,
        action_std: torch.Tensor,
        rewards: torch.Tensor,
        dones: torch.Tensor,
    ) -> None:
        if self.step >= self.num_steps:
            raise RuntimeError(f"rollout storage is full ({self.num_steps} steps); clear() it")
        t = self.step
        self.actor_obs[t] = actor_obs
        self.critic_obs[t] = critic_obs
        self.actions[t] = actions
        self.log_probs[t] = log_probs
        self.values[t] = values
        self.action_mean[t] = action_mean
        self.action_std[t] = action_std
        self.rewards[t] = rewards
        self.dones[t] = dones
        self.step += 1

    def clear(self) -> None:
        self.step = 0

    def mini_batch_units(self, num_mini_batches: int, *, whole_envs: bool = False) -> int:
        """What mini-batches split (envs, or steps x envs), checked against their count."""
        if whole_envs:
            count, what = self.num_envs, "envs: algo.smoothness_coef > 0 batches whole envs"
        else:
            count, what = self.num_steps * self.num_envs, "steps x envs"
        if not 1 <= num_mini_batches <= count:
            raise ValueError(
                f"algo.num_mini_batches: expected 1..{count} ({what}), got {num_mini_batches}"
            )
        return count

    def mini_batches(
        self,
        num_mini_batches: int,
        num_epochs: int,
        generator: torch.Generator,
        *,
        whole_envs: bool = False,
    ) -> Iterator[MiniBatch]:
        """``num_epochs`` passes over the rollout, each in a fresh random order (``generator``
        makes the order part of the trainer's reproducible state). A mini-batch holds random
        samples, or with ``whole_envs`` every step of a random subset of the envs, step-major
        (what a loss over consecutive steps of one env needs)."""
        steps, envs = self.num_steps, self.num_envs
        units = self.mini_batch_units(num_mini_batches, whole_envs=whole_envs)
        size = units // num_mini_batches
        flat = {
            name: getattr(self, name).flatten(0, 1)
            for name in (
                "actor_obs",
                "critic_obs",
                "actions",
                "log_probs",
                "values",
                "action_mean",
                "action_std",
                "returns",
                "advantages",
                "dones",
            )
        }
        step_offsets = None  # whole-env batches: row t * envs + e is env e's step t
        if whole_envs:
            step_offsets = torch.arange(steps, device=self.device)[:, None] * envs
        for _ in range(num_epochs):
            order = torch.randperm(units, generator=generator, device="cpu").to(self.device)
            for k in range(num_mini_batches):
                rows = order[k * size : (k + 1) * size]
                if step_offsets is not None:
                    rows = (step_offsets + rows[None, :]).flatten()
                yield MiniBatch(
                    actor_obs=flat["actor_obs"][rows],
                    critic_obs=flat["critic_obs"][rows],
                    actions=flat["actions"][rows],
                    old_log_probs=flat["log_probs"][rows],
                    old_values=flat["values"][rows],
                    old_mean=flat["action_mean"][rows],
                    old_std=flat["action_std"][rows],
                    returns=flat["returns"][rows],
                    advantages=flat["advantages"][rows],
                    steps=steps if whole_envs else None,
                    dones=flat["dones"][rows] if whole_envs else None,
                )
