"""Learner sizes that fit the learner's device.

Keys of ``algo`` set to ``auto`` (networks, batch sizes) take their value when the trainer
starts from ``algo.learner_sizes.<kind>``, where kind is ``cuda`` for a CUDA learner and
``cpu`` for any other; a task's own table, ``algo.per_task.<task_name>.learner_sizes.<kind>``,
comes first. A key given a value keeps it, and the run's config and checkpoints hold the values
chosen, so a resume rebuilds the same networks whatever the device is then.
"""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

AUTO = "auto"
TABLES = ("learner_sizes", "per_task")  # the tables themselves are never sized


def device_kind(device: torch.device | str) -> str:
    return "cuda" if torch.device(device).type == "cuda" else "cpu"


def auto_keys(algo: DictConfig | dict[str, Any]) -> list[str]:
    """The dotted keys of ``algo`` (outside the tables) whose value is ``auto``."""
    tree = algo if isinstance(algo, dict) else OmegaConf.to_container(algo, resolve=False)
    leaves = _leaves(tree)
    return [key for key, value in leaves if value == AUTO and key.split(".")[0] not in TABLES]


def choose_learner_sizes(cfg: DictConfig, device: torch.device | str) -> dict[str, Any]:
    """Replace each ``auto`` of ``cfg.algo`` by the size for a learner on ``device``; returns
    {dotted key: value} of what was chosen."""
    algo, kind = cfg.algo, device_kind(device)
    tables = (f"per_task.{cfg.task_name}.learner_sizes.{kind}", f"learner_sizes.{kind}")
    chosen: dict[str, Any] = {}
    for key in auto_keys(algo):
        value = next(
            (v for t in tables if (v := OmegaConf.select(algo, f"{t}.{key}")) is not None), None
        )
        if value is None:
            raise ValueError(
                f"algo.{key}: 'auto', but algo.learner_sizes.{kind} has no {key}; "
                f"give algo.{key} a value or add it to the table"
            )
        OmegaConf.update(algo, key, value)
        chosen[key] = _plain(value)
    return chosen


def describe_sizes(cfg: DictConfig, chosen: dict[str, Any], device: torch.device | str) -> str:
    """One log line: every sized key of the device's table, chosen or set in the config."""
    kind = device_kind(device)
    table = OmegaConf.select(cfg.algo, f"learner_sizes.{kind}")
    sized = [key for key, _ in _leaves(OmegaConf.to_container(table))] if table else []
    sized += [key for key in chosen if key not in sized]
    values = ", ".join(
        f"{key} {_plain(OmegaConf.select(cfg.algo, key))}"
        f"{'' if key in chosen else ' (set in the config)'}"
        for key in sized
    )
    return f"{kind} learner: {values}" if values else f"{kind} learner: sizes set in the config"


def keep_saved_sizes(cfg: DictConfig, saved_algo: dict[str, Any]) -> None:
    """On a resume, keys left ``auto`` take the values the resumed run chose (its weights have
    those shapes, whatever the device or the table says now)."""
    saved = OmegaConf.create(saved_algo)
    for key in auto_keys(cfg.algo):
        value = OmegaConf.select(saved, key)
        if value is not None:
            OmegaConf.update(cfg.algo, key, value)


def _leaves(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if not isinstance(tree, dict):
        return [(prefix, tree)]
    return [
        leaf
        for key, value in tree.items()
        for leaf in _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    ]


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
