"""The README and docs/ cannot rot: every ``uv run`` command of their bash blocks is composed or
started the way it is written, and every Python block runs.

A fuselab Hydra app's command line is composed with ``--cfg job`` (every key and value checked,
nothing trained), all of them in one process (a second each instead of an interpreter's start-up
each); ``fuselab-motion`` and ``tools/`` scripts are asked for their subcommand's
``--help``; ``nox -s NAME`` must name a session of the noxfile; ``fuselab-list`` runs whole.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
HYDRA_APPS = {
    "fuselab-train": "train",
    "fuselab-eval": "evaluate",
    "fuselab-play": "play",
    "fuselab-sim2sim": "sim2sim",
    "fuselab-view": "view",
}
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def blocks(language: str) -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for k, (lang, body) in enumerate(BLOCK.findall(page.read_text())):
            if lang == language:
                found.append((f"{page.relative_to(ROOT)}#{k}", body))
    return found


def commands() -> list[tuple[str, list[str]]]:
    found = []
    for where, body in blocks("bash") + blocks("sh"):
        for line in body.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["uv", "run"]:
                found.append((f"{where}: {' '.join(words[2:])}"[:120], words[2:]))
    return found


# Runs each (entry, args) of argv[1] as its command line would, in this one process; prints the
# exit status and output of each as JSON on the last line.
COMPOSE_ALL = """
import contextlib, io, json, sys, traceback
import fuselab_rl.cli as cli
results = []
for entry, args in json.loads(sys.argv[1]):
    sys.argv, output, code = [entry, *args], io.StringIO(), 0
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            getattr(cli, entry)()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except Exception:
        code = 1
        output.write(traceback.format_exc())
    results.append([code, output.getvalue()[-3000:]])
print(json.dumps(results))
"""


def hydra_call(words: list[str]) -> tuple[str, list[str]] | None:
    """A Hydra app's command line as (its entry in fuselab_rl.cli, its arguments)."""
    if words[0] == "torchrun":  # the command after --no-python
        return hydra_call(words[words.index("--no-python") + 1 :])
    if words[0] not in HYDRA_APPS:
        return None
    # the docs' run does not exist here
    args = [w for w in words[1:] if not w.startswith("resume=")]
    return HYDRA_APPS[words[0]], [*args, "--cfg", "job"]


@pytest.fixture(scope="module")
def composed(tmp_path_factory) -> dict[str, tuple[int, str]]:
    """Every documented Hydra command line composed in one process: (status, output) by call."""
    calls = [call for _, words in commands() if (call := hydra_call(words)) is not None]
    done = subprocess.run(
        [sys.executable, "-c", COMPOSE_ALL, json.dumps(calls)],
        cwd=tmp_path_factory.mktemp("compose"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        json.dumps(call): (code, output)
        for call, (code, output) in zip(calls, results, strict=True)
    }


def invocation(words: list[str]) -> list[str] | None:
    """The check of one ``uv run`` command line that is not a Hydra app's (None: nothing to
    run, checked in place)."""
    python = sys.executable
    if words[0] == "fuselab-list":
        return [python, "-c", "from fuselab_rl.cli import list_all; list_all()"]
    if words[0] == "fuselab-motion":
        return [python, "-m", "fuselab_envs.motion.cli", words[1], "--help"]
    if words[:2] == ["python", "tools/" + Path(words[1]).name]:
        return [python, str(ROOT / words[1]), "--help"]
    if words[0] == "nox":
        session = words[words.index("-s") + 1]
        noxfile = (ROOT / "noxfile.py").read_text()
        assert f"def {session}(" in noxfile or f'name="{session}"' in noxfile, session
        return None
    if words[0] == "tensorboard":
        assert importlib.util.find_spec("tensorboard") is not None
        return None
    raise AssertionError(f"the docs test does not know how to check: uv run {' '.join(words)}")


@pytest.mark.parametrize(("where", "words"), commands(), ids=[w for w, _ in commands()])
def test_every_documented_command_composes(where, words, tmp_path, composed):
    call = hydra_call(words)
    if call is not None:
        code, output = composed[json.dumps(call)]
        assert code == 0, f"{where}\n{output}"
        return
    argv = invocation(words)
    if argv is None:
        return
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{where}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize(("where", "code"), blocks("python"), ids=[w for w, _ in blocks("python")])
def test_every_documented_python_block_runs(where, code, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{where}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def test_the_docs_hold_commands_and_examples():
    assert len(commands()) >= 20 and len(blocks("python")) >= 3
