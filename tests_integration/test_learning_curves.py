"""tools/learning_curves.py: when each goal is first met, and runs of a documented figure's JSON
drawn beside new ones (only when they were judged the same way)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).parents[1] / "tools" / "learning_curves.py"
_spec = importlib.util.spec_from_file_location("learning_curves", TOOL)
assert _spec and _spec.loader
curves_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(curves_tool)

OPTIONS = {"num_envs": 256, "events": "train", "push": None}


def walk_report(iteration: int, velocity: float, yaw: float, falls: float) -> dict:
    overall = {"lin_vel_rms_mps": velocity, "yaw_rate_rms_radps": yaw, "fall_fraction": falls}
    return {
        "task": "g1_walk_flat",
        "iteration": iteration,
        "env_steps": iteration * 24576,
        "train_wall_s": iteration * 4.0,
        "metrics": {"overall": overall},
    }


REPORTS = [
    walk_report(100, 0.40, 0.30, 0.00),  # yaw and falls met, velocity not
    walk_report(200, 0.24, 0.36, 0.01),  # velocity met, yaw not
    walk_report(300, 0.20, 0.30, 0.03),  # falls not
    walk_report(400, 0.22, 0.34, 0.02),  # every goal
]


def test_first_at_goal_is_the_first_checkpoint_where_every_goal_holds_at_once():
    found = curves_tool.first_at_goal(REPORTS)
    assert found["overall.lin_vel_rms_mps"]["iteration"] == 200
    assert found["overall.yaw_rate_rms_radps"]["iteration"] == 100
    assert found["overall.fall_fraction"]["iteration"] == 100
    assert found["all goals"] == {"iteration": 400, "minutes": 26.7, "env_steps": 400 * 24576}
    assert found["iterations_per_minute"] == 15.0


def tracking_report(iteration: int, first: float, mpkpe: float, spread: float) -> dict:
    return {
        "task": "g1_motion_tracking",
        "iteration": iteration,
        "env_steps": iteration * 24576,
        "train_wall_s": iteration * 4.0,
        "metrics": {
            "from_first_frame": {"success_rate": first, "mpkpe_mm": mpkpe},
            "from_spread_starts": {"success_rate": spread, "mpkpe_mm": mpkpe},
        },
    }


def test_a_tracking_runs_two_success_rates_are_goals_of_their_own():
    found = curves_tool.first_at_goal(
        [tracking_report(100, 0.5, 50.0, 0.95), tracking_report(200, 0.92, 55.0, 0.8)]
    )
    assert found["from_first_frame.success_rate"]["iteration"] == 200
    assert found["from_spread_starts.success_rate"]["iteration"] == 100
    assert found["from_first_frame.mpkpe_mm"]["iteration"] == 100
    assert found["all goals"] is None


def test_a_documented_run_is_read_only_when_judged_with_the_same_options(tmp_path):
    figure = tmp_path / "walk.json"
    figure.write_text(json.dumps({"options": OPTIONS, "reports": {"default": REPORTS}}))
    assert curves_tool.documented_runs(figure, OPTIONS) == {"default": REPORTS}
    with pytest.raises(ValueError, match=r"--beside .*walk.json: evaluated with .*\"push\": 0.5"):
        curves_tool.documented_runs(figure, {**OPTIONS, "push": 0.5})


def test_a_run_named_as_a_documented_one_is_refused_before_any_evaluation(
    tmp_path, monkeypatch, capsys
):
    figure = tmp_path / "walk.json"
    figure.write_text(json.dumps({"options": OPTIONS, "reports": {"default": REPORTS}}))
    run = tmp_path / "default"
    run.mkdir()
    args = [str(run), "-o", str(tmp_path / "x.png"), "--events", "train", "--beside", str(figure)]
    monkeypatch.setattr(sys, "argv", ["learning_curves.py", *args])
    assert curves_tool.main() == 2
    assert "['default'] name runs of --beside too" in capsys.readouterr().err
    assert not (run / curves_tool.CACHE).exists()


def test_a_figure_that_would_overwrite_a_runs_evaluation_cache_is_refused(
    tmp_path, monkeypatch, capsys
):
    run = tmp_path / "run"
    run.mkdir()
    cache = run / curves_tool.CACHE
    cache.write_text(json.dumps({json.dumps(OPTIONS, sort_keys=True): REPORTS}))
    args = [str(run), "-o", str(cache.with_suffix(".png")), "--events", "train"]
    monkeypatch.setattr(sys, "argv", ["learning_curves.py", *args])
    assert curves_tool.main() == 2
    assert "the run's evaluation cache; give the figure another name" in capsys.readouterr().err
    assert json.loads(cache.read_text()) == {json.dumps(OPTIONS, sort_keys=True): REPORTS}


def test_beside_runs_picks_documented_runs_by_label_and_names_the_ones_it_lacks(tmp_path):
    figure = tmp_path / "walk.json"
    reports = {"seed 0": REPORTS, "former default": REPORTS[:2]}
    figure.write_text(json.dumps({"options": OPTIONS, "reports": reports}))
    runs, sources = curves_tool.beside_runs([figure], OPTIONS, ["seed 0"])
    assert runs == {"seed 0": REPORTS} and sources == {"seed 0": str(figure)}
    assert curves_tool.beside_runs([figure], OPTIONS)[0] == reports
    with pytest.raises(ValueError, match=r"\['seed 9'\] are not runs of --beside; they hold"):
        curves_tool.beside_runs([figure], OPTIONS, ["seed 0", "seed 9"])
