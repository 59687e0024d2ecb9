"""From the layouts people have to motion clips: forward kinematics, velocities, CSV files.

* The retargeted-CSV layout (LAFAN1 / Unitree retargeting) has one row per frame, comma
  separated, no header: root x, y, z, root quaternion x, y, z, w, then the joint angles in the
  model's joint order. :func:`convert_csv` reads it, resamples it, runs MuJoCo forward
  kinematics per frame for the body states and differentiates for the velocities;
  :func:`write_motion_csv` writes a clip back.
* A motion ``.npz`` (:func:`convert_npz`): one that :func:`~fuselab_envs.motion.load_motion`
  reads (BeyondMimic's layout with or without names and the floating base columns, mjlab's
  bodies in model order), or a joint-only clip: ``fps``, the joint trajectory (``joint_pos``,
  ``dof_pos`` or ``qpos``; by ``joint_names`` or in model order) and the root, as ``root_pos``
  with ``root_quat`` (w, x, y, z) or ``root_rot`` (x, y, z, w), or as the floating base's
  seven columns (x, y, z, qw, qx, qy, qz: MuJoCo's qpos) before the joints; its body states
  come from forward kinematics, as for a CSV.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import warnings
from pathlib import Path

import mujoco
import numpy as np
from tqdm import tqdm

from fuselab_env_core.backend import check_positive_float
from fuselab_env_core.rotations import np_quat_apply as quat_rotate
from fuselab_env_core.timing import elapsed_ms
from fuselab_envs.g1 import G1_XML_PATH
from fuselab_envs.motion.clip import (
    FRAME_RATE,
    MIN_FRAMES,
    MotionClip,
    MotionFileError,
    angular_velocity_w,
    finite_difference,
    frame_rate,
    lerp_frames,
    load_motion,
    name_array,
    read_npz_fields,
    resample_grid,
    slerp_frames,
)
from fuselab_sim_backends.model import model_facts

log = logging.getLogger(__name__)

CSV_ROOT_COLUMNS = 7  # root x, y, z, then the root quaternion x, y, z, w
FLOATING_BASE_COLUMNS = 7  # a qpos trajectory: root x, y, z, then the quaternion w, x, y, z
JOINT_TRAJECTORIES = ("joint_pos", "dof_pos", "qpos")  # a joint-only clip's joints: the first found
DEFAULT_OUTPUT_FPS = 50.0
FOOT_SITES = ("left_foot", "right_foot")


@functools.lru_cache(maxsize=4)
def load_model(path: str | Path = G1_XML_PATH) -> mujoco.MjModel:
    """The MuJoCo model clips are computed on (the project's G1 by default); read-only use."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model: no MJCF file at {str(path)!r}")
    return mujoco.MjModel.from_xml_path(str(path))


def _floating_base_check(model: mujoco.MjModel) -> None:
    free = int(mujoco.mjtJoint.mjJNT_FREE)
    if model.njnt == 0 or model.jnt_type[0] != free or model.jnt_qposadr[0] != 0:
        raise ValueError("model: expected a floating base (free joint) as the model's first joint")


# ---------------------------------------------------------------------------------------------
# Kinematics
# ---------------------------------------------------------------------------------------------


def forward_kinematics(
    model: mujoco.MjModel,
    root_pos: np.ndarray,
    root_quat: np.ndarray,
    joint_pos: np.ndarray,
    *,
    progress: bool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """World positions and (w, x, y, z) orientations of every body but 'world', per frame.

    ``root_quat`` is (w, x, y, z); ``joint_pos`` follows the model's hinge joints in model order.
    Returns float64 arrays (T, nbody - 1, 3) and (T, nbody - 1, 4).
    """
    _floating_base_check(model)
    facts = model_facts(model)
    num_frames = root_pos.shape[0]
    qpos = np.tile(model.qpos0, (num_frames, 1))
    qpos[:, 0:3] = root_pos
    qpos[:, 3:7] = root_quat
    qpos[:, facts.joint_qpos_adr] = joint_pos
    data = mujoco.MjData(model)
    body_pos = np.empty((num_frames, model.nbody - 1, 3))
    body_quat = np.empty((num_frames, model.nbody - 1, 4))
    disable = None if progress is None else not progress
    for k in tqdm(range(num_frames), desc="kinematics", unit="frame", disable=disable):
        data.qpos[:] = qpos[k]
        mujoco.mj_kinematics(model, data)
        body_pos[k] = data.xpos[1:]
        body_quat[k] = data.xquat[1:]
    return body_pos, body_quat


def clip_from_trajectory(
    model: mujoco.MjModel,
    *,
    fps: float,
    root_pos: np.ndarray,
    root_quat: np.ndarray,
    joint_pos: np.ndarray,
    source: str = "<memory>",
    progress: bool | None = None,
) -> MotionClip:
    """A clip from per-frame root poses and joint angles (model order): FK, finite differences."""
    body_pos, body_quat = forward_kinematics(
        model, root_pos, root_quat, joint_pos, progress=progress
    )
    dt = 1.0 / fps
    facts = model_facts(model)
    return MotionClip(
        fps=float(fps),
        joint_names=facts.joint_names,
        body_names=facts.body_names[1:],
        joint_pos=joint_pos.astype(np.float32),
        joint_vel=finite_difference(joint_pos, dt).astype(np.float32),
        body_pos_w=body_pos.astype(np.float32),
        body_quat_w=body_quat.astype(np.float32),
        body_lin_vel_w=finite_difference(body_pos, dt).astype(np.float32),
        body_ang_vel_w=angular_velocity_w(body_quat, dt).astype(np.float32),
        source=source,
    )


def foot_bodies(model: mujoco.MjModel) -> tuple[int, ...]:
    """The bodies that carry the model's foot sites (``FOOT_SITES``), in that order."""
    bodies = []
    for site in FOOT_SITES:
        site_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site)
        if site_id < 0:
            raise ValueError(f"model: expected foot sites {FOOT_SITES}, {site!r} is missing")
        bodies.append(int(model.site_bodyid[site_id]))
    return tuple(bodies)


def lowest_foot_points(
    model: mujoco.MjModel,
    body_names: tuple[str, ...],
    body_pos_w: np.ndarray,
    body_quat_w: np.ndarray,
) -> np.ndarray:
    """Height of the lowest point of each foot per frame, (T, feet), from body poses.

    The feet are the collision geoms (boxes, spheres or capsules) of the bodies that carry the
    model's foot sites.
    """
    heights = []
    for body_id in foot_bodies(model):
        body_name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body_id)
        column = body_names.index(body_name)
        geoms = [
            g
            for g in range(model.ngeom)
            if model.geom_bodyid[g] == body_id
            and (model.geom_contype[g] or model.geom_conaffinity[g])
        ]
        if not geoms:
            raise ValueError(f"model: foot body {body_name!r} has no collision geom")
        foot = np.full(body_pos_w.shape[0], np.inf)
        for g in geoms:
            points, radius = _support_points(model, g)  # in the body frame
            world = body_pos_w[:, None, column] + quat_rotate(
                body_quat_w[:, None, column].astype(np.float64), points[None]
            )
            foot = np.minimum(foot, world[..., 2].min(axis=1) - radius)
        heights.append(foot)
    return np.stack(heights, axis=1)


