"""Reference motions for the G1 motion-tracking task: BeyondMimic ``.npz`` clips.

``load_motion`` reads a clip onto the model's joints and bodies; ``DEFAULT_MOTION_PATH`` is the
embedded default clip (procedural, see :mod:`fuselab_envs.motion.synth`). The ``fuselab-motion``
command inspects clips, converts retargeted CSV files and writes the procedural clip.
"""

from fuselab_envs.motion.clip import DEFAULT_MOTION_PATH, MotionClip, MotionFileError, load_motion
from fuselab_envs.motion.convert import convert_csv, write_motion_csv
from fuselab_envs.motion.synth import synth_clip

__all__ = [
    "DEFAULT_MOTION_PATH",
    "MotionClip",
    "MotionFileError",
    "convert_csv",
    "load_motion",
    "synth_clip",
    "write_motion_csv",
]
