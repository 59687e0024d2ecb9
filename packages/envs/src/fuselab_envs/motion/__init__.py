"""Reference motions for the G1 motion-tracking task: BeyondMimic ``.npz`` clips.

``load_motion`` reads a clip onto the model's joints and bodies; ``DEFAULT_MOTION_PATH`` is the
embedded default clip (procedural, see :mod:`fuselab_envs.motion.synth`). The ``fuselab-motion``
command inspects clips, converts retargeted CSV files and writes the procedural clip.
"""

import importlib
from typing import Any

from fuselab_envs.motion.clip import DEFAULT_MOTION_PATH, MotionClip, MotionFileError, load_motion

# The converters build MuJoCo models: they (and mujoco) load only when used, so importing the
# task registry stays light and loads no OpenGL backend (mujoco loads MUJOCO_GL's on import).
_LAZY = {
    "convert_csv": "fuselab_envs.motion.convert",
    "write_motion_csv": "fuselab_envs.motion.convert",
    "synth_clip": "fuselab_envs.motion.synth",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_MOTION_PATH",
    "MotionClip",
    "MotionFileError",
    "convert_csv",
    "load_motion",
    "synth_clip",
    "write_motion_csv",
]
