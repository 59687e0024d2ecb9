"""Learner sizes that fit the learner's device.

Keys of ``algo`` set to ``auto`` (networks, batch sizes) take their value when the trainer
starts from ``algo.learner_sizes.<kind>``, where kind is ``cuda`` for a CUDA learner and
``cpu`` for any other. A key given a value keeps it (a task that needs other sizes sets them in
its ``algo_task`` file), and the run's config and checkpoints hold the values chosen, so a
resume rebuilds the same networks whatever the device is then. Every ``auto`` in ``algo`` is
such a size: no other key takes ``auto`` as its value.
"""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from fuselab_envs.registry import flat_items

AUTO = "auto"
TABLES = ("learner_sizes",)  # the tables themselves are never sized
_ABSENT = object()  # a key a table does not hold (a null it holds is a value)


def device_kind(device: torch.device | str) -> str:
    return "cuda" if torch.device(device).type == "cuda" else "cpu"


def auto_keys(algo: DictConfig | dict[str, Any]) -> list[str]:
    """The dotted keys of ``algo`` (outside the tables) whose value is ``auto``."""
    tree = algo if isinstance(algo, dict) else OmegaConf.to_container(algo, resolve=False)
    leaves = flat_items(tree)
    return [key for key, value in leaves if value == AUTO and key.split(".")[0] not in TABLES]


def check_sized(algo: dict[str, Any]) -> None:
    """An algorithm's config as its trainer reads it: every ``auto`` already chosen."""
    if unsized := auto_keys(algo):
        raise ValueError(
            f"algo.{unsized[0]}: 'auto' is chosen for the learner's device when the trainer "
            "starts (choose_learner_sizes); here expected a value"
        )


def choose_learner_sizes(cfg: DictConfig, device: torch.device | str) -> dict[str, Any]:
    """Replace each ``auto`` of ``cfg.algo`` by the size for a learner on ``device``; returns
    {dotted key: value} of what was chosen. A table key that ``algo`` has not is an error (a
    misspelt size would otherwise never be used)."""
    algo, table = cfg.algo, _table(device)
    for key in _table_keys(cfg, device):
        if OmegaConf.select(algo, key, default=_ABSENT) is _ABSENT:
            raise ValueError(f"algo.{table}.{key}: algo has no key {key} to size")
    chosen: dict[str, Any] = {}
    for key in auto_keys(algo):
        value = OmegaConf.select(algo, f"{table}.{key}", default=_ABSENT)
        if value is _ABSENT:
            raise ValueError(
                f"algo.{key}: 'auto', but algo.{table} does not hold {key}; give algo.{key} a "
                "value or add it to the table"
            )
        OmegaConf.update(algo, key, value)
        chosen[key] = _plain(value)
    return chosen


def describe_sizes(cfg: DictConfig, chosen: dict[str, Any], device: torch.device | str) -> str:
    """One log line: every sized key of the device's tables, chosen or set in the config."""
    kind = device_kind(device)
    sized = list(dict.fromkeys([*_table_keys(cfg, device), *chosen]))  # once each, table order
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
        value = OmegaConf.select(saved, key, default=_ABSENT)
        if value is not _ABSENT:
            OmegaConf.update(cfg.algo, key, value)


def _table(device: torch.device | str) -> str:
    """Where an ``auto`` is looked up: the table of the device's kind."""
    return f"learner_sizes.{device_kind(device)}"


def _table_keys(cfg: DictConfig, device: torch.device | str) -> list[str]:
    """The dotted keys of every size the device's table holds."""
    return [key for key, _ in flat_items(_container(OmegaConf.select(cfg.algo, _table(device))))]


def _container(node: Any) -> Any:
    """A selected config node as plain containers ({} for none)."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else {}


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
