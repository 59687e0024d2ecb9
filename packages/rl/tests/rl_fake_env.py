"""A tiny deterministic env with FusedEnv's interface (no physics, no kernel) for fast PPO and
runner tests, and a helper that installs it in place of the registry's make_env."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from fuselab_env_core.curriculum import Curriculum, curriculum
from fuselab_env_core.env import StepResult
from fuselab_env_core.ranges import Fraction


class FakeEnv:
    """A damped 2-D point pushed by 2 actions: reward for staying near the origin; episodes end
    when the point leaves |x| < 2 (a failure) or after ``episode_steps`` (a time-out)."""

    actor_dim, critic_dim, action_dim = 3, 4, 2

    def __init__(self, num_envs: int = 8, episode_steps: int = 10, seed: int = 0):
        self.num_envs = num_envs
        self.step_dt = 0.02
        self.backend = SimpleNamespace(
            model=SimpleNamespace(nu=self.action_dim), close=self._close_backend
        )
        self.backend_closed = False
        self.max_episode_steps = np.full(num_envs, episode_steps, np.int32)
        self.rng = np.random.default_rng(seed)
        self.pos = np.zeros((num_envs, 2), np.float32)
        self.vel = np.zeros((num_envs, 2), np.float32)
        self.steps = np.zeros(num_envs, np.int32)
        self.returns = np.zeros(num_envs, np.float32)
        self.obs = {
            "actor": np.zeros((num_envs, self.actor_dim), np.float32),
            "critic": np.zeros((num_envs, self.critic_dim), np.float32),
        }
        self.terminal_obs = {k: np.zeros_like(v) for k, v in self.obs.items()}
        # FusedTerms' noise query: this env adds no observation noise
        self.terms = SimpleNamespace(
            observation_noise_std=lambda group: np.zeros(self.obs[group].shape[1], np.float32)
        )
        self.step_calls = 0
        self.reset_all()

    def reset_all(self) -> dict[str, np.ndarray]:
        self._reset(np.arange(self.num_envs))
        return self.obs

    def step(self, actions: np.ndarray) -> StepResult:
        assert actions.shape == (self.num_envs, self.action_dim) and actions.dtype == np.float32
        self.step_calls += 1
        self.vel = 0.9 * self.vel + 0.1 * np.clip(actions, -3, 3)
        self.pos = self.pos + self.vel
        self.steps += 1
        alive = np.full(self.num_envs, 0.02, np.float32)
        distance = -0.01 * (self.pos**2).sum(axis=1).astype(np.float32)
        reward = alive + distance
        self.returns += reward
        terminated = np.abs(self.pos).max(axis=1) > 2.0
        truncated = (self.steps >= self.max_episode_steps) & ~terminated
        self._observe()
        info: dict[str, Any] = {
            "reward_terms": {"alive": float(alive.mean()), "distance": float(distance.mean())},
            "terminations": {
                "left_box": float(terminated.mean()),
                "time_out": float(truncated.mean()),
            },
        }
        done = np.flatnonzero(terminated | truncated)
        if done.size:
            for group, obs in self.obs.items():
                self.terminal_obs[group][done] = obs[done]
            info["episode_return"] = float(self.returns[done].mean())
            info["episode_length"] = float(self.steps[done].mean())
            self._reset(done)
        info["reset_envs"] = done
        info["terminal_obs"] = self.terminal_obs
        return StepResult(self.obs, reward, terminated, truncated, info)

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain values: what a weights-only torch.load reads back."""
        arrays = {"pos": self.pos, "vel": self.vel, "steps": self.steps, "returns": self.returns}
        return {
            **{k: torch.from_numpy(v.copy()) for k, v in arrays.items()},
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pos, self.vel = state["pos"].numpy().copy(), state["vel"].numpy().copy()
        self.steps, self.returns = state["steps"].numpy().copy(), state["returns"].numpy().copy()
        self.rng.bit_generator.state = state["rng"]
        self._observe()

    def close(self) -> None:
        """Release the backend, as FusedEnv.close does."""
        self.backend.close()

    def _close_backend(self) -> None:
        self.backend_closed = True

    def _reset(self, rows: np.ndarray) -> None:
        self.pos[rows] = self.rng.uniform(-0.5, 0.5, (rows.size, 2))
        self.vel[rows] = 0.0
        self.steps[rows] = 0
        self.returns[rows] = 0.0
        self._observe()

    def _observe(self) -> None:
        self.obs["actor"][:, :2] = self.pos
        self.obs["actor"][:, 2] = self.steps / self.max_episode_steps
        self.obs["critic"][:, :2] = self.pos
        self.obs["critic"][:, 2:] = self.vel


SMALL_PPO = [
    "algo.policy.actor_hidden_dims=[16,16]",
    "algo.policy.critic_hidden_dims=[16,16]",
    "algo.num_steps_per_env=8",
    "algo.num_mini_batches=2",
    "algo.num_learning_epochs=2",
]


def use_fake_env(monkeypatch, episode_steps: int = 10) -> list[FakeEnv]:
    """Make ``fuselab_envs.registry.make_env`` build FakeEnvs; returns the list of those built."""
    from fuselab_envs import registry

    built: list[FakeEnv] = []

    def make_env(cfg):
        env = FakeEnv(cfg.num_envs, episode_steps, seed=cfg.seed)
        built.append(env)
        return env

    monkeypatch.setattr(registry, "make_env", make_env)
    return built


def cartpole_run_overrides(run_dir, *extra: str) -> list[str]:
    """A small, quiet cartpole run into ``run_dir`` (one thread, no exports, no plot)."""
    return [
        "task=cartpole",
        "num_envs=8",
        f"run_dir={run_dir}",
        "progress=false",
        "export_onnx=false",
        "plot=false",
        "threads=1",
        *extra,
    ]


@curriculum("test_step_levels")
class StepLevels(Curriculum):
    """The level rises by ``per_step`` every env step, from ``start``."""

    def __init__(self, context, start: Fraction = 0.0, per_step: Fraction = 0.01):
        self.level, self.per_step = start, per_step

    def advance(self, env):
        self.level = min(self.level + self.per_step, 1.0)


STEP_LEVELS = "+curriculum.levels={term: test_step_levels, params: {per_step: 0.01}}"
