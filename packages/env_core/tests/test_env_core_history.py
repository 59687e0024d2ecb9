"""Observation history and delay (fuselab_env_core.history) against a NumPy twin: term-major
frames oldest first, a new episode back-filled with its first frame, a row observed twice in a
step (a terminal observation, then the new episode's) writing the step's frame once."""

import numpy as np
import pytest
from env_core_test_terms import random_state  # noqa: F401 - registers the test terms

from fuselab_env_core.plan import PlanError
from fuselab_env_core.runtime import FusedTerms

N = 5


def config(history=3, delay=1):
    return {
        "observations": {
            "actor": {
                "history": history,  # the group's, for velocity
                "delay": delay,
                "terms": {
                    "velocity": {"term": "scaled_velocity"},
                    "heights": {
                        "term": "scaled_velocity",
                        "history": 2,
                        "delay": 0,
                        "params": {"scale": 2.0},
                    },
                },
            },
        },
    }


class Twin:
    """The expected output: every step's fresh rows kept per env in Python lists."""

    def __init__(self, terms):
        self.terms = terms  # (size, history, delay, scale) per term
        self.frames: list[list[np.ndarray]] = [[] for _ in range(N)]

    def step(self, fresh: np.ndarray, new_episode: np.ndarray) -> np.ndarray:
        rows = []
        for i in range(N):
            if new_episode[i]:
                self.frames[i] = []
            self.frames[i].append(fresh[i])
            row = []
            for _, history, delay, scale in self.terms:
                for h in range(history):
                    age = delay + history - 1 - h
                    index = max(len(self.frames[i]) - 1 - age, 0)  # back-filled at the start
                    row.append(scale * self.frames[i][index])
            rows.append(np.concatenate(row))
        return np.stack(rows)


def test_history_and_delay_match_their_twin():
    rng = np.random.default_rng(0)
    state = {
        "vel": rng.normal(size=(N, 3)).astype(np.float32),
        "episode_step": np.zeros(N, np.int32),
    }
    fused = FusedTerms.build(config(), state, dt=0.02)
    group = fused.plan.observations["actor"]
    assert [(t.entry, t.history, t.delay) for t in group.terms] == [
        ("velocity", 3, 1),
        ("heights", 2, 0),
    ]
    assert group.output_width == 3 * 3 + 3 * 2 and group.width == 6
    twin = Twin([(3, 3, 1, 1.0), (3, 2, 0, 2.0)])
    for step in range(12):
        state["vel"][:] = rng.normal(size=(N, 3))
        new_episode = state["episode_step"] == 0
        fused.next_step()
        fused.observe(np.array([1, 3]))  # a terminal observation of two rows first...
        fused.observe()  # ...then every row: the step's frame is written, not added, again
        expected = twin.step(state["vel"].astype(np.float64), new_episode)
        np.testing.assert_allclose(fused.buffers.obs["actor"], expected, rtol=1e-6)
        state["episode_step"] += 1
        if step == 6:  # rows 0 and 2 start new episodes
            state["episode_step"][[0, 2]] = 0


def test_history_needs_the_episode_step_and_valid_counts():
    state = {"vel": np.zeros((N, 3), np.float32)}
    with pytest.raises(PlanError, match=r"observations\.actor: history and delay need"):
        FusedTerms.build(config(), state, dt=0.02)
    state["episode_step"] = np.zeros(N, np.int32)
    with pytest.raises(
        PlanError, match=r"observations\.actor\.velocity\.history: expected an int >= 1, got 0"
    ):
        FusedTerms.build(config(history=0), state, dt=0.02)
    with pytest.raises(
        PlanError, match=r"observations\.actor\.velocity\.delay: expected an int >= 0, got -1"
    ):
        FusedTerms.build(config(delay=-1), state, dt=0.02)


def test_a_group_without_history_is_the_kernels_own_buffer():
    state = {"vel": np.ones((N, 3), np.float32), "episode_step": np.zeros(N, np.int32)}
    cfg = {"observations": {"actor": {"terms": {"velocity": {"term": "scaled_velocity"}}}}}
    fused = FusedTerms.build(cfg, state, dt=0.02)
    assert fused.buffers.obs["actor"] is fused.buffers.fresh["actor"]
    assert not fused.memories
