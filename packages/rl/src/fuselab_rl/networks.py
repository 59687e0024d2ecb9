"""Networks: an MLP, a running observation normalizer, and PPO's actor-critic.

The actor and the critic read different observation groups (the critic's may hold privileged
quantities); each has its own normalizer. The policy a robot runs is the actor's mean action
with its normalizer in front: :meth:`ActorCritic.policy` returns exactly that, as its own
module, for export.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from fuselab_rl import distributed

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "elu": nn.ELU,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "selu": nn.SELU,
    "leaky_relu": nn.LeakyReLU,
}


def activation_class(name: str) -> type[nn.Module]:
    if name not in ACTIVATIONS:
        raise ValueError(
            f"algo.policy.activation: expected one of {', '.join(ACTIVATIONS)}, got {name!r}"
        )
    return ACTIVATIONS[name]


class MLP(nn.Sequential):
    """Linear layers with an activation between them (none after the last)."""

    def __init__(
        self, in_dim: int, hidden_dims: Sequence[int], out_dim: int, activation: str = "elu"
    ):
        act = activation_class(activation)
        layers: list[nn.Module] = []
        dims = [in_dim, *hidden_dims]
        for a, b in zip(dims[:-1], dims[1:], strict=True):
            layers += [nn.Linear(a, b), act()]
        layers.append(nn.Linear(dims[-1], out_dim))
        super().__init__(*layers)


class EmpiricalNormalization(nn.Module):
    """(x - mean) / (std + eps) with the mean and variance of every sample seen while training.

    Statistics are buffers (saved with the module). Samples first :meth:`accumulate` (count,
    sum and sum of squares, float64, not saved), then :meth:`merge` folds them in with Chan's
    parallel formula, so the result does not depend on how samples were batched; under
    torchrun ``merge`` folds in every rank's samples, so every rank keeps the same statistics.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor
    pending: torch.Tensor

    def __init__(self, dim: int, eps: float = 1e-2):
        super().__init__()
        self.eps = eps
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        # (count, sum of x, sum of x^2) of the samples accumulated since the last merge
        self.register_buffer(
            "pending", torch.zeros(1 + 2 * dim, dtype=torch.float64), persistent=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / (self.var.sqrt() + self.eps)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the batch ``x`` (B, D) into the statistics (under torchrun: with the batch of
        every rank; every rank must call it)."""
        self.accumulate(x)
        self.merge()

    @torch.no_grad()
    def accumulate(self, x: torch.Tensor) -> None:
        """Keep the batch ``x`` (B, D) for the next :meth:`merge`; the statistics stay as they
        are (and no rank waits for another)."""
        dim = self.mean.shape[0]
        x64 = x.to(torch.float64)
        self.pending[0] += x.shape[0]
        self.pending[1 : 1 + dim] += x64.sum(dim=0)
        self.pending[1 + dim :] += x64.square().sum(dim=0)

    @torch.no_grad()
    def merge(self) -> None:
        """Fold the accumulated samples (of every rank, under torchrun: a collective every rank
        takes part in, with or without samples of its own) into the statistics."""
        distributed.sum_over_ranks([self.pending])
        dim = self.mean.shape[0]
        # Without a branch on the count (no wait for the device); no samples: weight 0.
        n = self.pending[0]
        total = self.count + n
        weight = n / total.clamp_min(1.0)
        batch_mean = self.pending[1 : 1 + dim] / n.clamp_min(1.0)
        batch_var = (self.pending[1 + dim :] / n.clamp_min(1.0) - batch_mean.square()).clamp_min(0)
        delta = batch_mean - self.mean
        self.mean.add_((delta * weight).to(self.mean.dtype))
        # Merged sum of squared deviations, divided by the new count.
        merged = self.var * (1.0 - weight) + batch_var * weight
        merged += delta.square() * weight * (1.0 - weight)
        self.var.copy_(merged)
        self.count.copy_(total)
        self.pending.zero_()


class Policy(nn.Module):
    """What a robot runs: actor observations (B, D) -> deterministic actions (B, A), clipped to
    [-clip, clip] when training clipped the actions it sent to the env."""

    def __init__(self, normalizer: nn.Module, actor: nn.Module, clip: float | None = None):
        super().__init__()
        self.normalizer = normalizer
        self.actor = actor
        self.clip = clip

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        actions = self.actor(self.normalizer(obs))
        return actions if self.clip is None else actions.clamp(-self.clip, self.clip)


class ActorCritic(nn.Module):
    """A Gaussian policy with a state-independent log std, and a value function."""

    def __init__(
        self,
        actor_obs_dim: int,
        critic_obs_dim: int,
        action_dim: int,
        *,
        actor_hidden_dims: Sequence[int] = (512, 256, 128),
        critic_hidden_dims: Sequence[int] = (512, 256, 128),
        activation: str = "elu",
        init_noise_std: float = 1.0,
        actor_obs_normalization: bool = True,
        critic_obs_normalization: bool = True,
    ):
        super().__init__()
        self.actor = MLP(actor_obs_dim, actor_hidden_dims, action_dim, activation)
        self.critic = MLP(critic_obs_dim, critic_hidden_dims, 1, activation)
        self.actor_normalizer: nn.Module = (
            EmpiricalNormalization(actor_obs_dim) if actor_obs_normalization else nn.Identity()
        )
        self.critic_normalizer: nn.Module = (
            EmpiricalNormalization(critic_obs_dim) if critic_obs_normalization else nn.Identity()
        )
        self.log_std = nn.Parameter(torch.full((action_dim,), math.log(init_noise_std)))

    @staticmethod
    def saved_dims(state: Mapping[str, torch.Tensor]) -> tuple[int, int, int]:
        """(actor obs, critic obs, actions) widths of a saved ``state_dict``."""
        actor_in, critic_in = state["actor.0.weight"].shape[1], state["critic.0.weight"].shape[1]
        return int(actor_in), int(critic_in), int(state["log_std"].shape[0])

    def action_mean(self, actor_obs: torch.Tensor) -> torch.Tensor:
        return self.actor(self.actor_normalizer(actor_obs))

    def distribution(self, actor_obs: torch.Tensor) -> torch.distributions.Normal:
        mean = self.action_mean(actor_obs)
        return torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean))

    def value(self, critic_obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.critic_normalizer(critic_obs)).squeeze(-1)

    def update_normalizers(self, actor_obs: torch.Tensor, critic_obs: torch.Tensor) -> None:
        for normalizer, obs in (
            (self.actor_normalizer, actor_obs),
            (self.critic_normalizer, critic_obs),
        ):
            if isinstance(normalizer, EmpiricalNormalization):
                normalizer.update(obs)

    def has_empty_normalizer(self) -> bool:
        """True while an observation normalizer has seen no sample (a policy not yet trained)."""
        return any(
            isinstance(normalizer, EmpiricalNormalization) and normalizer.count == 0
            for normalizer in (self.actor_normalizer, self.critic_normalizer)
        )

    def policy(self, clip: float | None = None) -> Policy:
        """A CPU copy of the deterministic policy (normalizer + actor), in eval mode."""
        normalizer, actor = copy.deepcopy(self.actor_normalizer), copy.deepcopy(self.actor)
        exported = Policy(normalizer, actor, clip)
        return exported.to("cpu").eval()
