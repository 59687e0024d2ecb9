"""tools/walk_gait.py: a kind's gait from its velocities, contacts and foot heights."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

TOOL = Path(__file__).parents[1] / "tools" / "walk_gait.py"
_spec = importlib.util.spec_from_file_location("walk_gait", TOOL)
assert _spec and _spec.loader
walk_gait = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(walk_gait)


def test_speed_along_the_command_air_time_touchdowns_and_swing_height():
    # 4 steps of 0.5 s, 2 envs, 1 foot each: env 0 lifts its foot for two steps and lands once,
    # env 1 stands on it; env 0 goes forward at 0.3 m/s of 0.5 asked, env 1 right at 0.2 of 0.4.
    planar = np.tile(np.array([[0.3, 0.1], [0.0, -0.2]]), (4, 1, 1))
    asked = np.array([[0.5, 0.0], [0.0, -0.4]])
    touching = np.array([[[True], [True]], [[False], [True]], [[False], [True]], [[True], [True]]])
    height = np.zeros((4, 2, 1))
    height[1:3, 0, 0] = [0.05, 0.10]
    parts = walk_gait.gait_parts(planar, asked, touching, height, step_dt=0.5)
    assert parts["asked_mps"] == pytest.approx(0.45)
    assert parts["reached_mps"] == pytest.approx(0.25)  # the sideways 0.1 of env 0 not counted
    assert parts["planar_speed_mps"] == pytest.approx((math.hypot(0.3, 0.1) + 0.2) / 2)
    assert parts["air_fraction"] == pytest.approx(0.25)
    assert parts["touchdowns_per_s"] == pytest.approx(0.25)  # 1 landing, 2 feet, 2 seconds
    assert parts["swing_height_mean_m"] == pytest.approx(0.075)


def test_a_kind_without_a_planar_command_or_without_envs_reads_nan_not_zero():
    standing = walk_gait.gait_parts(
        np.zeros((3, 2, 2)), np.zeros((2, 2)), np.ones((3, 2, 2), bool), np.zeros((3, 2, 2)), 0.02
    )
    assert math.isnan(standing["reached_mps"]) and math.isnan(standing["swing_height_mean_m"])
    assert standing["air_fraction"] == 0.0 and standing["touchdowns_per_s"] == 0.0
    empty = walk_gait.gait_parts(
        np.zeros((3, 0, 2)), np.zeros((0, 2)), np.ones((3, 0, 2), bool), np.zeros((3, 0, 2)), 0.02
    )
    assert all(math.isnan(value) for value in empty.values())


def test_feet_the_entity_does_not_read_are_named():
    with pytest.raises(ValueError, match=r"bodies.feet: \['left_foot'\] are not among"):
        walk_gait.foot_columns(
            ("pelvis", "right_foot"), ["left_foot", "right_foot"], "entity.bodies"
        )