def _support_points(model: mujoco.MjModel, geom: int) -> tuple[np.ndarray, float]:
    """Points whose lowest one, less a radius, is the geom's lowest point (body frame)."""
    size = model.geom_size[geom]
    kind = int(model.geom_type[geom])
    if kind == int(mujoco.mjtGeom.mjGEOM_BOX):
        signs = np.array(np.meshgrid([-1.0, 1.0], [-1.0, 1.0], [-1.0, 1.0])).reshape(3, -1).T
        local, radius = signs * size, 0.0
    elif kind == int(mujoco.mjtGeom.mjGEOM_SPHERE):
        local, radius = np.zeros((1, 3)), float(size[0])
    elif kind == int(mujoco.mjtGeom.mjGEOM_CAPSULE):
        local, radius = np.array([[0.0, 0.0, -size[1]], [0.0, 0.0, size[1]]]), float(size[0])
    else:
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, geom)
        raise ValueError(
            f"model: foot geom {name!r}: expected a box, sphere or capsule, got a "
            f"{mujoco.mjtGeom(kind).name.removeprefix('mjGEOM_').lower()}"
        )
    points = model.geom_pos[geom] + quat_rotate(
        np.broadcast_to(model.geom_quat[geom], (len(local), 4)), local
    )
    return points, radius


