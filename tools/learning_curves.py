"""Learning curves of fuselab-eval metrics against training wall-clock minutes.

Evaluates every checkpoint of a run (``model_<iteration>.pt``, each holding the training time it
was saved at) with :func:`fuselab_rl.evaluate.evaluate`, then plots the task's headline metrics
against minutes and writes the table as JSON beside the PNG:

    python tools/learning_curves.py runs/g1_walk_flat/<date_time> -o docs/figures/walk_curves.png
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path

from fuselab_rl.evaluate import evaluate

log = logging.getLogger("learning_curves")

# task -> (metric group, metric, label, goal) of each panel
PANELS = {
    "g1_walk_flat": [
        ("overall", "lin_vel_rms_mps", "RMS planar velocity error (m/s)", 0.25),
        ("overall", "yaw_rate_rms_radps", "RMS yaw-rate error (rad/s)", 0.35),
        ("overall", "fall_fraction", "falls in 10 s (fraction)", 0.02),
    ],
    "g1_motion_tracking": [
        ("from_first_frame", "success_rate", "success, whole clip (fraction)", 0.9),
        ("from_first_frame", "mpkpe_mm", "MPKPE (mm)", 60.0),
        ("from_spread_starts", "success_rate", "success, spread starts (fraction)", 0.9),
    ],
}
CHECKPOINT = re.compile(r"^model_(\d+)\.pt$")


def checkpoints(run_dir: Path, every: int) -> list[Path]:
    found = sorted(
        (int(m.group(1)), path) for path in run_dir.iterdir() if (m := CHECKPOINT.match(path.name))
    )
    return [path for k, (_, path) in enumerate(found) if k % every == 0 or k == len(found) - 1]


def curves(run_dir: Path, num_envs: int, every: int) -> list[dict]:
    reports = []
    for path in checkpoints(run_dir, every):
        report = evaluate(path, num_envs=num_envs, field_name="checkpoint")
        reports.append(report)
        log.info("%s: %s", path.name, json.dumps(report["metrics"]))
    return reports


def plot(reports: list[dict], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = PANELS[reports[0]["task"]]
    minutes = [(r["train_wall_s"] or 0.0) / 60.0 for r in reports]
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4))
    for ax, (group, metric, label, goal) in zip(axes, panels, strict=True):
        ax.plot(minutes, [r["metrics"][group][metric] for r in reports], marker="o")
        if metric.startswith(("lin_vel", "yaw_rate")):
            standing = [r["metrics"][group][f"standing_{metric}"] for r in reports]
            ax.plot(minutes, standing, ls=":", color="grey", label="standing still")
            ax.legend()
        ax.axhline(goal, ls="--", color="green", lw=1)
        ax.set_xlabel("training wall-clock (min)")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("-o", "--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--every", type=int, default=1, help="evaluate every k-th checkpoint")
    parser.add_argument("--title", default=None)
    args = parser.parse_args()
    reports = curves(args.run_dir, args.num_envs, args.every)
    if not reports:
        sys.stderr.write(f"run_dir: no model_<iteration>.pt in {args.run_dir}\n")
        return 2
    args.out.with_suffix(".json").write_text(json.dumps(reports, indent=2) + "\n")
    plot(reports, args.out, args.title or f"{reports[0]['task']}: {args.run_dir.name}")
    log.info("wrote %s and %s", args.out, args.out.with_suffix(".json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
