"""Turn the ``info`` of env steps into the metric keys every trainer reports.

* ``Episode/return``, ``Episode/length``: mean over the most recent finished episodes (at least
  ``window`` of them, as rsl_rl's console does), present once an episode has finished;
* ``Episode/finished``: episodes that finished since the last :meth:`EpisodeStats.metrics`;
* ``Reward/<term>``: per-step mean over all envs of each reward term (value * weight * dt);
* ``Termination/<name>``: the fraction of the episodes finished since the last call that this
  termination ended (0 when none finished; a row may count for more than one name);
* ``Curriculum/<name>``: each curriculum's level after the latest step (a task with curricula).

A collector calls :meth:`EpisodeStats.add` after every ``env.step`` and :meth:`metrics` once per
iteration. FastSAC's transition records carry a step's summary instead of its ``info``; they go
in through :meth:`EpisodeStats.add_step`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np


class EpisodeStats:
    def __init__(self, num_envs: int, window: int = 100):
        self.num_envs, self.window = num_envs, window
        # (sum of returns, sum of lengths, episodes) per step with finished episodes, newest last
        self._recent: deque[tuple[float, float, int]] = deque()
        self._recent_count = 0
        self._reward_sums: dict[str, float] = {}
        self._termination_counts: dict[str, float] = {}
        self._levels: dict[str, float] = {}
        self._steps = 0
        self._finished = 0

    def add(self, info: Mapping[str, Any]) -> None:
        """Accumulate one step's ``info`` (FusedEnv's keys)."""
        finished = int(np.size(info.get("reset_envs", ())))
        self.add_step(
            info.get("reward_terms", {}),
            info.get("terminations", {}),
            finished,
            episode_return=info["episode_return"] if finished else 0.0,
            episode_length=info["episode_length"] if finished else 0.0,
            curriculum=info.get("curriculum", {}),
        )

    def add_step(
        self,
        reward_terms: Mapping[str, float],
        terminations: Mapping[str, float],
        finished: int,
        *,
        episode_return: float = 0.0,
        episode_length: float = 0.0,
        curriculum: Mapping[str, float] | None = None,
    ) -> None:
        """Accumulate one step's summary: the mean over all envs of each reward term and
        termination, the episodes that ended, their mean return and length, and the levels of
        the curricula."""
        self._steps += 1
        self._levels.update(curriculum or {})
        for term, value in reward_terms.items():
            self._reward_sums[term] = self._reward_sums.get(term, 0.0) + float(value)
        for name in terminations:
            self._termination_counts.setdefault(name, 0.0)
        if not finished:
            return
        self._finished += finished
        for name, fraction in terminations.items():
            # The env reports the mean over all envs; rows that fire are rows that finished.
            self._termination_counts[name] += float(fraction) * self.num_envs
        self._recent.append(
            (float(episode_return) * finished, float(episode_length) * finished, finished)
        )
        self._recent_count += finished
        while self._recent_count - self._recent[0][2] >= self.window:
            self._recent_count -= self._recent.popleft()[2]

    def metrics(self) -> dict[str, float]:
        """The metrics since the last call (episode means over the recent window); resets the
        per-iteration sums."""
        out: dict[str, float] = {}
        if self._recent_count:
            out["Episode/return"] = sum(r[0] for r in self._recent) / self._recent_count
            out["Episode/length"] = sum(r[1] for r in self._recent) / self._recent_count
        out["Episode/finished"] = float(self._finished)
        steps = max(self._steps, 1)
        for term, total in self._reward_sums.items():
            out[f"Reward/{term}"] = total / steps
        for name, count in self._termination_counts.items():
            out[f"Termination/{name}"] = count / self._finished if self._finished else 0.0
        for name, level in self._levels.items():
            out[f"Curriculum/{name}"] = float(level)
        self._reward_sums = dict.fromkeys(self._reward_sums, 0.0)
        self._termination_counts = dict.fromkeys(self._termination_counts, 0.0)
        self._steps = self._finished = 0
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"recent": [list(r) for r in self._recent]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._recent = deque((float(a), float(b), int(c)) for a, b, c in state["recent"])
        self._recent_count = sum(r[2] for r in self._recent)
