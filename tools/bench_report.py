"""Write a benchmark run as bench_results/report.md (tables) plus PNG plots."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def write_report(report: dict, rows: dict[str, Callable], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    protocol = report["protocol"]
    lines = [
        "# fuselab benchmark report",
        "",
        f"Machine: {report['machine']['processor']}, {report['machine']['cores']} cores, "
        f"{report['machine']['platform']}; numba {report['machine']['numba']}, "
        f"numpy {report['machine']['numpy']}.",
        f"Protocol: N = {protocol['num_envs']}, warmup {protocol['warmup']}, "
        f"{protocol['repeats']} repeats of {protocol['measure']} calls, {protocol['timing']}.",
        "",
    ]
    for suite, results in report["suites"].items():
        lines += [f"## {suite}", "", "| measure | result | verdict |", "|---|---|---|"]
        lines += [f"| {a} | {b} | {c} |" for a, b, c in rows[suite](results)]
        lines.append("")
    plots = _plots(report["suites"], out_dir)
    lines += [f"![{name}]({path.name})" for name, path in plots.items()]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _plots(suites: dict, out_dir: Path) -> dict[str, Path]:
    plots = {}
    if "backends" in suites:
        plots["step time vs N"] = _step_time_vs_n(
            suites["backends"]["step_ms_vs_num_envs"], out_dir
        )
    if "core" in suites:
        plots["fused vs NumPy per term group"] = _term_groups(
            suites["core"]["term_groups"], out_dir
        )
    if "walk" in suites:
        plots["share of step time per stage"] = _stages(suites["walk"]["stage_share_pct"], out_dir)
    return plots


def _step_time_vs_n(sweep: dict, out_dir: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    for backend in sorted({r["backend"] for r in sweep.values()}):
        points = sorted(
            (r["num_envs"], r["step_ms"]) for r in sweep.values() if r["backend"] == backend
        )
        ax.plot(*zip(*points, strict=True), marker="o", label=backend)
    ax.set(xscale="log", yscale="log", xlabel="num_envs", ylabel="ms per control step (4 substeps)")
    ax.set_title("G1 physics: step time vs N")
    ax.legend()
    return _save(fig, out_dir / "step_time_vs_n.png")


def _term_groups(groups: dict, out_dir: Path) -> Path:
    names = list(groups)
    fig, ax = plt.subplots(figsize=(6, 4))
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [groups[n]["fused"] for n in names], 0.4, label="fused kernel")
    ax.bar([i + 0.2 for i in x], [groups[n]["numpy"] for n in names], 0.4, label="NumPy runtime")
    ax.set_xticks(list(x), names)
    ax.set(ylabel="ms per call", title="Tracking-shaped plan: fused vs NumPy per term group")
    ax.legend()
    return _save(fig, out_dir / "term_groups.png")


def _stages(shares: dict, out_dir: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.barh(list(shares), list(shares.values()))
    ax.set(xlabel="% of G1WalkFlat step time", title="Where a step's time goes (MuJoCo CPU)")
    return _save(fig, out_dir / "walk_stages.png")


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
