"""tools/bench.py --quick runs end to end and writes JSON that passes its own schema check.

The suites whose figures are checked here run; fastsac and distributed (a collector process and
torchrun ranks: a minute and a quarter of start-ups, whose mechanisms test_rl_fastsac_async and
test_rl_distributed cover) run in `nox -s bench`."""

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[1] / "tools" / "bench.py"
CHECKED = ["core", "backends", "walk", "tracking", "training"]


def test_bench_quick_writes_a_valid_report(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            *CHECKED,
            "--quick",
            "--json",
            str(out),
            "--report",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    core = report["suites"]["core"]
    assert core["tuning_rebuild"]["compiles"] == 0
    assert core["startup"]["warm"]["cache"] == "disk"
    assert core["startup"]["warm"]["compiled"] is False
    assert core["fused_vs_numpy"]["speedup"] > 1.0
    assert "fused kernel vs NumPy runtime" in done.stdout
    dataset = report["suites"]["tracking"]["dataset"]
    frames = dataset["table_frames"]
    assert dataset["clips"] == 16 and frames["copies"] == 16 * frames["one_clip"]
    assert frames["mixed"] > 16 * 150  # 3-12 s at 50 fps
    assert set(dataset["cost_pct"]) == {"copies", "mixed"}
    assert "a dataset of 16 clips" in done.stdout
    physics_rate = report["suites"]["training"]["physics_rate"]
    assert physics_rate["physics_dt"] == {"task": 0.005, "100hz": 0.01}
    assert physics_rate["speedup"] > 0
    report_md = (tmp_path / "report.md").read_text()
    for section in ("## core", "## backends", "## walk", "step_time_vs_n.png"):
        assert section in report_md
    for plot in ("step_time_vs_n.png", "term_groups.png", "walk_stages.png"):
        assert (tmp_path / plot).stat().st_size > 5000  # a real picture, not an empty file


def test_bench_rejects_an_unknown_suite():
    done = subprocess.run(
        [sys.executable, str(BENCH), "cores"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "unknown suite 'cores'; choose from core" in done.stderr
