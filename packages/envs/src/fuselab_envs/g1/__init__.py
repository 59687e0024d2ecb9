"""The project's Unitree G1 29-DoF MuJoCo model, generated from a table of public numbers.

``G1_XML_PATH`` is the committed MJCF (regenerate with ``python -m fuselab_envs.g1.build``);
``build_g1_spec()`` builds the same model as a ``mujoco.MjSpec``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fuselab_envs.g1.table import (
    ACTION_SCALE,
    ACTUATOR_NAMES,
    BODIES,
    BODY_NAMES,
    DEFAULT_JOINT_POS,
    GEOMS,
    JOINT_NAMES,
    JOINTS,
    MOTORS,
    SITES,
    STANDING_KEYFRAME,
    STANDING_PELVIS_HEIGHT,
    BodyRow,
    GeomRow,
    JointRow,
    MotorType,
    SiteRow,
)

if TYPE_CHECKING:
    from fuselab_envs.g1.build import build_g1_spec

G1_XML_PATH: Path = Path(__file__).resolve().parent / "g1.xml"


def __getattr__(name: str) -> Any:
    # Imported lazily: ``python -m fuselab_envs.g1.build`` then runs the module only once, and
    # the table stays importable without MuJoCo.
    if name == "build_g1_spec":
        from fuselab_envs.g1.build import build_g1_spec

        return build_g1_spec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ACTION_SCALE",
    "ACTUATOR_NAMES",
    "BODIES",
    "BODY_NAMES",
    "DEFAULT_JOINT_POS",
    "G1_XML_PATH",
    "GEOMS",
    "JOINTS",
    "JOINT_NAMES",
    "MOTORS",
    "SITES",
    "STANDING_KEYFRAME",
    "STANDING_PELVIS_HEIGHT",
    "BodyRow",
    "GeomRow",
    "JointRow",
    "MotorType",
    "SiteRow",
    "build_g1_spec",
]
