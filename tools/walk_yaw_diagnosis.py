"""Where a walking policy's yaw-rate error comes from, per command kind.

Runs fuselab-eval's walk rollout (the same commands, settling and window) on a checkpoint of a
task with a velocity command (g1_walk_flat) and splits each kind's RMS yaw-rate error into the
per-env mean error (drift: turning too little, or turning when told to go straight) and the
oscillation around it, with the oscillation's power below 1 Hz, at 1-3 Hz (the gait's step
frequency) and above 3 Hz; for the turning commands, the mean yaw rate reached against the
mean asked, per direction. With
``--clean-observations`` the actor's observations carry no noise (a diagnostic: how much of the
wobble is the policy answering sensor noise; fuselab-eval keeps the noise it was trained with).
Prints a table and, with ``--json``, writes it:

    uv run python tools/walk_yaw_diagnosis.py runs/g1_walk_flat/<date_time>/model_700.pt
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

BANDS_HZ = ((0.0, 1.0), (1.0, 3.0), (3.0, np.inf))


def yaw_error_parts(errors: np.ndarray, step_dt: float) -> dict[str, float]:
    """(steps, envs) yaw-rate errors -> RMS, drift RMS, oscillation RMS, and the oscillation's
    share of power in each of BANDS_HZ."""
    drift = errors.mean(axis=0)
    oscillation = errors - drift
    power = (np.abs(np.fft.rfft(oscillation, axis=0)) ** 2).sum(axis=1)
    hz = np.fft.rfftfreq(len(errors), step_dt)
    parts = {
        "rms": float(np.sqrt(np.mean(errors**2))),
        "drift_rms": float(np.sqrt(np.mean(drift**2))),
        "oscillation_rms": float(np.sqrt(np.mean(oscillation**2))),
    }
    for low, high in BANDS_HZ:
        band = power[(hz >= low) & (hz < high)].sum()
        parts[f"power_{low:g}_{high:g}_hz"] = float(band / power.sum())
    return parts


def diagnose(
    checkpoint_path: str, num_envs: int, seconds: float, clean_observations: bool = False
) -> dict:
    """The report of one checkpoint: per kind, :func:`yaw_error_parts`; per turning
    direction, the mean yaw rate asked and reached."""
    cfg, policy, commands, kinds = walk_checkpoint(checkpoint_path, num_envs)
    if clean_observations:
        cfg.observations.actor.noise = False
    yaw_rates, never_fell = [], np.ones(num_envs, np.bool_)
    for _, yaw_rate, fallen, _ in walk_rollout(cfg, policy, commands, seconds):
        yaw_rates.append(yaw_rate.copy())
        never_fell = ~fallen
    if not yaw_rates:
        raise ValueError(f"seconds: {seconds} measures no control step")
    yaw_rates = np.array(yaw_rates)  # (steps, envs)
    errors = yaw_rates - commands[:, 2]
    step_dt = seconds / len(errors)  # the window is seconds / step_dt steps
    report: dict = {
        "checkpoint": checkpoint_path,
        "seconds": seconds,
        "clean_observations": clean_observations,
        "kinds": {},
    }
    for k, kind in enumerate(COMMAND_KINDS):
        report["kinds"][kind] = yaw_error_parts(errors[:, (kinds == k) & never_fell], step_dt)
    turning = (kinds == COMMAND_KINDS.index("turning")) & never_fell
    for direction, sign in (("left", 1.0), ("right", -1.0)):
        rows = turning & (np.sign(commands[:, 2]) == sign)
        report[f"turning_{direction}"] = {
            "asked_radps": float(commands[rows, 2].mean()),
            "reached_radps": float(yaw_rates[:, rows].mean()),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a g1_walk_flat checkpoint (model_<iteration>.pt)")
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument(
        "--clean-observations", action="store_true", help="the actor's observations noise-free"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    report = diagnose(args.checkpoint, args.num_envs, args.seconds, args.clean_observations)
    print(f"{args.checkpoint}: yaw-rate error (rad/s) per command kind, envs that never fell")
    for kind, parts in report["kinds"].items():
        print(f"{kind:>9}  " + "  ".join(f"{name} {value:.3f}" for name, value in parts.items()))
    for direction in ("left", "right"):
        turn = report[f"turning_{direction}"]
        print(f"turning {direction}: {turn['reached_radps']:+.3f} of {turn['asked_radps']:+.3f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