# ---------------------------------------------------------------------------------------------
# CSV
# ---------------------------------------------------------------------------------------------


def _scan_csv(path: Path, columns: int, layout: str) -> None:
    """Find the first bad line for a precise message (only called once the fast parse failed)."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        cells = line.split(",")
        if len(cells) != columns:
            raise MotionFileError(
                path, f"line {number}", f"expected {columns} columns ({layout}), got {len(cells)}"
            )
        for column, cell in enumerate(cells, start=1):
            try:
                float(cell)
            except ValueError:
                raise MotionFileError(
                    path,
                    f"line {number}, column {column}",
                    f"expected a number, got {cell.strip()!r} (the layout has no header line)",
                ) from None


def read_motion_csv(path: str | Path, *, num_joints: int) -> np.ndarray:
    """The CSV's rows as a float64 array (T, 7 + num_joints), checked."""
    path = Path(path)
    columns = CSV_ROOT_COLUMNS + num_joints
    layout = f"root x,y,z, root quaternion x,y,z,w, {num_joints} joint angles"
    if not path.is_file():
        raise MotionFileError(path, "file", f"no such file; expected a CSV ({layout})")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # an empty file: reported below
            rows = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    except ValueError as error:
        _scan_csv(path, columns, layout)
        raise MotionFileError(path, "file", f"not a CSV of numbers ({layout}): {error}") from None
    if rows.shape[0] and rows.shape[1] != columns:
        _scan_csv(path, columns, layout)
    if rows.shape[0] < MIN_FRAMES:
        raise MotionFileError(
            path, "rows", f"expected at least {MIN_FRAMES} rows (frames), got {rows.shape[0]}"
        )
    bad = ~np.isfinite(rows)
    if bad.any():
        row, column = (int(i) for i in np.argwhere(bad)[0])
        raise MotionFileError(
            path,
            f"row {row + 1}, column {column + 1}",
            f"expected a finite number, got {rows[row, column]}",
        )
    norm = np.linalg.norm(rows[:, 3:7], axis=1)
    if (norm < 1e-6).any():
        row = int(np.argmax(norm < 1e-6))
        raise MotionFileError(
            path,
            f"row {row + 1}, columns 4-7",
            "expected a root quaternion (x, y, z, w), got zeros",
        )
    return rows


def convert_csv(
    path: str | Path,
    *,
    input_fps: float,
    output_fps: float = DEFAULT_OUTPUT_FPS,
    model: mujoco.MjModel | None = None,
    progress: bool | None = None,
) -> MotionClip:
    """A retargeted CSV (see the module doc) as a clip at ``output_fps`` on ``model`` (the G1)."""
    started = time.perf_counter()
    path = Path(path)
    for name, value in (("input_fps", input_fps), ("output_fps", output_fps)):
        check_positive_float(name, value, FRAME_RATE)
    model = load_model() if model is None else model
    num_joints = len(model_facts(model).joint_names)
    rows = read_motion_csv(path, num_joints=num_joints)
    clip = _trajectory_clip(
        model,
        path,
        input_fps,
        output_fps,
        root_pos=rows[:, 0:3],
        root_quat=rows[:, [6, 3, 4, 5]],  # x, y, z, w -> w, x, y, z
        joint_pos=rows[:, CSV_ROOT_COLUMNS:],
        progress=progress,
    )
    elapsed = time.perf_counter() - started
    log.info(
        "convert %s: %d rows at %g fps -> %d frames at %g fps (%.2f s of motion) in %.1f ms, "
        "%.0fx real time",
        path,
        rows.shape[0],
        input_fps,
        clip.num_frames,
        output_fps,
        clip.duration_s,
        elapsed * 1e3,
        clip.duration_s / max(elapsed, 1e-9),
    )
    return clip


