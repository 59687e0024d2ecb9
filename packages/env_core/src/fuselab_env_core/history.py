"""Observation history and delay: past frames of a group's terms, kept in a ring per env.

The fused ``observe`` kernel writes each term's current value (noise included) into the
group's *fresh* row; for a group whose terms keep ``history`` frames or are ``delay`` control
steps late, one parallel pass then stores the fresh row in the ring slot of the current step
and writes the output row: for each term, its frames from ``delay + history - 1`` steps ago to
``delay`` steps ago, side by side (term-major, oldest first). A row whose episode has just
started (``episode_step == 0``) fills every slot with its fresh row, so a new episode never
sees the previous one. The slot of a step is written again, not advanced, when a row is
observed twice in one step (a terminal observation, then the new episode's): the step counter
moves once per step (:meth:`ObservationMemory.next_step`). Nothing is allocated per step.
"""

from __future__ import annotations

import numba
import numpy as np

from fuselab_env_core.plan import ObservationGroup


class ObservationMemory:
    """The ring of one observation group and the layout of its output."""

    def __init__(self, group: ObservationGroup, num_envs: int):
        self.group = group
        terms = group.terms
        window = max(t.history + t.delay for t in terms)
        self.ring = np.zeros((window, num_envs, group.width), np.float32)
        starts = group.output_columns()
        self.fresh_col = np.array([t.col for t in terms], np.int64)
        self.size = np.array([t.size for t in terms], np.int64)
        self.history = np.array([t.history for t in terms], np.int64)
        self.delay = np.array([t.delay for t in terms], np.int64)
        self.out_col = np.array([starts[t.entry] for t in terms], np.int64)
        self.step = 0

    def next_step(self) -> None:
        self.step += 1

    def update(self, rows: np.ndarray, fresh: np.ndarray, out: np.ndarray, episode_step) -> None:
        """Store ``fresh`` rows ``rows`` as this step's frame and write their output rows."""
        _remember(
            rows,
            fresh,
            self.ring,
            self.step % len(self.ring),
            episode_step,
            self.fresh_col,
            self.size,
            self.history,
            self.delay,
            self.out_col,
            out,
        )


@numba.njit(parallel=True, cache=True)
def _remember(rows, fresh, ring, slot, episode_step, fresh_col, size, history, delay, out_col, out):
    window = ring.shape[0]
    for k in numba.prange(rows.shape[0]):
        i = rows[k]
        if episode_step[i] == 0:  # a new episode: every frame is its first
            for s in range(window):
                for c in range(fresh.shape[1]):
                    ring[s, i, c] = fresh[i, c]
        else:
            for c in range(fresh.shape[1]):
                ring[slot, i, c] = fresh[i, c]
        for t in range(size.shape[0]):
            for h in range(history[t]):
                age = delay[t] + history[t] - 1 - h  # steps since the frame (oldest first)
                source = (slot - age) % window
                column = out_col[t] + h * size[t]
                for c in range(size[t]):
                    out[i, column + c] = ring[source, i, fresh_col[t] + c]
