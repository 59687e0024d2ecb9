"""The disk cache across processes: hits, misses, corruption and concurrent builds."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
BUILD = HERE / "env_core_build_once.py"


def build(cache_dir, numba_cache_dir=None, *args, extra_path=None):
    env = dict(os.environ, FUSELAB_CACHE_DIR=str(cache_dir))
    env.pop("NUMBA_CACHE_DIR", None)
    if numba_cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(numba_cache_dir)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), extra_path, env.get("PYTHONPATH")) if p
    )
    done = subprocess.run(
        [sys.executable, str(BUILD), *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.parametrize("numba_layout", ["in-tree __pycache__", "NUMBA_CACHE_DIR"])
def test_fresh_process_finds_the_disk_cache_in_both_numba_layouts(tmp_path, numba_layout):
    numba_dir = tmp_path / "numba" if numba_layout == "NUMBA_CACHE_DIR" else None
    first, log = build(tmp_path / "fuselab", numba_dir)
    assert (first["cache"], first["compiled"]) == ("miss", True)
    assert "first compile takes a while" in log
    second, log = build(tmp_path / "fuselab", numba_dir)
    assert (second["cache"], second["compiled"]) == ("disk", False)
    assert second["key"] == first["key"]
    assert "load:" in log and "compile:" not in log
    numba_files = list((numba_dir or Path(first["source_path"]).parent).rglob("*.nbi"))
    assert numba_files, f"no Numba index under the {numba_layout} layout"


def test_truncated_cache_files_are_rebuilt_with_a_warning(tmp_path):
    first, _ = build(tmp_path)
    source = Path(first["source_path"])
    full_text = source.read_text()
    source.write_text(full_text[:100])
    rebuilt, log = build(tmp_path)
    assert "WARNING corrupt or stale generated kernel" in log
    assert source.read_text() == full_text  # Numba keys its cache by content: still valid
    for index in source.parent.rglob("*.nb*"):
        index.write_bytes(index.read_bytes()[:10])
    rebuilt, log = build(tmp_path)
    assert "WARNING corrupt Numba cache" in log
    assert rebuilt["compiled"] is True
    again, _ = build(tmp_path)
    assert (again["cache"], again["compiled"]) == ("disk", False)


def test_changed_term_source_misses_the_cache(tmp_path):
    module = tmp_path / "edited_terms_module.py"
    template = (
        "from fuselab_env_core.terms import reward\n\n"
        "@reward(name='edited_reward')\n"
        "def edited_reward(i, vel):\n"
        "    return vel[i, {axis}]\n"
    )
    module.write_text(template.format(axis=0))
    args = ("edited_terms_module", "edited_reward")
    first, _ = build(tmp_path / "cache", None, *args, extra_path=str(tmp_path))
    hit, _ = build(tmp_path / "cache", None, *args, extra_path=str(tmp_path))
    module.write_text(template.format(axis=1))
    edited, _ = build(tmp_path / "cache", None, *args, extra_path=str(tmp_path))
    assert (first["cache"], hit["cache"], edited["cache"]) == ("miss", "disk", "miss")
    assert edited["key"] != first["key"]


def test_two_processes_building_the_same_plan_at_once(tmp_path):
    env = dict(os.environ, FUSELAB_CACHE_DIR=str(tmp_path), PYTHONPATH=str(HERE))
    env.pop("NUMBA_CACHE_DIR", None)
    runs = [
        subprocess.Popen(
            [sys.executable, str(BUILD)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        assert "Traceback" not in err
    after, log = build(tmp_path)
    assert after["cache"] == "disk"
    assert "WARNING" not in log


def test_a_cache_directory_that_is_a_file_is_named(tmp_path, monkeypatch):
    from fuselab_env_core.compiler import cache_root

    monkeypatch.setenv("FUSELAB_CACHE_DIR", str(tmp_path / "kernels"))
    assert cache_root() == tmp_path / "kernels"  # created when a kernel is written
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("FUSELAB_CACHE_DIR", str(tmp_path / "file"))
    with pytest.raises(ValueError, match=r"FUSELAB_CACHE_DIR: '.*file' is a file; expected a "):
        cache_root()