def _trajectory_clip(
    model: mujoco.MjModel,
    path: Path,
    fps: float,
    output_fps: float,
    *,
    root_pos: np.ndarray,
    root_quat: np.ndarray,
    joint_pos: np.ndarray,
    progress: bool | None,
) -> MotionClip:
    """A clip at ``output_fps`` from root and joint trajectories at ``fps`` (model order)."""
    norm = np.linalg.norm(root_quat, axis=1, keepdims=True)
    if (norm < 1e-6).any():
        frame = int(np.argmax(norm[:, 0] < 1e-6))
        raise MotionFileError(path, f"frame {frame}", "expected a root quaternion, got zeros")
    root_quat = root_quat / norm
    if output_fps != fps:
        before, alpha = resample_grid(len(root_pos), fps, output_fps)
        if before.size < MIN_FRAMES:
            raise MotionFileError(
                path, "frames", f"too short to resample to {output_fps} fps ({len(root_pos)})"
            )
        root_pos = lerp_frames(root_pos, before, alpha)
        root_quat = slerp_frames(root_quat, before, alpha)
        joint_pos = lerp_frames(joint_pos, before, alpha)
    return clip_from_trajectory(
        model,
        fps=output_fps,
        root_pos=root_pos,
        root_quat=root_quat,
        joint_pos=joint_pos,
        source=str(path),
        progress=progress,
    )


def convert_npz(
    path: str | Path,
    *,
    output_fps: float | None = None,
    model: mujoco.MjModel | None = None,
    progress: bool | None = None,
    from_joints: bool = False,
) -> MotionClip:
    """A motion ``.npz`` of any layout of the module docstring as a clip of every body of
    ``model`` (the G1), at ``output_fps`` (None: the file's rate). ``from_joints``: every body
    state is recomputed from the root and joints by forward kinematics (a file whose body
    states came from another model, or whose velocities are another point's)."""
    started = time.perf_counter()
    path = Path(path)
    model = load_model() if model is None else model
    facts = model_facts(model)
    fields = read_npz_fields(path)
    if "body_pos_w" not in fields:
        clip = _joint_only_clip(path, fields, model, output_fps, progress)
    else:
        clip = load_motion(
            path, joint_names=facts.joint_names, body_names=facts.body_names, fps=output_fps
        )
        if from_joints:
            clip = _trajectory_clip(
                model,
                path,
                clip.fps,
                clip.fps,
                root_pos=clip.body_pos_w[:, 0].astype(np.float64),
                root_quat=clip.body_quat_w[:, 0].astype(np.float64),
                joint_pos=clip.joint_pos.astype(np.float64),
                progress=progress,
            )
    log.info(
        "convert %s: %d frames at %g fps in %.1f ms",
        path,
        clip.num_frames,
        clip.fps,
        elapsed_ms(started),
    )
    return clip


def grounded(clip: MotionClip, model: mujoco.MjModel | None = None) -> MotionClip:
    """The clip moved up or down so that, in its median frame, the lowest point of its feet
    touches the floor (a retargeted clip whose feet sink into the floor or float above it)."""
    model = load_model() if model is None else model
    feet = lowest_foot_points(model, clip.body_names, clip.body_pos_w, clip.body_quat_w)
    lift = -float(np.median(feet.min(axis=1)))
    body_pos_w = clip.body_pos_w.copy()
    body_pos_w[..., 2] += lift
    log.info("ground %s: moved %+.1f mm", clip.source, lift * 1e3)
    return dataclasses.replace(clip, body_pos_w=body_pos_w)


