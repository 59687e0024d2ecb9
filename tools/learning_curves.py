"""Learning curves of fuselab-eval metrics against training minutes and env steps, for one run
or several side by side (seeds, algorithms), and when each reached its goals.

Evaluates every checkpoint of each run (``model_<iteration>.pt``, each holding the training
time and env steps it was saved at) with :func:`fuselab_rl.evaluate.evaluate`, keeps the
reports in ``<run>/eval_cache.json`` (a later call evaluates only checkpoints it has not seen with
the same options), plots the task's headline metrics against minutes (top row) and env steps
(bottom row), one line per run, and prints, for each run, the first checkpoint at which every
goal holds (iteration, minutes, env steps) and the machine's PPO iterations per minute:

    python tools/learning_curves.py runs/g1_walk_flat/<date_time> -o docs/figures/walk.png
    python tools/learning_curves.py RUN_A RUN_B RUN_C --labels seed0 seed1 seed2 -o seeds.png
    python tools/learning_curves.py RUN --events train --push 0.5 -o robust.png
    python tools/learning_curves.py NOMINAL_RUN RANDOMIZED_RUN --events randomized -o compare.png
    python tools/learning_curves.py RUN --events train --beside docs/figures/walk.json -o new.png
    python tools/learning_curves.py SEED1 SEED2 --beside docs/figures/walk.json --beside-runs
        seed0 --events train -o seeds.png

``--beside`` adds the runs of a JSON this tool wrote (whose run directories may be gone), when
they were evaluated with the same options; ``--beside-runs`` picks some of them by label.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

from fuselab_rl.evaluate import EVENT_SETS, MOTION, VELOCITY, evaluate

log = logging.getLogger("learning_curves")

# metric group, metric, label, goal, whether lower is better: a task's panels, by its command
PANELS = {
    VELOCITY: [
        ("overall", "lin_vel_rms_mps", "RMS planar velocity error (m/s)", 0.25, True),
        ("overall", "yaw_rate_rms_radps", "RMS yaw-rate error (rad/s)", 0.35, True),
        ("overall", "fall_fraction", "falls in 10 s (fraction)", 0.02, True),
    ],
    MOTION: [
        ("from_first_frame", "success_rate", "success, whole clip (fraction)", 0.9, False),
        ("from_first_frame", "mpkpe_mm", "MPKPE (mm)", 60.0, True),
        ("from_spread_starts", "success_rate", "success, spread starts (fraction)", 0.9, False),
    ],
}
CHECKPOINT = re.compile(r"^model_(\d+)\.pt$")
CACHE = "eval_cache.json"  # not a figure's name: `-o RUN/curves.png` writes RUN/curves.json


def checkpoints(run_dir: Path, every: int) -> list[Path]:
    found = sorted(
        (int(m.group(1)), path) for path in run_dir.iterdir() if (m := CHECKPOINT.match(path.name))
    )
    return [path for k, (_, path) in enumerate(found) if k % every == 0 or k == len(found) - 1]


def curves(run_dir: Path, options: dict[str, Any], every: int) -> list[dict]:
    """The reports of the run's checkpoints (cached in the run directory by options)."""
    cache_path = run_dir / CACHE
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    key = json.dumps(options, sort_keys=True)
    seen = {r["checkpoint"]: r for r in cache.get(key, [])}
    reports = []
    for path in checkpoints(run_dir, every):
        report = seen.get(str(path))
        if report is None:
            report = evaluate(path, field_name="checkpoint", **options)
            log.info("%s: %s", path.name, json.dumps(report["metrics"]))
        reports.append(report)
    cache[key] = sorted(
        {r["checkpoint"]: r for r in [*seen.values(), *reports]}.values(),
        key=lambda r: r["iteration"],
    )
    cache_path.write_text(json.dumps(cache, indent=1) + "\n")
    return reports


def documented_runs(figure_json: Path, options: dict[str, Any]) -> dict[str, list[dict]]:
    """The runs' reports that a JSON written by this tool holds, evaluated with ``options``."""
    summary = json.loads(figure_json.read_text())
    if summary["options"] != options:
        raise ValueError(
            f"--beside {figure_json}: evaluated with {json.dumps(summary['options'])}, not "
            f"{json.dumps(options)}; give the same --num-envs, --events and --push"
        )
    return summary["reports"]


def panels_of(reports: list[dict]) -> list[tuple]:
    return PANELS[VELOCITY if "overall" in reports[0]["metrics"] else MOTION]


def meets(report: dict, panel: tuple) -> bool:
    group, metric, _, goal, lower = panel
    value = report["metrics"][group][metric]
    return value <= goal if lower else value >= goal


