"""FastSAC's networks: a tanh-squashed Gaussian actor, twin distributional (C51) critics, and
the categorical projection of a shifted return distribution. Observations are normalized by
:class:`fuselab_rl.networks.EmpiricalNormalization`, as in PPO. They live apart from
:mod:`fuselab_rl.fastsac` so that the collector process can build the acting policy
(:class:`ActorPolicy`) without the learner. The config checks every size and range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fuselab_rl.networks import EmpiricalNormalization


def layer_norm_mlp(in_dim: int, hidden_dims: Sequence[int], out_dim: int | None) -> nn.Sequential:
    """Linear -> LayerNorm -> SiLU per hidden layer, then a plain Linear head (none for None)."""
    layers: list[nn.Module] = []
    for width_in, width_out in zip([in_dim, *hidden_dims[:-1]], hidden_dims, strict=True):
        layers += [nn.Linear(width_in, width_out), nn.LayerNorm(width_out), nn.SiLU()]
    return nn.Sequential(*layers, *([nn.Linear(hidden_dims[-1], out_dim)] if out_dim else []))


class SquashedGaussianActor(nn.Module):
    """A Gaussian over pre-squash actions whose log-std is bounded smoothly by a tanh to
    ``log_std_range``; its actions are ``bound * tanh(u)``, each in [-bound, bound] (per action;
    holosoma's FastSAC bounds each at the action that reaches its joint's limits)."""

    bound: torch.Tensor

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int],
        log_std_range=(-5.0, 2.0),
        bound: Sequence[float] | float = 1.0,
    ):
        super().__init__()
        self.log_std_min, self.log_std_max = log_std_range
        self.trunk = layer_norm_mlp(obs_dim, hidden_dims, None)
        self.mean = nn.Linear(hidden_dims[-1], action_dim)
        self.log_std = nn.Linear(hidden_dims[-1], action_dim)
        self.register_buffer("bound", torch.ones(action_dim) * torch.as_tensor(bound).float())

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) of the pre-squash Gaussian."""
        features = self.trunk(obs)
        span = self.log_std_max - self.log_std_min
        log_std = self.log_std_min + 0.5 * span * (torch.tanh(self.log_std(features)) + 1.0)
        return self.mean(features), log_std

    def squash(self, pre_squash: torch.Tensor) -> torch.Tensor:
        return torch.tanh(pre_squash).clamp(-1.0, 1.0) * self.bound

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized action in [-bound, bound] and the log-probability (B,) of its
        tanh, the action before the bound."""
        mean, log_std = (x.float() for x in self(obs))  # the Gaussian in float32 under autocast
        noise = torch.randn_like(mean)
        pre_squash = mean + noise * log_std.exp()
        gaussian = -0.5 * noise.square() - log_std - 0.5 * math.log(2 * math.pi)
        # log |d tanh(u)/du| = log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable
        squash = 2.0 * (math.log(2.0) - pre_squash - F.softplus(-2.0 * pre_squash))
        # the density of tanh(u), before the bound: with the bound's constant sum(log bound) in
        # it, the entropy bonus would pay alpha * that for every step survived, whatever the
        # policy does, and the target entropy would mean something else for every robot
        log_prob = (gaussian - squash).sum(-1)
        return self.squash(pre_squash), log_prob


class ActorPolicy(nn.Module):
    """The acting policy: observation normalizer + actor. ``forward`` is deterministic (the
    squashed mean), which is what export and evaluation use; the collector samples. The
    normalizer's statistics change only through the learner (``FastSAC.observe`` and
    ``merge_normalizers``)."""

    def __init__(
        self, obs_dim: int, action_dim: int, hidden_dims: Sequence[int], normalize=True, **actor
    ):
        super().__init__()
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.normalizer: nn.Module = EmpiricalNormalization(obs_dim) if normalize else nn.Identity()
        self.actor = SquashedGaussianActor(obs_dim, action_dim, hidden_dims, **actor)

    @staticmethod
    def saved_dims(state: Mapping[str, torch.Tensor]) -> tuple[int, int]:
        """(obs, actions) widths of a saved ``state_dict``."""
        obs_dim = state["actor.trunk.0.weight"].shape[1]
        return int(obs_dim), int(state["actor.mean.weight"].shape[0])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        mean, _ = self.actor(self.normalizer(obs))
        return self.actor.squash(mean)

    def explore(self, obs: torch.Tensor) -> torch.Tensor:
        action, _ = self.actor.sample(self.normalizer(obs))
        return action


class TwinDistributionalCritic(nn.Module):
    """Two independent critics, each a categorical distribution over the returns ``atoms``."""

    atoms: torch.Tensor

    def __init__(self, obs_dim: int, action_dim: int, hidden_dims: Sequence[int], atoms: Tensor):
        super().__init__()
        self.q1 = layer_norm_mlp(obs_dim + action_dim, hidden_dims, len(atoms))
        self.q2 = layer_norm_mlp(obs_dim + action_dim, hidden_dims, len(atoms))
        self.register_buffer("atoms", atoms.clone())

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Logits (2, B, num_atoms)."""
        x = torch.cat([obs, actions], dim=-1)
        return torch.stack([self.q1(x), self.q2(x)])

    def expected(self, logits: torch.Tensor) -> torch.Tensor:
        """Mean of each distribution: (..., num_atoms) logits -> (...)."""
        return (torch.softmax(logits.float(), dim=-1) * self.atoms).sum(-1)


def project_distribution(
    probs: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, atoms: torch.Tensor
) -> torch.Tensor:
    """Project the distribution ``shift + scale * Z`` (Z on ``atoms`` with ``probs``) back onto
    ``atoms``, C51 style: each shifted atom is clamped to the support and its mass split
    linearly between the two neighbouring atoms. probs (B, K), shift and scale (B,)."""
    num_atoms = atoms.shape[0]
    v_min, v_max = atoms[0], atoms[-1]
    delta = (v_max - v_min) / (num_atoms - 1)
    target = (shift[:, None] + scale[:, None] * atoms[None, :]).clamp(v_min, v_max)
    position = (target - v_min) / delta
    lower = position.floor().long().clamp(0, num_atoms - 1)
    upper = position.ceil().long().clamp(0, num_atoms - 1)
    # on an atom exactly, lower == upper and both weights below vanish: move one neighbour
    exact = lower == upper
    lower = torch.where(exact & (upper > 0), lower - 1, lower)
    upper = torch.where(exact & (lower == upper), upper + 1, upper)
    projected = torch.zeros_like(probs)
    projected.scatter_add_(1, lower, probs * (upper.to(probs.dtype) - position))
    projected.scatter_add_(1, upper, probs * (position - lower.to(probs.dtype)))
    return projected
