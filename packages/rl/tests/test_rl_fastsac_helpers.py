"""Helpers shared by the FastSAC tests (no tests here): the composed config, a thread budget,
a random policy's return, our /dev/shm segments, process liveness.

The FastSAC tests import this module before torch (its name sorts first), so ``fuselab_rl``
loads first and asks for sleeping OpenMP threads before torch loads the runtime: spinning idle
threads slow training down by an order of magnitude on a 2-core machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from fuselab_envs import registry
from fuselab_rl.learner_sizes import choose_learner_sizes
from fuselab_rl.runner import compose_config
from fuselab_rl.threads import ThreadBudget


def threads(total: int) -> ThreadBudget:
    return ThreadBudget(total=total, physics=total, kernel=total, torch=total)


def compose(
    task: str = "cartpole", env: tuple[str, ...] = (), algo: tuple[str, ...] = ()
) -> DictConfig:
    """The runner's composed config for ``task`` with algo=fastsac, the learner sized for a
    CPU; one thread for physics."""
    overrides = [f"task={task}", "algo=fastsac", "num_threads=1", *env]
    cfg = compose_config([*overrides, *(f"algo.{item}" for item in algo)])
    choose_learner_sizes(cfg, "cpu")
    return cfg


def random_policy_return(cfg: DictConfig, steps: int = 400, seed: int = 1) -> float:
    """Mean return of the episodes a uniform random policy finishes in ``steps`` env steps."""
    env = registry.make_env(cfg)
    rng = np.random.default_rng(seed)
    returns, counts = 0.0, 0
    for _ in range(steps):
        actions = rng.uniform(-1, 1, (env.num_envs, env.action_dim)).astype(np.float32)
        result = env.step(actions)
        done = result.info["reset_envs"].size
        if done:
            returns += result.info["episode_return"] * done
            counts += done
    return returns / counts


def our_segments(token: str = "") -> list[str]:
    """Shared memory segments of FastSAC in /dev/shm (optionally only names containing token)."""
    return sorted(
        name
        for name in os.listdir("/dev/shm")
        if name.startswith("fuselab_fastsac") and token in name
    )


def process_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (exited, or a zombie nobody has reaped yet)."""
    status = Path(f"/proc/{pid}/status")
    try:
        text = status.read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in text or "\nState:\tX" in text
