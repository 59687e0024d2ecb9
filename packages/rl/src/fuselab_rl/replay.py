"""A replay buffer of batched env steps, sampled with n-step returns.

Every env keeps its own trajectory: one row per env step holds all ``num_envs`` transitions,
so step ``t`` of env ``e`` follows step ``t - 1`` of the same env. The buffer is circular in
steps (``capacity_steps`` rows); sampling picks (step, env) pairs uniformly and looks up to
``n_step`` steps ahead in that env's trajectory:

    return   = sum_{k <= h} gamma^k r_{t+k}
    discount = gamma^(h+1) if step t+h did not terminate, else 0
    next_obs = the observation after step t+h

where ``h`` is the first step that ended the episode (terminated or truncated), the last
step written so far, or ``n_step - 1``. A truncated step (time-out) keeps bootstrapping from
its terminal observation, which the caller stores as that row's ``next_obs``; a terminated
step does not bootstrap.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)


@dataclass
class NStepBatch:
    obs: dict[str, torch.Tensor]  # group -> (B, D) at the first step
    actions: torch.Tensor  # (B, A) taken at the first step
    returns: torch.Tensor  # (B,) discounted reward sum over the h + 1 steps
    discount: torch.Tensor  # (B,) gamma^(h+1), 0 where the episode terminated
    next_obs: dict[str, torch.Tensor]  # group -> (B, D) after the last step


class NStepReplay:
    def __init__(
        self,
        num_envs: int,
        capacity_steps: int,
        obs_dims: Mapping[str, int],
        action_dim: int,
        n_step: int,
        gamma: float,
        device: torch.device,
    ):
        if not 1 <= n_step <= capacity_steps:  # the config checks gamma and n_step themselves
            raise ValueError(f"n_step: expected 1..capacity_steps ({capacity_steps}), got {n_step}")
        self.num_envs, self.capacity, self.n_step, self.device = (
            num_envs,
            capacity_steps,
            n_step,
            device,
        )
        shape = (capacity_steps, num_envs)
        self.obs = {g: torch.zeros(*shape, d, device=device) for g, d in obs_dims.items()}
        self.next_obs = {g: torch.zeros(*shape, d, device=device) for g, d in obs_dims.items()}
        self.actions = torch.zeros(*shape, action_dim, device=device)
        self.rewards = torch.zeros(shape, device=device)
        self.terminated = torch.zeros(shape, dtype=torch.bool, device=device)
        self.ended = torch.zeros(shape, dtype=torch.bool, device=device)  # terminated|truncated
        self.steps_written = 0  # absolute step count; row = step % capacity
        self._discounts = gamma ** torch.arange(n_step + 1, device=device, dtype=torch.float32)
        self._offsets = torch.arange(n_step, device=device)
        tensors = [*self.obs.values(), *self.next_obs.values(), self.actions, self.rewards]
        mib = sum(t.nbytes for t in [*tensors, self.terminated, self.ended]) / 2**20
        log.info("replay: %d steps x %d envs (%.1f MiB on %s)", *shape, mib, device)

    def add(
        self,
        obs: Mapping[str, torch.Tensor],
        actions: torch.Tensor,
        rewards: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        next_obs: Mapping[str, torch.Tensor],
    ) -> None:
        """Store one env step of every env; each argument is (num_envs, ...), any device."""
        row = self.steps_written % self.capacity
        for group, buffer in self.obs.items():
            buffer[row].copy_(obs[group])
            self.next_obs[group][row].copy_(next_obs[group])
        self.actions[row].copy_(actions)
        self.rewards[row].copy_(rewards)
        self.terminated[row].copy_(terminated)
        self.ended[row].copy_(truncated)
        self.ended[row] |= self.terminated[row]
        self.steps_written += 1

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> NStepBatch:
        """``batch_size`` transitions drawn uniformly over the stored (step, env) pairs."""
        if self.steps_written == 0:
            raise RuntimeError("replay: sample() on an empty buffer")
        oldest = max(0, self.steps_written - self.capacity)
        kwargs = {"device": self.device, "generator": generator}
        envs = torch.randint(0, self.num_envs, (batch_size,), **kwargs)
        steps = torch.randint(oldest, self.steps_written, (batch_size,), **kwargs)
        return self.gather(steps, envs)

    def gather(self, steps: torch.Tensor, envs: torch.Tensor) -> NStepBatch:
        """The n-step transitions that start at absolute ``steps`` of ``envs`` (B,)."""
        written = self.steps_written
        window = steps[:, None] + self._offsets  # (B, n) absolute steps, maybe past the newest
        rows = window % self.capacity
        env_rows = envs[:, None].expand_as(rows)
        # the window stops at the first episode end, at the newest step, or after n steps
        last = self.ended[rows, env_rows] | (window + 1 >= written)
        last[:, -1] = True
        horizon = last.float().argmax(dim=1)  # the first True
        included = self._offsets[None, :] <= horizon[:, None]
        rewards = torch.where(included, self.rewards[rows, env_rows], 0.0)
        returns = (rewards * self._discounts[:-1]).sum(1)
        end_rows = rows.gather(1, horizon[:, None]).squeeze(1)
        bootstrap = ~self.terminated[end_rows, envs]
        discount = self._discounts[horizon + 1] * bootstrap
        first_rows = steps % self.capacity
        return NStepBatch(
            obs={g: b[first_rows, envs] for g, b in self.obs.items()},
            actions=self.actions[first_rows, envs],
            returns=returns,
            discount=discount,
            next_obs={g: b[end_rows, envs] for g, b in self.next_obs.items()},
        )