def first_at_goal(reports: list[dict]) -> dict[str, Any]:
    """The first checkpoint at which each goal (named ``group.metric``: a tracking run has a
    success rate from the first frame and one from spread starts), and every goal at once,
    holds."""
    panels = panels_of(reports)
    found: dict[str, Any] = {}
    for name, test in [
        *((f"{p[0]}.{p[1]}", lambda r, p=p: meets(r, p)) for p in panels),
        ("all goals", lambda r: all(meets(r, p) for p in panels)),
    ]:
        hit = next((r for r in reports if test(r)), None)
        found[name] = (
            None
            if hit is None
            else {
                "iteration": hit["iteration"],
                "minutes": round((hit["train_wall_s"] or 0.0) / 60.0, 1),
                "env_steps": hit["env_steps"],
            }
        )
    last = reports[-1]
    minutes = (last["train_wall_s"] or 0.0) / 60.0
    found["iterations_per_minute"] = round(last["iteration"] / minutes, 2) if minutes else None
    return found


def plot(runs: dict[str, list[dict]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = panels_of(next(iter(runs.values())))
    figure, axes = plt.subplots(2, len(panels), figsize=(4.2 * len(panels), 6.4), squeeze=False)
    for row, (x_label, x_of) in enumerate(
        [
            ("training wall-clock (min)", lambda r: (r["train_wall_s"] or 0.0) / 60.0),
            ("env steps (M)", lambda r: (r["env_steps"] or 0) / 1e6),
        ]
    ):
        for ax, (group, metric, label, goal, _) in zip(axes[row], panels, strict=True):
            for name, reports in runs.items():
                xs = [x_of(r) for r in reports]
                ax.plot(xs, [r["metrics"][group][metric] for r in reports], marker=".", label=name)
            if metric.startswith(("lin_vel", "yaw_rate")):
                reports = next(iter(runs.values()))
                standing = [r["metrics"][group][f"standing_{metric}"] for r in reports]
                ax.plot(
                    [x_of(r) for r in reports],
                    standing,
                    ls=":",
                    color="grey",
                    label="standing still",
                )
            ax.axhline(goal, ls="--", color="green", lw=1)
            ax.set_xlabel(x_label)
            ax.set_title(label, fontsize=10)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)


def beside_runs(
    figure_jsons: list[Path], options: dict, only: list[str] | None = None
) -> tuple[dict, dict]:
    """The evaluations of the runs in earlier figures' JSONs (judged with ``options``; of those,
    the runs labelled ``only`` when given) and where each came from; a ValueError names a
    mismatch, a run given twice or a label no JSON holds."""
    runs, sources, held = {}, {}, []
    for figure_json in figure_jsons:
        for label, reports in documented_runs(figure_json, options).items():
            held.append(label)
            if only is not None and label not in only:
                continue
            if label in runs:
                raise ValueError(f"--beside {figure_json}: the run {label!r} is given twice")
            runs[label], sources[label] = reports, str(figure_json)
    if missing := [label for label in only or [] if label not in runs]:
        raise ValueError(f"--beside-runs: {missing} are not runs of --beside; they hold {held}")
    return runs, sources


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", type=Path, nargs="+")
    parser.add_argument("-o", "--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--labels", nargs="*", help="one per run (default: the run names)")
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--every", type=int, default=1, help="evaluate every k-th checkpoint")
    parser.add_argument("--events", default="nominal", choices=EVENT_SETS)
    parser.add_argument("--push", type=float, default=None, help="pushes of up to this, m/s")
    parser.add_argument("--title", default=None)
    parser.add_argument(
        "--beside", type=Path, nargs="*", default=[], help="JSONs of this tool: their runs too"
    )
    parser.add_argument(
        "--beside-runs", nargs="+", default=None, help="of --beside's runs, only these labels"
    )
    args = parser.parse_args()
    labels = args.labels or [run.name for run in args.run_dirs]
    if len(labels) != len(args.run_dirs):
        sys.stderr.write(f"labels: {len(labels)} given for {len(args.run_dirs)} runs\n")
        return 2
    caches = {(run / CACHE).resolve() for run in args.run_dirs}
    if args.out.with_suffix(".json").resolve() in caches:  # the figure's JSON would replace it
        sys.stderr.write(
            f"out: {args.out} writes {args.out.with_suffix('.json')}, the run's evaluation "
            f"cache; give the figure another name\n"
        )
        return 2
    options = {"num_envs": args.num_envs, "events": args.events, "push": args.push}
    try:  # read first: a mismatch stops before any evaluation
        runs, sources = beside_runs(args.beside, options, args.beside_runs)
    except ValueError as error:
        sys.stderr.write(f"{error}\n")
        return 2
    if clash := sorted(set(labels) & set(runs)):
        sys.stderr.write(f"labels: {clash} name runs of --beside too; give --labels\n")
        return 2
    for label, run in zip(labels, args.run_dirs, strict=True):
        reports = curves(run, options, args.every)
        if not reports:
            sys.stderr.write(f"run_dir: no model_<iteration>.pt in {run}\n")
            return 2
        runs[label], sources[label] = reports, str(run)
    goals = {label: first_at_goal(reports) for label, reports in runs.items()}
    for label, found in goals.items():
        sys.stdout.write(f"{label}: {json.dumps(found)}\n")
    summary = {
        "options": options,
        "runs": sources,
        "first_at_goal": goals,
        "reports": runs,
    }
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    task = next(iter(runs.values()))[0]["task"]
    plot(runs, args.out, args.title or f"{task}: {', '.join(runs)}")
    log.info("wrote %s and %s", args.out, args.out.with_suffix(".json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
