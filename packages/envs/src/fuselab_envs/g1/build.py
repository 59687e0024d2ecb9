"""Build the project's Unitree G1 29-DoF MuJoCo model from :mod:`fuselab_envs.g1.table`.

``python -m fuselab_envs.g1.build`` regenerates the committed ``g1.xml`` next to this file.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import mujoco

from fuselab_envs.g1 import G1_XML_PATH
from fuselab_envs.g1 import table as t

log = logging.getLogger(__name__)

TIMESTEP = 0.005  # 200 Hz physics
MODEL_NAME = "g1_29dof"

# Collision filtering: the robot's collision geoms have contype 0 and conaffinity 1, so they touch
# the floor (contype 1) but never each other; visual geoms touch nothing.
_ROBOT_CONTYPE, _ROBOT_CONAFFINITY = 0, 1
_FLOOR_CONTYPE, _FLOOR_CONAFFINITY = 1, 0
VISUAL_GROUP, COLLISION_GROUP = 2, 3

_GEOM_TYPES = {
    "capsule": mujoco.mjtGeom.mjGEOM_CAPSULE,
    "box": mujoco.mjtGeom.mjGEOM_BOX,
    "sphere": mujoco.mjtGeom.mjGEOM_SPHERE,
}
_VISUAL_RGBA = (0.7, 0.7, 0.7, 1.0)
_COLLISION_RGBA = (0.8, 0.3, 0.3, 0.5)


def _size3(size: tuple[float, ...]) -> list[float]:
    return [*size, *([0.0] * (3 - len(size)))]


def _add_geom(body: mujoco.MjsBody, row: t.GeomRow) -> None:
    geom = body.add_geom()
    if row.name:
        geom.name = row.name
    geom.type = _GEOM_TYPES[row.kind]
    geom.size = _size3(row.size)
    if row.fromto is not None:
        geom.fromto = list(row.fromto)
    else:
        geom.pos = list(row.pos)
    if row.collision:
        geom.contype, geom.conaffinity = _ROBOT_CONTYPE, _ROBOT_CONAFFINITY
        geom.group = COLLISION_GROUP
        geom.condim = 3
        # The robot's side sets a contact's friction (not the larger of the two geoms'), so a
        # randomized foot friction reaches the physics; nominally both sides are equal.
        geom.priority = 1
        geom.rgba = list(_COLLISION_RGBA)
    else:
        geom.contype, geom.conaffinity = 0, 0
        geom.group = VISUAL_GROUP
        geom.rgba = list(_VISUAL_RGBA)
    geom.density = 0.0


def _add_scene(spec: mujoco.MjSpec) -> None:
    floor = spec.worldbody.add_geom()
    floor.name = "floor"
    floor.type = mujoco.mjtGeom.mjGEOM_PLANE
    floor.size = [0.0, 0.0, 0.05]
    floor.contype, floor.conaffinity = _FLOOR_CONTYPE, _FLOOR_CONAFFINITY
    floor.condim = 3
    floor.rgba = [0.25, 0.3, 0.35, 1.0]
    light = spec.worldbody.add_light()
    light.name = "sun"
    light.pos = [0.0, 0.0, 3.5]
    light.dir = [0.0, 0.0, -1.0]


def build_g1_spec() -> mujoco.MjSpec:
    """The G1 29-DoF on a floor: explicit inertias, primitive geoms, PD position actuators."""
    spec = mujoco.MjSpec()
    spec.modelname = MODEL_NAME
    spec.compiler.degree = False
    spec.compiler.autolimits = True
    spec.compiler.inertiafromgeom = mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_FALSE
    spec.option.timestep = TIMESTEP
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST

    _add_scene(spec)

    bodies: dict[str, mujoco.MjsBody] = {"world": spec.worldbody}
    joints_by_body = {j.body: j for j in t.JOINTS}
    geoms_by_body: dict[str, list[t.GeomRow]] = {}
    for g in t.GEOMS:
        geoms_by_body.setdefault(g.body, []).append(g)
    sites_by_body: dict[str, list[t.SiteRow]] = {}
    for s in t.SITES:
        sites_by_body.setdefault(s.body, []).append(s)

    for row in t.BODIES:
        body = bodies[row.parent].add_body()
        body.name = row.name
        body.pos = list(row.pos)
        body.quat = list(row.quat)
        body.explicitinertial = True
        body.mass = row.mass
        body.ipos = list(row.com)
        body.iquat = list(row.inertia_quat)
        body.inertia = list(row.inertia)
        bodies[row.name] = body

        if row.parent == "world":
            body.add_freejoint(name=t.FLOATING_BASE_JOINT)
        if row.name in joints_by_body:
            j = joints_by_body[row.name]
            joint = body.add_joint()
            joint.name = j.name
            joint.type = mujoco.mjtJoint.mjJNT_HINGE
            joint.axis = list(j.axis)
            joint.range = list(j.range)
            joint.limited = mujoco.mjtLimited.mjLIMITED_TRUE
            joint.armature = j.armature
        for g in geoms_by_body.get(row.name, []):
            _add_geom(body, g)
        for s in sites_by_body.get(row.name, []):
            site = body.add_site()
            site.name = s.name
            site.pos = list(s.pos)
            site.size = [0.01, 0.0, 0.0]
            site.group = 5

    for j in t.JOINTS:
        act = spec.add_actuator()
        act.name = t.actuator_name(j.name)
        act.target = j.name
        act.trntype = mujoco.mjtTrn.mjTRN_JOINT
        act.set_to_position(kp=t.KP[j.name], kv=t.KD[j.name])
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.ctrlrange = list(j.range)
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-j.effort_limit, j.effort_limit]

    for site in ("imu_in_pelvis", "imu_in_torso"):
        for kind, stype in (
            ("gyro", mujoco.mjtSensor.mjSENS_GYRO),
            ("accelerometer", mujoco.mjtSensor.mjSENS_ACCELEROMETER),
        ):
            sensor = spec.add_sensor()
            sensor.name = f"{site}_{kind}"
            sensor.type = stype
            sensor.objtype = mujoco.mjtObj.mjOBJ_SITE
            sensor.objname = site

    default_q = [t.DEFAULT_JOINT_POS[n] for n in t.JOINT_NAMES]
    key = spec.add_key()
    key.name = t.STANDING_KEYFRAME
    key.qpos = [0.0, 0.0, t.STANDING_PELVIS_HEIGHT, 1.0, 0.0, 0.0, 0.0, *default_q]
    key.ctrl = default_q
    return spec


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=G1_XML_PATH, help="MJCF file to write")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    spec = build_g1_spec()
    spec.compile()
    args.out.write_text(spec.to_xml())
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
