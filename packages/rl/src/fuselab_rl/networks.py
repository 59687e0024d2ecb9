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

    Statistics are buffers (saved with the module); ``update`` merges a batch with Chan's
    parallel formula, so the result does not depend on how samples were batched.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, dim: int, eps: float = 1e-2):
        super().__init__()
        self.eps = eps
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / (self.var.sqrt() + self.eps)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the statistics of the batch ``x`` (under torchrun: of every rank's batch, so
        every rank keeps the same statistics)."""
        if distributed.world_size() > 1:  # every rank takes part, even with an empty batch
            batch_n, batch_mean, batch_var = _merged_over_ranks(x)
        elif x.shape[0] > 0:
            batch_n, batch_mean, batch_var = x.shape[0], x.mean(dim=0), x.var(dim=0, unbiased=False)
        else:
            return
        if batch_n == 0:
            return
        total = self.count + batch_n
        weight = (batch_n / total).to(x.dtype)
        delta = batch_mean - self.mean
        self.mean += delta * weight
        # Merged sum of squared deviations, divided by the new count.
        self.var.mul_(1.0 - weight).add_(
            batch_var * weight + delta.square() * weight * (1 - weight)
        )
        self.count.copy_(total)


def _merged_over_ranks(x: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(count, mean, population variance) of the union of every rank's batch ``x``."""
    x64 = x.to(torch.float64)
    sums = [torch.tensor([float(x.shape[0])], dtype=torch.float64, device=x.device)]
    sums += [x64.sum(dim=0), x64.square().sum(dim=0)]
    distributed.sum_over_ranks(sums)
    n = int(sums[0].item())
    if n == 0:
        return 0, x.new_zeros(x.shape[1]), x.new_zeros(x.shape[1])
    mean = sums[1] / n
    var = (sums[2] / n - mean.square()).clamp_min(0.0)
    return n, mean.to(x.dtype), var.to(x.dtype)


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
