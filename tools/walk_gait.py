"""How a walking policy steps, per command kind: the speed it reaches along its command, the share
of time its feet are in the air, touchdowns per second and how high a swinging foot rises.

Runs fuselab-eval's walk rollout (the same commands, settling and window) on a checkpoint of a
task with a velocity command whose feet are named in its ``bodies.feet`` (bodies its entity
reads and senses contacts on). A foot is in the air while the vertical contact force on it is
under ``FORCE_THRESHOLD_N``; its height is its body origin's above the lowest that origin came in
the rollout (where it stands). Envs that fell are left out. Prints a table and, with ``--json``,
writes it:

    uv run python tools/walk_gait.py runs/g1_walk_flat/<date_time>/model_900.pt
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from fuselab_rl.evaluate import (
    COMMAND_KINDS,
    NUM_ENVS,
    SECONDS,
    walk_checkpoint,
    walk_rollout,
)

FORCE_THRESHOLD_N = 5.0  # a foot pressing less than this on the ground is in the air
NAN = float("nan")  # a kind with no env left standing, or no planar command


def gait_parts(
    planar: np.ndarray, asked: np.ndarray, touching: np.ndarray, height: np.ndarray, step_dt: float
) -> dict[str, float]:
    """One kind's gait from (steps, envs, 2) planar velocities against the (envs, 2) planar
    commands, and (steps, envs, feet) contacts and foot heights above standing."""
    norm = np.linalg.norm(asked, axis=-1, keepdims=True)
    walking = norm[:, 0] > 0.0
    along = np.sum(planar[:, walking] * (asked[walking] / norm[walking]), axis=-1)
    airborne = ~touching
    landings = touching[1:] & airborne[:-1]
    return {
        "asked_mps": _mean(norm[walking]),
        "reached_mps": _mean(along),
        "planar_speed_mps": _mean(np.linalg.norm(planar, axis=-1)),
        "air_fraction": _mean(airborne),
        "touchdowns_per_s": _mean(landings.sum(axis=0)) / (len(touching) * step_dt),
        "swing_height_mean_m": _mean(height[airborne]),
        "swing_height_p90_m": float(np.percentile(height[airborne], 90)) if airborne.any() else NAN,
    }


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if values.size else NAN


def foot_columns(names: tuple[str, ...], feet: list[str], what: str) -> list[int]:
    missing = [foot for foot in feet if foot not in names]
    if missing:
        raise ValueError(f"bodies.feet: {missing} are not among {what} {list(names)}")
    return [names.index(foot) for foot in feet]


def diagnose(checkpoint_path: str, num_envs: int, seconds: float) -> dict:
    """The report of one checkpoint: per kind, :func:`gait_parts`."""
    cfg, policy, commands, kinds = walk_checkpoint(checkpoint_path, num_envs)
    feet = list(cfg.get("bodies", {}).get("feet", []))
    if not feet:
        raise ValueError(f"checkpoint: task {cfg.task_name!r} names no bodies.feet")
    bodies = foot_columns(tuple(cfg.entity.bodies), feet, "entity.bodies")
    contacts = foot_columns(
        tuple(cfg.entity.get("contact_bodies", ())), feet, "entity.contact_bodies"
    )
    planar, touching, heights, never_fell = [], [], [], np.ones(num_envs, np.bool_)
    for velocity, _, fallen, robot in walk_rollout(cfg, policy, commands, seconds):
        planar.append(velocity.copy())
        touching.append(robot.contact_force_w[:, contacts, 2] > FORCE_THRESHOLD_N)
        heights.append(robot.body_pos_w[:, bodies, 2].copy())
        never_fell = ~fallen
    if not planar:
        raise ValueError(f"seconds: {seconds} measures no control step")
    height = np.array(heights)
    height -= height.min(axis=0)  # above where each foot stands
    step_dt = seconds / len(planar)  # the window is seconds / step_dt steps
    planar_all, touching_all = np.array(planar), np.array(touching)
    report: dict = {"checkpoint": checkpoint_path, "seconds": seconds, "feet": feet, "kinds": {}}
    for k, kind in enumerate(COMMAND_KINDS):
        rows = (kinds == k) & never_fell
        report["kinds"][kind] = gait_parts(
            planar_all[:, rows], commands[rows, :2], touching_all[:, rows], height[:, rows], step_dt
        )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a g1_walk_flat checkpoint (model_<iteration>.pt)")
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    report = diagnose(args.checkpoint, args.num_envs, args.seconds)
    print(f"{args.checkpoint}: gait per command kind, envs that never fell")
    for kind, parts in report["kinds"].items():
        print(f"{kind:>9}  " + "  ".join(f"{name} {value:.3f}" for name, value in parts.items()))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
