"""Motion datasets: many clips as one table, read by a global frame index.

A dataset's clips are loaded onto the model, resampled to one rate and laid end to end in one
:class:`MotionClip` (``table``); clip ``c`` owns the frames ``starts[c] .. starts[c] +
frames[c] - 1``. The fused kernels read the table at each env's global frame exactly as they
read a single clip, so a dataset costs the step nothing more.

Where clips come from (:func:`clip_entries`):

* a ``.npz`` motion file: one clip;
* a directory: every ``.npz`` below it, in sorted order, each clip named by its path relative
  to the directory (without ``.npz``);
* a manifest (``.yaml``/``.yml``): ``clips:``, a list of ``{file: PATH, weight: W}`` entries,
  each PATH a motion file or a directory (relative to the manifest), W > 0 (default 1): how
  often an episode starts on that entry's clips relative to the others;
* a list of any of these.

Each clip may be led in from the robot's rest pose and out to it (:mod:`fuselab_envs.motion.lead`);
its lead frames are frames of the table like the clip's own, counted in ``lead_in``/``lead_out``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fuselab_env_core.timing import elapsed_ms
from fuselab_envs.motion.clip import (
    MotionClip,
    MotionFileError,
    join,
    load_motion,
    name_index,
)
from fuselab_envs.motion.lead import Lead, LedClip, with_lead

log = logging.getLogger(__name__)

MANIFEST_SUFFIXES = (".yaml", ".yml")
MANIFEST_KEYS = ("file", "weight")


@dataclass(frozen=True)
class ClipEntry:
    """One clip of a dataset: its file, its name and its start weight."""

    path: Path
    name: str
    weight: float = 1.0


@dataclass(frozen=True, eq=False)
class MotionDataset:
    """Clips end to end in one table (see the module docstring)."""

    table: MotionClip  # every clip, one after another, at one rate
    names: tuple[str, ...]
    starts: np.ndarray  # (C,) int64: each clip's first frame in the table
    frames: np.ndarray  # (C,) int64: each clip's frame count
    weights: np.ndarray  # (C,) float64, summing to 1: how often an episode starts on each clip
    lead_in: np.ndarray  # (C,) int64: how many of each clip's first frames lead in from rest
    lead_out: np.ndarray  # (C,) int64: how many of its last frames lead out to rest

    @property
    def num_clips(self) -> int:
        return len(self.names)

    @property
    def ends(self) -> np.ndarray:
        """(C,) one past each clip's last frame."""
        return self.starts + self.frames

    @property
    def clip_of_frame(self) -> np.ndarray:
        """(T,) int32: the clip each frame of the table belongs to."""
        return np.repeat(np.arange(self.num_clips, dtype=np.int32), self.frames)

    @property
    def motion_frames(self) -> np.ndarray:
        """(T,) bool: the frames of the clips' own motion (not their lead frames)."""
        clip = self.clip_of_frame
        local = np.arange(len(clip)) - self.starts[clip]
        return (local >= self.lead_in[clip]) & (local < self.frames[clip] - self.lead_out[clip])

    def clip(self, index: int) -> MotionClip:
        """Clip ``index`` alone (views of the table)."""
        frames = slice(int(self.starts[index]), int(self.ends[index]))
        return self.table.cut(frames, self.names[index])

    def index(self, name: str) -> int:
        return name_index(self.names, name, "clip", "the dataset's clips")


def clip_entries(source: str | Path | Sequence[str | Path]) -> list[ClipEntry]:
    """The clips a source names (see the module docstring), with their names and weights."""
    if isinstance(source, (str, Path)):
        entries = _entries_of(Path(source), 1.0)
    else:
        if not source:
            raise ValueError("motion files: expected at least one file, directory or manifest")
        entries = [entry for item in source for entry in _entries_of(Path(item), 1.0)]
    names = [entry.name for entry in entries]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(
            f"motion files: clip names must be unique (a file's name without .npz, or its path "
            f"under a directory); repeated: {repeated}"
        )
    return entries


