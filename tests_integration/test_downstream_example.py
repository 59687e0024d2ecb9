"""A downstream project on fuselab-env-core alone: installed into a fresh venv with nothing else."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_point_masses_example_runs_on_env_core_alone(tmp_path):
    uv = shutil.which("uv")
    assert uv, "uv is needed to build the fresh venv of this test (see .ci/run)"
    venv = tmp_path / "venv"
    subprocess.run(
        [uv, "venv", "--python", sys.executable, str(venv)], check=True, capture_output=True
    )
    python = venv / "bin" / "python"
    install = [uv, "pip", "install", "--python", str(python)]
    packages = [str(ROOT / "packages" / "env_core"), str(ROOT / "examples" / "point_masses")]
    subprocess.run([*install, *packages], check=True, capture_output=True, text=True)
    installed = subprocess.run(
        [uv, "pip", "list", "--python", str(python)], check=True, capture_output=True, text=True
    ).stdout
    for absent in ("mujoco", "torch", "hydra", "fuselab-sim-backends", "fuselab-envs"):
        assert absent not in installed
    done = subprocess.run(
        [str(venv / "bin" / "point-masses"), "--num-envs", "64"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"FUSELAB_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    first, last = (float(x.split()[-1]) for x in done.stdout.strip().split(":")[1].split(","))
    assert last > 10 * first  # the masses reach their targets: the fused reward rises
    assert "build miss" in done.stderr
