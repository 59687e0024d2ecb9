"""Checkpoints: atomic writes, finding a run's latest checkpoint, loading with clear errors.

A write goes to a temporary file in the destination's directory, is flushed to disk, then
renamed over the destination (``os.replace`` is atomic on POSIX and Windows): a crash at any
point leaves either the previous file or the new one, never a torn file, and no temporary
file once the error has propagated.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import platform
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import torch

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
CHECKPOINT_PATTERN = re.compile(r"^model_(\d+)\.pt$")
TEMPORARY_PATTERN = re.compile(r"^\..+\.[^.]+\.tmp$")  # what atomic_file names its temporary
DISTRIBUTIONS = (
    "fuselab-env-core",
    "fuselab-sim-backends",
    "fuselab-envs",
    "fuselab-rl",
    "torch",
    "numpy",
    "numba",
    "mujoco",
    "hydra-core",
)


def _file_mode() -> int:
    """The mode a plain ``open`` would give a new file (mkstemp's is 0600)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def remove_stale_temporaries(directory: Path) -> list[str]:
    """Delete the temporary files of atomic writes in ``directory`` (a process killed while
    saving leaves its own behind; the file it was replacing is whole). Returns their names."""
    if not Path(directory).is_dir():
        return []
    stale = sorted(p for p in Path(directory).iterdir() if TEMPORARY_PATTERN.match(p.name))
    for path in stale:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return [p.name for p in stale]


def checkpoint_name(iteration: int) -> str:
    return f"model_{iteration}.pt"


@contextlib.contextmanager
def _temp_beside(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path``: on a clean exit it is synced to disk and replaces
    ``path``; on an error it is removed and ``path`` stays as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(temp)
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(temp, _file_mode())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


@contextlib.contextmanager
def atomic_file(path: Path, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on a clean exit it replaces ``path``."""
    with _temp_beside(Path(path)) as temp, open(temp, mode) as handle:
        yield handle


def save_atomic(obj: Any, path: Path) -> Path:
    """``torch.save`` through :func:`atomic_file`."""
    with atomic_file(path) as handle:
        torch.save(obj, handle)
    return Path(path)


def write_text_atomic(path: Path, text: str) -> Path:
    with atomic_file(path, "w") as handle:
        handle.write(text)
    return Path(path)


def write_atomic_with(path: Path, write: Callable[[Path], None]) -> Path:
    """For writers that want a path (ONNX export): ``write(temp_path)``, then replace."""
    with _temp_beside(Path(path)) as temp:
        write(temp)
    return Path(path)


def find_checkpoint(path: str | Path, field: str = "resume") -> Path:
    """A checkpoint file, or the latest ``model_<iteration>.pt`` of a run directory."""
    path = Path(path).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        found = run_checkpoints(path)
        if found:
            return found[-1]
        raise FileNotFoundError(
            f"{field}: run directory '{path}' holds no checkpoint (expected model_<iteration>.pt)"
        )
    raise FileNotFoundError(
        f"{field}: no such file or directory '{path}' "
        "(expected a run directory or a model_<iteration>.pt checkpoint)"
    )


def run_checkpoints(run_dir: Path) -> list[Path]:
    """The ``model_<iteration>.pt`` files of a run directory, in iteration order."""
    found = [
        (int(match.group(1)), child)
        for child in Path(run_dir).iterdir()
        if (match := CHECKPOINT_PATTERN.match(child.name))
    ]
    return [child for _, child in sorted(found)]


def load_checkpoint(path: str | Path, field: str = "resume") -> dict[str, Any]:
    """Load a checkpoint onto the CPU (tensors move to their device when loaded into modules)."""
    path = find_checkpoint(path, field)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a torn or foreign file: say which, not pickle's internals
        raise ValueError(
            f"{field}: '{path}' is not a readable fuselab checkpoint ({error})"
        ) from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{field}: '{path}' is not a fuselab checkpoint of format {CHECKPOINT_FORMAT}"
        )
    state["path"] = str(path)
    _rename_settings(state.get("config") or {})
    return state


# Settings renamed since a checkpoint may have been saved: (section, old name, new name)
RENAMED_SETTINGS = (("algo", "entropy_decay_iterations", "entropy_decay_over"),)


def _rename_settings(config: dict[str, Any]) -> None:
    """A checkpoint's config under today's names (:data:`RENAMED_SETTINGS`), for every reader:
    a resume, fuselab-eval, -play, -sim2sim and the export."""
    for section, old, new in RENAMED_SETTINGS:
        values = config.get(section) or {}
        if old in values:
            values[new] = values.pop(old)
            log.info("checkpoint: %s.%s is now %s.%s", section, old, section, new)


def versions() -> dict[str, str]:
    """Python and the versions of the distributions a run depends on."""
    found = {"python": platform.python_version()}
    for name in DISTRIBUTIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found
