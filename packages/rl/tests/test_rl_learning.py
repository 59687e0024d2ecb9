"""PPO learns: on the cartpole task a random policy keeps the pole up for ~0.7 s (return ~0.6
of a possible ~10); PPO must reach a return of 5 within 80 iterations of 64 envs (~30 s)."""

from __future__ import annotations

import torch

from fuselab_rl.ppo import PPOTrainer
from fuselab_rl.runner import compose_config
from fuselab_rl.threads import ThreadBudget

RETURN_GOAL, MAX_ITERATIONS = 5.0, 80


def test_ppo_balances_the_cartpole_within_a_bounded_number_of_iterations(tmp_path):
    budget = ThreadBudget.resolve(None)
    budget.apply_torch()
    cfg = compose_config(["task=cartpole", "num_envs=64", f"num_threads={budget.physics}"])
    trainer = PPOTrainer(cfg, torch.device("cpu"), budget, tmp_path)
    returns = []
    try:
        for _ in range(MAX_ITERATIONS):
            metrics = trainer.iterate()
            returns.append(metrics.get("Episode/return", float("nan")))
            if returns[-1] >= RETURN_GOAL:
                break
    finally:
        trainer.close()
    assert returns[0] < 1.5, returns[:3]  # it starts where a random policy is
    assert returns[-1] >= RETURN_GOAL, f"after {len(returns)} iterations: {returns[-5:]}"
