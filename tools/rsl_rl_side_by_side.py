"""rsl-rl-lib's PPO on a fuselab env with fuselab's PPO settings, scored by fuselab-eval.

Trains rsl_rl's OnPolicyRunner for a wall-clock budget on the env that ``fuselab-train`` builds
from the same overrides (task, num_envs, seed, threads, backend, learner device), every
``algo.*`` setting of fuselab's PPO mapped one to one; saves ``model_<iteration>.pt`` every save
interval and at the end, then scores each checkpoint with fuselab-eval's evaluator (256 envs,
10 s, seed 0). RUN_DIR gets ``eval.json`` (rows as tools/learning_curves.py writes them) and
``metrics.jsonl`` and ``config.yaml`` as fuselab-train writes them, so the two runs draw together:

    uv run --group bench python tools/rsl_rl_side_by_side.py --minutes 20 --out runs/rsl_rl_walk
    uv run fuselab-train task=g1_walk_flat run_dir=runs/fuselab_walk  # Ctrl-C at 20 min
    uv run python tools/learning_curves.py runs/fuselab_walk -o walk_curves.png
    uv run python -m fuselab_rl.plot runs/fuselab_walk runs/rsl_rl_walk -o walk_compare.png

Compare the eval rows at equal ``train_wall_s``. What still differs is rsl_rl's recipe, not a
setting:

* time-outs: rsl_rl adds gamma * V(s_t), the value of the observation the last action was taken
  in, to the reward; fuselab adds gamma * V of the episode's true terminal observation;
* normalizers: fuselab seeds them with one extra rollout before the first update; rsl_rl starts
  from mean 0, variance 1 (after that both merge each rollout once its update is done);
* gradient clipping: rsl_rl clips the actor's and the critic's gradient norms separately,
  fuselab clips the norm of all parameters together;
* mini-batches: rsl_rl draws one permutation per update for all its epochs, fuselab one per epoch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import fuselab_rl  # noqa: F401  (first: OpenMP threads then sleep, not spin, once torch loads)

# isort: split
# rsl-rl-lib and tensordict (its dependency, imported here too) come with the `bench` group,
# which nox's lint session does not install
# pyright: reportMissingImports=false
import torch
from omegaconf import DictConfig, OmegaConf
from rsl_rl.env import VecEnv
from rsl_rl.runners import OnPolicyRunner
from tensordict import TensorDict

from fuselab_envs.registry import make_env
from fuselab_rl.distributed import SINGLE
from fuselab_rl.episode_stats import EpisodeStats
from fuselab_rl.evaluate import evaluate_policy, evaluator_of
from fuselab_rl.ppo import POLICY_KEYS, PPOCfg, network_kwargs
from fuselab_rl.runner import compose_config, resolve_device, resolve_threads, validate_config

log = logging.getLogger("rsl_rl_side_by_side")

# Where each algo.* setting of fuselab goes in rsl_rl: the runner, PPO(...) (same names), the
# VecEnv (action clipping, as Isaac Lab's wrapper does it) or the two MLPModels.
RUNNER_KEYS = ("num_steps_per_env",)
PPO_KEYS = (
    "num_learning_epochs",
    "num_mini_batches",
    "learning_rate",
    "schedule",
    "desired_kl",
    "gamma",
    "lam",
    "clip_param",
    "value_loss_coef",
    "use_clipped_value_loss",
    "entropy_coef",
    "max_grad_norm",
)
VEC_ENV_KEYS = ("clip_actions",)
# fuselab-only terms, compared only when switched off
OFF_IN_RSL_RL = {
    "smoothness_coef": 0.0,
    "spatial_smoothness_coef": 0.0,
    "entropy_decay_over": None,
    "entropy_coef_final": 0.0,
}
MODEL_KEYS = (
    "actor_hidden_dims",
    "critic_hidden_dims",
    "activation",
    "init_noise_std",
    "actor_obs_normalization",
    "critic_obs_normalization",
)
ACTIVATIONS = {"leaky_relu": "lrelu"}  # fuselab's name -> rsl_rl's, where they differ


class FusedVecEnv(VecEnv):
    """rsl_rl's VecEnv over a FusedEnv: CPU tensors, observation groups "policy" (fuselab's
    actor group) and "critic"."""

    def __init__(self, cfg: DictConfig, clip_actions: float | None):
        self.env = make_env(cfg)
        self.num_envs = self.env.num_envs
        self.num_actions = self.env.action_dim
        self.max_episode_length = int(self.env.max_episode_steps[0])
        self.episode_length_buf = torch.from_numpy(self.env.episode_step)  # the env's own counter
        self.device = "cpu"
        self.cfg = OmegaConf.to_container(cfg, resolve=True)
        self.clip_actions = clip_actions
        # fuselab's episode metrics, as its trainer reports them (rsl_rl's logger stays off: with
        # a log_dir every learn() call would open a writer and save a checkpoint)
        self.stats = EpisodeStats(self.num_envs)
        self.obs = self._wrap(self.env.reset_all())

    def get_observations(self) -> TensorDict:
        return self.obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        if self.clip_actions is not None:  # rsl_rl stores the unclipped actions, as fuselab does
            actions = actions.clamp(-self.clip_actions, self.clip_actions)
        result = self.env.step(actions.numpy())
        self.stats.add(result.info)
        self.obs = self._wrap(result.obs)
        dones = result.terminated | result.truncated
        # rsl_rl bootstraps a time-out itself, from V(s_t) of the observation the action was
        # taken in; fuselab's trainer from V(info["terminal_obs"]), which rsl_rl cannot take.
        time_outs = result.truncated & ~result.terminated
        reward = torch.tensor(result.reward)
        extras = {"time_outs": torch.from_numpy(time_outs)}
        return self.obs, reward, torch.from_numpy(dones).long(), extras

    def close(self) -> None:
        self.env.close()

    def _wrap(self, obs: dict) -> TensorDict:
        # Copies: the env reuses its buffers, and rsl_rl copies the observation an action was
        # taken in into its storage only after env.step has run.
        groups = {"policy": torch.tensor(obs["actor"]), "critic": torch.tensor(obs["critic"])}
        return TensorDict(groups, batch_size=[self.num_envs], device="cpu")


def rsl_rl_train_cfg(algo_cfg: DictConfig, save_interval: int) -> tuple[dict, float | None]:
    """OnPolicyRunner's train_cfg from fuselab's ``algo`` (every value checked by fuselab
    first), and the action clip the VecEnv applies."""
    algo = dataclasses.asdict(PPOCfg.from_config(algo_cfg))  # every setting, defaults filled
    policy = network_kwargs(algo_cfg)
    for key, off in OFF_IN_RSL_RL.items():
        if algo[key] != off:
            raise ValueError(
                f"algo.{key}: {algo[key]} set, but rsl_rl has no such term; "
                f"add algo.{key}={off} to compare the two PPOs"
            )
    mapped = (*RUNNER_KEYS, *PPO_KEYS, *VEC_ENV_KEYS, *OFF_IN_RSL_RL)
    unmapped = [f"algo.{k}" for k in algo if k not in mapped]
    unmapped += [f"algo.policy.{k}" for k in POLICY_KEYS if k not in MODEL_KEYS]
    if unmapped:
        raise ValueError(f"{unmapped[0]}: a fuselab PPO setting with no rsl_rl counterpart")
    missing = [f"algo.policy.{k}" for k in MODEL_KEYS if k not in policy]
    if missing:
        raise ValueError(f"{missing[0]}: not set, and rsl_rl's default is not fuselab's; set it")

    def model(hidden_dims: str, normalization: str) -> dict:
        return {
            "class_name": "rsl_rl.models:MLPModel",
            "hidden_dims": list(policy[hidden_dims]),
            "activation": ACTIVATIONS.get(policy["activation"], policy["activation"]),
            "obs_normalization": policy[normalization],
        }

    actor = model("actor_hidden_dims", "actor_obs_normalization")
    actor["distribution_cfg"] = {  # fuselab's: a state-independent, learned log std
        "class_name": "rsl_rl.modules:GaussianDistribution",
        "init_std": policy["init_noise_std"],
        "std_type": "log",
    }
    train_cfg = {
        "num_steps_per_env": algo["num_steps_per_env"],
        "save_interval": save_interval,
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "algorithm": {
            "class_name": "rsl_rl.algorithms:PPO",
            **{key: algo[key] for key in PPO_KEYS},
            # fuselab normalizes advantages over the whole rollout: rsl_rl's default, kept
            "normalize_advantage_per_mini_batch": False,
        },
        "actor": actor,
        "critic": model("critic_hidden_dims", "critic_obs_normalization"),
    }
    return train_cfg, algo["clip_actions"]


def train(runner: OnPolicyRunner, run_dir: Path, minutes: float, save_interval: int) -> list[Path]:
    """Iterations until ``minutes`` of wall clock have passed; metrics.jsonl as fuselab-train
    writes it; a checkpoint every ``save_interval`` iterations and after the last."""
    env = runner.env
    assert isinstance(env, FusedVecEnv)
    steps_per_iteration = runner.cfg["num_steps_per_env"] * env.num_envs
    saved: list[Path] = []
    iteration, wall_s = 0, 0.0
    started = time.perf_counter()
    while wall_s < 60.0 * minutes:
        iteration_started = time.perf_counter()
        runner.learn(num_learning_iterations=1)
        iteration += 1
        runner.current_learning_iteration = iteration  # learn() leaves it at the one it ran
        wall_s = time.perf_counter() - started
        iteration_s = time.perf_counter() - iteration_started
        record = {
            "iteration": iteration,
            "wall_s": round(wall_s, 3),
            "env_steps": iteration * steps_per_iteration,
            **env.stats.metrics(),
            "Policy/learning_rate": runner.alg.learning_rate,
            "Policy/noise_std": runner.alg.get_policy().output_std.mean().item(),
            "Perf/steps_per_s": steps_per_iteration / iteration_s,
        }
        with open(run_dir / "metrics.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")
        log.info(
            "it %d | return %.2f len %.0f | %.0f steps/s | lr %.3g std %.2f | %.0f s",
            iteration,
            record.get("Episode/return", float("nan")),
            record.get("Episode/length", float("nan")),
            record["Perf/steps_per_s"],
            record["Policy/learning_rate"],
            record["Policy/noise_std"],
            wall_s,
        )
        if iteration % save_interval == 0 or wall_s >= 60.0 * minutes:
            path = run_dir / f"model_{iteration}.pt"
            runner.save(
                str(path), infos={k: record[k] for k in ("iteration", "env_steps", "wall_s")}
            )
            saved.append(path)
    return saved


def mean_action(model: torch.nn.Module, clip: float | None) -> Callable:
    """fuselab-eval's policy contract (actor observations (B, D) -> actions (B, A)) over rsl_rl's
    inference policy (its normalizer, its MLP, the distribution's mean)."""

    def act(actor_obs: torch.Tensor) -> torch.Tensor:
        actions = model(TensorDict({"policy": actor_obs}, batch_size=[actor_obs.shape[0]]))
        return actions if clip is None else actions.clamp(-clip, clip)

    return act


def evaluate_checkpoints(
    runner: OnPolicyRunner, cfg: DictConfig, paths: list[Path], clip: float | None
) -> list[dict]:
    """fuselab-eval's measurement of each checkpoint's mean action, one learning_curves row
    each."""
    rows = []
    for path in paths:
        infos = runner.load(str(path), load_cfg={"actor": True}, map_location="cpu")
        policy = mean_action(runner.get_inference_policy(device="cpu"), clip)
        row = {
            "task": cfg.task_name,
            "checkpoint": str(path),
            "iteration": infos["iteration"],
            "env_steps": infos["env_steps"],
            "train_wall_s": infos["wall_s"],
            **evaluate_policy(cfg, policy),  # fuselab-eval's defaults
        }
        rows.append(row)
        log.info("%s: %s", path.name, json.dumps(row["metrics"]))
    return rows


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, required=True, help="training wall clock")
    parser.add_argument("--out", type=Path, required=True, help="the run directory to write")
    parser.add_argument("--task", default="g1_walk_flat")
    parser.add_argument("--save-interval", type=int, help="default: the config's save_interval")
    parser.add_argument("overrides", nargs="*", help="fuselab-train overrides: num_envs=1024 ...")
    args = parser.parse_args()
    cfg = compose_config([f"task={args.task}", *args.overrides])
    validate_config(cfg)
    if cfg.algo.name != "ppo":
        parser.error(f"algo: rsl_rl's runner here is PPO; got algo={cfg.algo.name}")
    try:
        evaluator_of(cfg)
    except ValueError as error:
        parser.error(f"--task: {error}")
    if (args.out / "metrics.jsonl").exists():
        parser.error(f"--out: '{args.out}' already holds a run; give a new directory")
    save_interval = args.save_interval or cfg.save_interval
    train_cfg, clip = rsl_rl_train_cfg(cfg.algo, save_interval)  # checked before the env is built
    resolve_threads(cfg, SINGLE)  # the runner's budget: torch's pool, cfg.num_threads for the env
    device = resolve_device(cfg.device)

    args.out.mkdir(parents=True, exist_ok=True)
    record = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(record, dict)
    record["algo"]["name"] = f"rsl-rl-lib {version('rsl-rl-lib')} ppo"  # fuselab_rl.plot's label
    (args.out / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(record)))
    torch.manual_seed(cfg.seed)  # initial weights, action noise, mini-batch order
    env = FusedVecEnv(cfg, clip)
    try:
        runner = OnPolicyRunner(env, train_cfg, log_dir=None, device=str(device))
        log.info(
            "rsl-rl-lib %s: %d envs, learner on %s", version("rsl-rl-lib"), env.num_envs, device
        )
        saved = train(runner, args.out, args.minutes, save_interval)
    finally:
        env.close()  # the evaluator builds its own env
    rows = evaluate_checkpoints(runner, cfg, saved, clip)
    (args.out / "eval.json").write_text(json.dumps(rows, indent=2) + "\n")
    log.info("wrote %s (%d checkpoints)", args.out / "eval.json", len(rows))


if __name__ == "__main__":
    main()
