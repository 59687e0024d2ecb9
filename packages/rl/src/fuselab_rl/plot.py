"""Plot runs' metrics.jsonl: mean episode return and length against wall time or env steps
(a PNG).

    python -m fuselab_rl.plot runs/g1_walk_flat/2025-01-01_12-00-00
    python -m fuselab_rl.plot RUN_A RUN_B -o compare.png    # several runs on the same axes
    python -m fuselab_rl.plot RUN_A RUN_B -o compare.png --x env_steps --labels before after

matplotlib is optional for fuselab-rl (the ``plot`` extra): it is imported here only, and a
clear ImportError says how to get it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PNG_NAME = "metrics.png"


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"run_dir: no metrics.jsonl in '{run_dir}'")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_metrics(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write ``<run_dir>/metrics.png`` (or ``out``): return and episode length vs wall time."""
    return plot_runs([run_dir], Path(out) if out is not None else Path(run_dir) / PNG_NAME)


X_AXES = {  # the x axis: label, and a record's value on it
    "minutes": ("wall time (min)", lambda record: record["wall_s"] / 60.0),
    "env_steps": ("env steps (M)", lambda record: record["env_steps"] / 1e6),
}


def plot_runs(
    run_dirs: list[str | Path],
    out: str | Path,
    x: str = "minutes",
    labels: list[str] | None = None,
) -> Path:
    """Several runs on the same axes against ``x`` (a key of X_AXES), each labelled with its
    algorithm and run directory (or ``labels``, one per run)."""
    if x not in X_AXES:
        raise ValueError(f"x: expected one of {', '.join(X_AXES)}, got {x!r}")
    if labels is not None and len(labels) != len(run_dirs):
        raise ValueError(f"labels: {len(labels)} given for {len(run_dirs)} runs")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(
            "plot: matplotlib is not installed; `pip install 'fuselab-rl[plot]'` (or matplotlib) "
            "to plot metrics.jsonl"
        ) from None
    runs = {Path(run_dir): read_metrics(run_dir) for run_dir in run_dirs}
    out = Path(out)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), constrained_layout=True)
    x_label, x_of = X_AXES[x]
    for k, (run_dir, records) in enumerate(runs.items()):
        name = labels[k] if labels is not None else run_dir.resolve().name
        label = f"{_algo(run_dir)} ({name}, {len(records)} iterations)"
        for ax, key in ((axes[0], "Episode/return"), (axes[1], "Episode/length")):
            points = [(x_of(r), r[key]) for r in records if r.get(key) is not None]
            if points:
                ax.plot(*zip(*points, strict=True), label=label)
    for ax, label in (
        (axes[0], "mean episode return"),
        (axes[1], "mean episode length (steps)"),
    ):
        ax.set_xlabel(x_label)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    tasks = sorted({_task(run_dir) for run_dir in runs})
    fig.suptitle(", ".join(tasks))
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _algo(run_dir: Path) -> str:
    return str(_config(run_dir).get("algo", {}).get("name", "?"))


def _task(run_dir: Path) -> str:
    return str(_config(run_dir).get("task_name", "?"))


def _config(run_dir: Path) -> dict:
    from omegaconf import OmegaConf

    path = run_dir / "config.yaml"
    return OmegaConf.to_container(OmegaConf.load(path)) if path.is_file() else {}  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("-o", "--out", type=Path, help="default: <the one run dir>/metrics.png")
    parser.add_argument("--x", choices=tuple(X_AXES), default="minutes", help="the x axis")
    parser.add_argument("--labels", nargs="+", help="one per run (default: the run names)")
    args = parser.parse_args(argv)
    if args.out is None and len(args.run_dirs) > 1:
        parser.error("--out: name the PNG when plotting several runs")
    try:
        if args.out is None:
            written = plot_metrics(args.run_dirs[0])
        else:
            written = plot_runs(args.run_dirs, args.out, args.x, args.labels)
        sys.stdout.write(f"wrote {written}\n")
    except (ImportError, FileNotFoundError, ValueError) as error:
        sys.stderr.write(f"error: {error}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