def _joint_only_clip(
    path: Path,
    fields: dict[str, np.ndarray],
    model: mujoco.MjModel,
    output_fps: float | None,
    progress: bool | None,
) -> MotionClip:
    """A clip from a joint-only ``.npz`` (module docstring): root and joints, then kinematics."""
    layout = (
        f"fps, one of {list(JOINT_TRAJECTORIES)} and the root (root_pos with root_quat (w, x, y, "
        "z) or root_rot (x, y, z, w), or the floating base's 7 columns first)"
    )
    if "fps" not in fields:
        raise MotionFileError(path, "fps", f"missing; a joint-only clip needs {layout}")
    fps = frame_rate(path, fields["fps"])
    name = next((f for f in JOINT_TRAJECTORIES if f in fields), None)
    if name is None:
        raise MotionFileError(
            path, "joint_pos", f"missing; a joint-only clip needs {layout}, got {sorted(fields)}"
        )
    joints = _float_frames(path, name, fields[name], None)
    file_names = name_array(path, fields, "joint_names")
    model_names = model_facts(model).joint_names
    count = len(file_names) if file_names is not None else len(model_names)
    if "root_pos" in fields:
        root_pos = _float_frames(path, "root_pos", fields["root_pos"], 3)
        if "root_quat" in fields:
            root_quat = _float_frames(path, "root_quat", fields["root_quat"], 4)
        elif "root_rot" in fields:
            root_quat = _float_frames(path, "root_rot", fields["root_rot"], 4)[:, [3, 0, 1, 2]]
        else:
            raise MotionFileError(path, "root_quat", f"missing beside root_pos; expected {layout}")
    elif joints.shape[1] == count + FLOATING_BASE_COLUMNS:
        root_pos, root_quat = joints[:, 0:3], joints[:, 3:7]
        joints = joints[:, FLOATING_BASE_COLUMNS:]
    else:
        raise MotionFileError(path, name, f"no root: expected {layout}")
    if joints.shape[1] != count:
        raise MotionFileError(path, name, f"expected {count} joint columns, got {joints.shape[1]}")
    if file_names is not None:
        missing = [n for n in model_names if n not in file_names]
        if missing:
            raise MotionFileError(
                path, "joint_names", f"the model's joints {missing} are not in the file"
            )
        joints = joints[:, [file_names.index(n) for n in model_names]]
    lengths = {len(root_pos), len(root_quat), len(joints)}
    if len(lengths) != 1 or len(joints) < MIN_FRAMES:
        raise MotionFileError(
            path,
            name,
            f"expected one frame count >= {MIN_FRAMES} for root and joints, got {lengths}",
        )
    return _trajectory_clip(
        model,
        path,
        fps,
        output_fps or fps,
        root_pos=root_pos,
        root_quat=root_quat,
        joint_pos=joints,
        progress=progress,
    )


def _float_frames(path: Path, name: str, raw: np.ndarray, width: int | None) -> np.ndarray:
    """A (T, width) float64 array of finite numbers, or an error naming the field."""
    if (
        raw.ndim != 2
        or (width is not None and raw.shape[1] != width)
        or raw.dtype.kind not in "fiu"
    ):
        shape = f"(T, {width})" if width else "(T, columns)"
        raise MotionFileError(
            path, name, f"expected numbers of shape {shape}, got {raw.dtype} {raw.shape}"
        )
    values = raw.astype(np.float64)
    if not np.isfinite(values).all():
        frame = int(np.argwhere(~np.isfinite(values))[0, 0])
        raise MotionFileError(path, name, f"expected finite numbers; frame {frame} is not")
    return values


def write_motion_csv(clip: MotionClip, path: str | Path) -> Path:
    """Write a clip in the retargeted-CSV layout; the root is the clip's first body."""
    path = Path(path)
    root_quat = clip.body_quat_w[:, 0].astype(np.float64)
    rows = np.concatenate(
        (
            clip.body_pos_w[:, 0].astype(np.float64),
            root_quat[:, [1, 2, 3, 0]],  # w, x, y, z -> x, y, z, w
            clip.joint_pos.astype(np.float64),
        ),
        axis=1,
    )
    np.savetxt(path, rows, fmt="%.9g", delimiter=",")
    log.info("write CSV %s: %d rows (root %r)", path, rows.shape[0], clip.body_names[0])
    return path
