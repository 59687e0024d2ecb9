"""Cartpole: keep a pole upright by pushing its cart; a small, fast task for training checks.

Episodes start near upright (angle, position and velocities uniform within ``reset_noise``)
and end when the pole tips past its limit or the cart leaves the rail's safe span.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import fuselab_envs.terms.cartpole  # noqa: F401 - registers the terms the config names
from fuselab_env_core.backend import SimBackend
from fuselab_env_core.entity import Entity
from fuselab_env_core.env import EnvCfg, FusedEnv
from fuselab_env_core.ranges import NonNegativeFloat, check_value


@dataclass
class CartpoleEnvCfg(EnvCfg):
    """Cartpole's ``env`` section: FusedEnv's settings and the reset noise."""

    reset_noise: NonNegativeFloat = 0.1  # uniform +- on cart position, pole angle, velocities


class Cartpole(FusedEnv):
    def __init__(
        self,
        backend: SimBackend,
        terms: Mapping[str, Any],
        *,
        reset_noise: float = 0.1,
        decimation: int = 2,
        episode_length_s: float = 10.0,
        num_threads: int | None = None,
        seed: int = 0,
    ):
        facts = backend.model
        if facts.joint_names != ("slider", "hinge") or facts.nu != 1:
            raise ValueError(
                "robot: Cartpole expects the joints ('slider', 'hinge') and one actuator, got "
                f"joints {facts.joint_names} and {facts.nu} actuators"
            )
        self.reset_noise = check_value("env.reset_noise", reset_noise, NonNegativeFloat)
        super().__init__(
            backend,
            Entity(backend, ("cart", "pole")),
            terms,
            decimation=decimation,
            episode_length_s=episode_length_s,
            default_controls=np.zeros(1, np.float32),
            action_scale=np.ones(1, np.float32),
            num_threads=num_threads,
            seed=seed,
        )

    def reset_state(self, env_ids):
        noise = self.rng.uniform(-self.reset_noise, self.reset_noise, (len(env_ids), 4))
        qpos, qvel = noise[:, :2].astype(np.float32), noise[:, 2:].astype(np.float32)
        return qpos, qvel
