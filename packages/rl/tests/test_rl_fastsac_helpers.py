"""Helpers shared by the FastSAC tests (no tests here): a composed config (task + algo=fastsac)
without the runner, a random policy's return, our /dev/shm segments, process liveness."""

from __future__ import annotations

import os

# torch's and Numba's shared OpenMP runtime reads this once, when loaded: spinning idle threads
# slow everything down by an order of magnitude on a 2-core machine. fuselab_rl asks for it on
# import too; this module is imported before torch by the FastSAC tests (its name sorts first).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from importlib.resources import files  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from fuselab_envs import registry  # noqa: E402


class Threads:
    """A stand-in for the runner's ThreadBudget: the trainer reads ``total``."""

    def __init__(self, total: int = 2):
        self.total = total


def compose(
    task: str = "cartpole", env: tuple[str, ...] = (), algo: tuple[str, ...] = ()
) -> DictConfig:
    cfg = registry.compose(task, ["num_threads=1", *env])
    OmegaConf.set_struct(cfg, False)
    cfg.algo = OmegaConf.load(str(files("fuselab_rl.configs") / "algo" / "fastsac.yaml"))
    cfg.merge_with(OmegaConf.from_dotlist([f"algo.{item}" for item in algo]))
    return cfg


def random_policy_return(cfg: DictConfig, steps: int = 400, seed: int = 1) -> float:
    """Mean return of the episodes a uniform random policy finishes in ``steps`` env steps."""
    env = registry.make_env(cfg)
    rng = np.random.default_rng(seed)
    returns, counts = 0.0, 0
    for _ in range(steps):
        actions = rng.uniform(-1, 1, (env.num_envs, env.backend.model.nu)).astype(np.float32)
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
