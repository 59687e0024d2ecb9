"""Plot a run's metrics.jsonl: mean episode return and length against wall time (a PNG).

    python -m fuselab_rl.plot runs/g1_walk_flat/2025-01-01_12-00-00

matplotlib is optional for fuselab-rl (the ``plot`` extra): it is imported here only, and a
clear ImportError says how to get it.
"""

from __future__ import annotations

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
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(
            "plot: matplotlib is not installed; `pip install 'fuselab-rl[plot]'` (or matplotlib) "
            "to plot metrics.jsonl"
        ) from None
    records = read_metrics(run_dir)
    out = Path(out) if out is not None else Path(run_dir) / PNG_NAME
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), constrained_layout=True)
    for ax, key, label in (
        (axes[0], "Episode/return", "mean episode return"),
        (axes[1], "Episode/length", "mean episode length (steps)"),
    ):
        points = [(r["wall_s"] / 60.0, r[key]) for r in records if r.get(key) is not None]
        if points:
            ax.plot(*zip(*points, strict=True))
        ax.set_xlabel("wall time (min)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{Path(run_dir).resolve().name}: {len(records)} iterations")
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m fuselab_rl.plot RUN_DIR\n")
        return 2
    try:
        sys.stdout.write(f"wrote {plot_metrics(args[0])}\n")
    except (ImportError, FileNotFoundError) as error:
        sys.stderr.write(f"error: {error}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