def _entries_of(path: Path, weight: float) -> list[ClipEntry]:
    if path.is_dir():
        files = sorted(path.rglob("*.npz"))
        if not files:
            raise MotionFileError(path, "directory", "holds no .npz motion file")
        return [ClipEntry(f, f.relative_to(path).with_suffix("").as_posix(), weight) for f in files]
    if path.suffix.lower() in MANIFEST_SUFFIXES:
        return _manifest_entries(path)
    if not path.is_file():
        raise MotionFileError(
            path,
            "file",
            "no such file or directory; expected a .npz motion file, a directory "
            "of them or a .yaml manifest",
        )
    return [ClipEntry(path, path.stem, weight)]


def _manifest_entries(path: Path) -> list[ClipEntry]:
    import yaml

    if not path.is_file():
        raise MotionFileError(path, "file", "no such manifest")
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise MotionFileError(path, "file", f"not a readable YAML manifest: {error}") from None
    clips = document.get("clips") if isinstance(document, dict) else None
    if not isinstance(clips, list) or not clips:
        raise MotionFileError(
            path, "clips", "expected a non-empty list of {file: PATH, weight: W} entries"
        )
    entries = []
    for k, item in enumerate(clips):
        where = f"clips[{k}]"
        if not isinstance(item, dict) or "file" not in item:
            raise MotionFileError(path, where, f"expected {{file: PATH, weight: W}}, got {item!r}")
        unknown = sorted(set(item) - set(MANIFEST_KEYS))
        if unknown:
            raise MotionFileError(path, where, f"unknown keys {unknown}; accepted: {MANIFEST_KEYS}")
        weight = item.get("weight", 1.0)
        number = isinstance(weight, (int, float)) and not isinstance(weight, bool)
        if not (number and math.isfinite(weight) and weight > 0):
            raise MotionFileError(
                path, f"{where}.weight", f"expected a finite number > 0, got {weight!r}"
            )
        entries.extend(_entries_of(path.parent / str(item["file"]), float(weight)))
    return entries


def load_dataset(
    source: str | Path | Sequence[str | Path],
    *,
    joint_names: Sequence[str],
    body_names: Sequence[str],
    fps: float,
    lead: Lead | None = None,
) -> MotionDataset:
    """Every clip ``source`` names, on the model's joints and bodies, at ``fps``, end to end,
    each with its ``lead`` frames when given."""
    started = time.perf_counter()
    entries = clip_entries(source)
    clips = [
        load_motion(entry.path, joint_names=joint_names, body_names=body_names, fps=fps)
        for entry in entries
    ]
    led = [with_lead(clip, lead) if lead else LedClip(clip, 0, 0) for clip in clips]
    dataset = concatenate(led, [entry.name for entry in entries], [e.weight for e in entries])
    if dataset.num_clips > 1:
        log.info(
            "motion dataset: %d clips, %d frames (%.1f s) at %g fps: %.1f ms",
            dataset.num_clips,
            dataset.table.num_frames,
            dataset.table.num_frames / fps,
            fps,
            elapsed_ms(started),
        )
    return dataset


def concatenate(
    led: Sequence[LedClip], names: Sequence[str], weights: Sequence[float]
) -> MotionDataset:
    """Clips of one model and one rate end to end; ``weights`` are normalized to sum to 1."""
    clips = [item.clip for item in led]
    first = clips[0]
    for clip in clips[1:]:
        if clip.fps != first.fps:
            raise MotionFileError(
                clip.source, "fps", f"{clip.fps}; expected {first.source}'s {first.fps}"
            )
        for field in ("joint_names", "body_names"):
            theirs, ours = list(getattr(clip, field)), list(getattr(first, field))
            if theirs != ours:
                at = next(
                    (k for k, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b),
                    min(len(theirs), len(ours)),
                )
                raise MotionFileError(
                    clip.source,
                    field,
                    f"{theirs[at : at + 1]} at entry {at} of {len(theirs)}; expected "
                    f"{first.source}'s {ours[at : at + 1]} of {len(ours)} (one model's clips)",
                )
    frames = np.array([clip.num_frames for clip in clips], np.int64)
    table = join(clips, first.source if len(clips) == 1 else f"{len(clips)} clips")
    weight = np.asarray(weights, np.float64)
    return MotionDataset(
        table=table,
        names=tuple(names),
        starts=np.concatenate([[0], np.cumsum(frames)[:-1]]).astype(np.int64),
        frames=frames,
        weights=weight / weight.sum(),
        lead_in=np.array([item.lead_in for item in led], np.int64),
        lead_out=np.array([item.lead_out for item in led], np.int64),
    )
