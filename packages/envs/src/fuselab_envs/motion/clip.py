"""Reference motion clips in the BeyondMimic ``.npz`` layout: load, validate, resample, save.

A motion file holds, per frame, the robot's joint angles and velocities and the world-frame state
of its bodies (position, (w, x, y, z) orientation, linear velocity of the body origin, angular
velocity), sampled at ``fps``. :func:`load_motion` maps such a file onto a model's joints and bodies
by name (or by order when the file carries no names) and returns a :class:`MotionClip`.
"""

from __future__ import annotations

import logging
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from fuselab_env_core.rotations import np_quat_conjugate as quat_conjugate
from fuselab_env_core.rotations import np_quat_mul as quat_mul
from fuselab_env_core.timing import elapsed_ms

log = logging.getLogger(__name__)

DEFAULT_MOTION_PATH: Path = Path(__file__).resolve().parent / "data" / "g1_synth.npz"

QUAT_NORM_TOLERANCE = 1e-3
MIN_FRAMES = 2
FRAME_RATE = "a frame rate > 0"  # what an fps accepts, as its errors say
# Some exporters keep the floating base in the joint arrays: root xyz + quaternion in positions,
# root linear + angular velocity in velocities. These leading columns are stripped.
FLOATING_BASE_POS_COLUMNS = 7
FLOATING_BASE_VEL_COLUMNS = 6

FRAME_FIELDS = (
    "joint_pos",
    "joint_vel",
    "body_pos_w",
    "body_quat_w",
    "body_lin_vel_w",
    "body_ang_vel_w",
)
REQUIRED_FIELDS = ("fps", *FRAME_FIELDS)
_BODY_FIELD_WIDTH = {"body_pos_w": 3, "body_quat_w": 4, "body_lin_vel_w": 3, "body_ang_vel_w": 3}

# A clip's velocities are the rate of change of its poses. How far a file's may differ from the
# poses' finite differences (median over frames and joints or bodies) before they are taken for
# another quantity and recomputed: real clips at 50 fps differ by under 0.005 m/s and 0.02 rad/s;
# holosoma's box lift by 0.21 m/s and 1.03 rad/s (its body velocities follow from a root angular
# velocity given in the world frame where MuJoCo's free joint takes the body frame).
VELOCITY_TOLERANCE = {"joint_vel": 0.05, "body_lin_vel_w": 0.05, "body_ang_vel_w": 0.1}
_POSE_OF_VELOCITY = {
    "joint_vel": ("joint_pos", "rad/s"),
    "body_lin_vel_w": ("body_pos_w", "m/s"),
    "body_ang_vel_w": ("body_quat_w", "rad/s"),
}


class MotionFileError(ValueError):
    """A motion file or clip that cannot be used; names the file, the field and the expectation."""

    def __init__(self, source: str | Path, field: str, message: str) -> None:
        self.source = str(source)
        self.field = field
        super().__init__(f"{source}: {field}: {message}")


# ---------------------------------------------------------------------------------------------
# Quaternions (w, x, y, z), vectorized over leading axes
# ---------------------------------------------------------------------------------------------


def quat_to_rotvec(q: np.ndarray) -> np.ndarray:
    """Axis * angle (radians, in [0, pi]) of unit quaternions; ``q`` and ``-q`` give the same."""
    q = np.where(q[..., :1] < 0.0, -q, q)
    w = q[..., :1]
    v = q[..., 1:]
    s = np.linalg.norm(v, axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(s, w)
    # angle / s -> 2 / w as the rotation vanishes; w is ~1 there.
    scale = np.where(s > 1e-9, angle / np.maximum(s, 1e-300), 2.0 / np.maximum(w, 1e-300))
    return v * scale


def quat_slerp(q0: np.ndarray, q1: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Spherical interpolation along the shorter arc; ``alpha`` broadcasts to ``q0.shape[:-1]``."""
    t = np.asarray(alpha, dtype=np.float64)[..., None]
    dot = np.sum(q0 * q1, axis=-1, keepdims=True)
    q1 = np.where(dot < 0.0, -q1, q1)
    theta = np.arccos(np.clip(np.abs(dot), 0.0, 1.0))
    sin_theta = np.sin(theta)
    nearly_equal = sin_theta < 1e-6  # plain lerp is exact to round-off there
    safe_sin = np.where(nearly_equal, 1.0, sin_theta)
    w0 = np.where(nearly_equal, 1.0 - t, np.sin((1.0 - t) * theta) / safe_sin)
    w1 = np.where(nearly_equal, t, np.sin(t * theta) / safe_sin)
    q = w0 * q0 + w1 * q1
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def finite_difference(x: np.ndarray, dt: float) -> np.ndarray:
    """d/dt along frames: central differences inside, one-sided at the two ends."""
    return np.gradient(x, dt, axis=0)


def angular_velocity_w(quat: np.ndarray, dt: float) -> np.ndarray:
    """World-frame angular velocity from (w, x, y, z) orientations per frame, (T, ..., 3).

    q(t + h) = exp(w h) q(t) in the world frame, so w is the rotation vector of
    q(t + h) q(t - h)^-1 over 2h (central), or of q(t + h) q(t)^-1 over h at the ends.
    """
    omega = np.empty((*quat.shape[:-1], 3))
    omega[1:-1] = quat_to_rotvec(quat_mul(quat[2:], quat_conjugate(quat[:-2]))) / (2.0 * dt)
    omega[0] = quat_to_rotvec(quat_mul(quat[1], quat_conjugate(quat[0]))) / dt
    omega[-1] = quat_to_rotvec(quat_mul(quat[-1], quat_conjugate(quat[-2]))) / dt
    return omega


# ---------------------------------------------------------------------------------------------
# Resampling on a uniform time grid
# ---------------------------------------------------------------------------------------------


def resample_grid(num_frames: int, fps: float, new_fps: float) -> tuple[np.ndarray, np.ndarray]:
    """For each new frame: the source frame before it and the fraction towards the next one.

    The new grid starts at the first frame and keeps every instant inside the source clip.
    """
    duration_s = (num_frames - 1) / fps
    # The 1e-6 lets a grid that ends exactly on the last source frame keep it despite round-off.
    num_new = int(np.floor(duration_s * new_fps + 1e-6)) + 1
    src = np.arange(num_new, dtype=np.float64) * (fps / new_fps)
    before = np.minimum(np.floor(src).astype(np.int64), num_frames - 2)
    return before, np.clip(src - before, 0.0, 1.0)


def lerp_frames(x: np.ndarray, before: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    a = alpha.reshape(-1, *([1] * (x.ndim - 1)))
    x = x.astype(np.float64, copy=False)
    return x[before] * (1.0 - a) + x[before + 1] * a


def slerp_frames(q: np.ndarray, before: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    a = alpha.reshape(-1, *([1] * (q.ndim - 2)))
    q = q.astype(np.float64, copy=False)
    return quat_slerp(q[before], q[before + 1], a)


# ---------------------------------------------------------------------------------------------
# The clip
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class MotionClip:
    """One reference motion, on a model's joints and bodies (model order, no 'world')."""

    fps: float
    joint_names: tuple[str, ...]
    body_names: tuple[str, ...]
    joint_pos: np.ndarray  # (T, J) float32, radians
    joint_vel: np.ndarray  # (T, J) float32, rad/s
    body_pos_w: np.ndarray  # (T, B, 3) float32, world
    body_quat_w: np.ndarray  # (T, B, 4) float32, (w, x, y, z), unit
    body_lin_vel_w: np.ndarray  # (T, B, 3) float32, world, velocity of the body origin
    body_ang_vel_w: np.ndarray  # (T, B, 3) float32, world
    source: str = "<memory>"

    def __post_init__(self) -> None:
        num_frames, num_joints, num_bodies = (
            self.joint_pos.shape[0],
            len(self.joint_names),
            len(self.body_names),
        )
        expected = {
            "joint_pos": (num_frames, num_joints),
            "joint_vel": (num_frames, num_joints),
            **{name: (num_frames, num_bodies, width) for name, width in _BODY_FIELD_WIDTH.items()},
        }
        for name, shape in expected.items():
            array = getattr(self, name)
            if array.shape != shape:
                raise MotionFileError(
                    self.source, name, f"expected shape {shape} (T, ...), got {array.shape}"
                )
        if not (np.isfinite(self.fps) and self.fps > 0):
            raise MotionFileError(self.source, "fps", f"expected a rate > 0, got {self.fps}")
        if num_frames < MIN_FRAMES:
            raise MotionFileError(
                self.source, "joint_pos", f"expected at least {MIN_FRAMES} frames, got {num_frames}"
            )

    @property
    def num_frames(self) -> int:
        return int(self.joint_pos.shape[0])

    @property
    def duration_s(self) -> float:
        """Time from the first to the last frame."""
        return (self.num_frames - 1) / self.fps

    def body_index(self, name: str) -> int:
        return name_index(self.body_names, name, f"{self.source}: body", "the clip's bodies")

    def joint_index(self, name: str) -> int:
        return name_index(self.joint_names, name, f"{self.source}: joint", "the clip's joints")

    def resample(self, fps: float) -> MotionClip:
        """The clip at another frame rate: lerp for vectors and angles, slerp for orientations."""
        if not (np.isfinite(fps) and fps > 0):
            raise MotionFileError(self.source, "fps", f"expected a target rate > 0, got {fps}")
        if fps == self.fps:
            return self
        before, alpha = resample_grid(self.num_frames, self.fps, fps)
        if before.size < MIN_FRAMES:
            raise MotionFileError(
                self.source,
                "fps",
                f"a {self.duration_s:.3f} s clip gives fewer than {MIN_FRAMES} frames at {fps} fps",
            )

        def lerp(x: np.ndarray) -> np.ndarray:
            return lerp_frames(x, before, alpha).astype(np.float32)

        return MotionClip(
            fps=float(fps),
            joint_names=self.joint_names,
            body_names=self.body_names,
            joint_pos=lerp(self.joint_pos),
            joint_vel=lerp(self.joint_vel),
            body_pos_w=lerp(self.body_pos_w),
            body_quat_w=slerp_frames(self.body_quat_w, before, alpha).astype(np.float32),
            body_lin_vel_w=lerp(self.body_lin_vel_w),
            body_ang_vel_w=lerp(self.body_ang_vel_w),
            source=self.source,
        )

    def cut(self, frames: slice, source: str | None = None) -> MotionClip:
        """The clip's ``frames`` alone (views), named ``source`` when given."""
        cut = {field: getattr(self, field)[frames] for field in FRAME_FIELDS}
        return replace(self, **cut, source=self.source if source is None else source)

    def save(self, path: str | Path) -> Path:
        """Write the BeyondMimic ``.npz`` layout (plus ``joint_names``/``body_names``).

        Written with fixed zip timestamps, so the same clip always gives the same bytes.
        """
        path = Path(path)
        arrays: dict[str, np.ndarray] = {
            "fps": np.array([self.fps], dtype=np.float64),
            **{name: np.ascontiguousarray(getattr(self, name)) for name in FRAME_FIELDS},
            "joint_names": np.array(self.joint_names, dtype=np.str_),
            "body_names": np.array(self.body_names, dtype=np.str_),
        }
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, array in arrays.items():
                info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                with archive.open(info, "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, array, allow_pickle=False)
        log.info("save motion %s: %d frames at %g fps", path, self.num_frames, self.fps)
        return path


def pose_rates(clip: MotionClip) -> dict[str, np.ndarray]:
    """Each velocity field of ``clip`` as the rate of change of its pose (finite differences)."""
    dt = 1.0 / clip.fps
    return {
        "joint_vel": finite_difference(clip.joint_pos.astype(np.float64), dt),
        "body_lin_vel_w": finite_difference(clip.body_pos_w.astype(np.float64), dt),
        "body_ang_vel_w": angular_velocity_w(clip.body_quat_w.astype(np.float64), dt),
    }


def velocity_mismatches(
    clip: MotionClip, rates: dict[str, np.ndarray] | None = None
) -> dict[str, str]:
    """The velocity fields that contradict the poses beyond ``VELOCITY_TOLERANCE``, each with a
    line that says by how much; ``rates`` are :func:`pose_rates` when already computed."""
    rates = pose_rates(clip) if rates is None else rates
    found = {}
    for field, rate in rates.items():
        difference = rate - getattr(clip, field)
        size = np.abs(difference) if field == "joint_vel" else np.linalg.norm(difference, axis=-1)
        median = float(np.median(size))
        if median > VELOCITY_TOLERANCE[field]:
            pose, unit = _POSE_OF_VELOCITY[field]
            found[field] = (
                f"{field} differs from the rate of change of {pose} by {median:.3g} {unit} "
                f"(median; up to {VELOCITY_TOLERANCE[field]:g} is taken as the same motion)"
            )
    return found


def with_consistent_velocities(clip: MotionClip) -> MotionClip:
    """``clip`` with each velocity field that contradicts its poses recomputed from them (a
    warning names the field): a reference whose velocities and poses disagree rewards motion
    that no robot following the poses makes."""
    rates = pose_rates(clip)
    mismatches = velocity_mismatches(clip, rates)
    for line in mismatches.values():
        log.warning("%s: %s; recomputed from the poses", clip.source, line)
    fixed = {field: rates[field].astype(np.float32) for field in mismatches}
    return replace(clip, **fixed) if fixed else clip


def join(clips: Sequence[MotionClip], source: str) -> MotionClip:
    """Clips of one model and one rate, one after another, as one clip named ``source``."""
    joined = {field: np.concatenate([getattr(c, field) for c in clips]) for field in FRAME_FIELDS}
    return replace(clips[0], **joined, source=source)


def name_index(names: Sequence[str], name: str, what: str, among: str) -> int:
    """Where ``name`` is in ``names``; else a KeyError: '<what> <name> is not among <among>'."""
    if name not in names:
        raise KeyError(f"{what} {name!r} is not among {among}: {', '.join(names)}")
    return list(names).index(name)


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def read_npz_fields(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise MotionFileError(path, "file", "no such file; expected a motion .npz file")
    with path.open("rb") as head:
        magic = head.read(6)
    if magic == b"\x93NUMPY":
        raise MotionFileError(
            path, "file", "holds a single .npy array; expected an .npz archive of fields"
        )
    if not magic.startswith(b"PK"):
        raise MotionFileError(
            path, "file", "not an .npz archive (a zip of .npy arrays, as numpy.savez writes)"
        )
    try:
        with np.load(path, allow_pickle=False) as loaded:
            fields: dict[str, np.ndarray] = {}
            for name in loaded.files:
                try:
                    fields[name] = loaded[name]
                except ValueError as error:  # object arrays need pickle, which is refused
                    raise MotionFileError(
                        path, name, f"expected a plain numeric or string array ({error})"
                    ) from None
            return fields
    except MotionFileError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
        raise MotionFileError(
            path, "file", f"not a readable .npz archive (numpy.savez): {error}"
        ) from None


def frame_rate(path: Path, raw: np.ndarray) -> float:
    if raw.size != 1 or not np.issubdtype(raw.dtype, np.number):
        raise MotionFileError(
            path, "fps", f"expected one number, got {raw.dtype} array of shape {raw.shape}"
        )
    fps = float(raw.reshape(()))
    if not (np.isfinite(fps) and fps > 0):
        raise MotionFileError(path, "fps", f"expected {FRAME_RATE}, got {fps}")
    return fps


def _numeric(path: Path, name: str, raw: np.ndarray, ndim: int, layout: str) -> np.ndarray:
    if not (np.issubdtype(raw.dtype, np.floating) or np.issubdtype(raw.dtype, np.integer)):
        raise MotionFileError(path, name, f"expected numbers {layout}, got dtype {raw.dtype}")
    if raw.ndim != ndim:
        raise MotionFileError(path, name, f"expected shape {layout}, got {raw.shape}")
    return raw.astype(np.float64)


def name_array(path: Path, fields: dict[str, np.ndarray], name: str) -> tuple[str, ...] | None:
    if name not in fields:
        return None
    raw = fields[name]
    if raw.ndim != 1 or raw.dtype.kind not in "US":
        raise MotionFileError(
            path, name, f"expected a 1-D array of strings, got {raw.dtype} of shape {raw.shape}"
        )
    names = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in raw.tolist())
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise MotionFileError(path, name, f"expected unique names, repeated: {duplicates}")
    return names


def _select_by_name(
    path: Path, field: str, file_names: tuple[str, ...], wanted: Sequence[str], kind: str
) -> np.ndarray:
    index = {n: i for i, n in enumerate(file_names)}
    missing = [n for n in wanted if n not in index]
    if missing:
        raise MotionFileError(
            path,
            field,
            f"the model's {kind} {missing} are not in the file; it has {list(file_names)}",
        )
    extra = [n for n in file_names if n not in set(wanted)]
    if extra:
        log.debug("%s: ignoring %s not in the model: %s", path, kind, extra)
    return np.array([index[n] for n in wanted], dtype=np.int64)


def _joint_columns(
    path: Path,
    fields: dict[str, np.ndarray],
    arrays: dict[str, np.ndarray],
    joint_names: Sequence[str],
) -> None:
    """Reduce joint_pos / joint_vel to the model's joints, in model order (in place in arrays)."""
    file_names = name_array(path, fields, "joint_names")
    count = len(file_names) if file_names is not None else len(joint_names)
    names_note = "the file's joint_names" if file_names is not None else "the model's joints"
    for field, base in (
        ("joint_pos", FLOATING_BASE_POS_COLUMNS),
        ("joint_vel", FLOATING_BASE_VEL_COLUMNS),
    ):
        columns = arrays[field].shape[1]
        if columns == count + base:
            arrays[field] = arrays[field][:, base:]
        elif columns != count:
            raise MotionFileError(
                path,
                field,
                f"expected {count} columns ({names_note}), or {count + base} with the floating "
                f"base first, got {columns}",
            )
    if file_names is not None:
        index = _select_by_name(path, "joint_names", file_names, joint_names, "joints")
        for field in ("joint_pos", "joint_vel"):
            arrays[field] = arrays[field][:, index]


def _body_columns(
    path: Path,
    fields: dict[str, np.ndarray],
    arrays: dict[str, np.ndarray],
    body_names: Sequence[str],
) -> None:
    """Reduce the body fields to the model's bodies, in model order (in place in arrays)."""
    file_names = name_array(path, fields, "body_names")
    for field, width in _BODY_FIELD_WIDTH.items():
        if arrays[field].shape[2] != width:
            raise MotionFileError(
                path, field, f"expected shape (T, bodies, {width}), got {arrays[field].shape}"
            )
    if file_names is not None:
        for field in _BODY_FIELD_WIDTH:
            if arrays[field].shape[1] != len(file_names):
                raise MotionFileError(
                    path,
                    field,
                    f"expected {len(file_names)} bodies (one per body_names entry), "
                    f"got {arrays[field].shape[1]}",
                )
        index = _select_by_name(path, "body_names", file_names, body_names, "bodies")
    else:
        count = len(body_names)
        columns = arrays["body_pos_w"].shape[1]
        if columns not in (count, count + 1):
            raise MotionFileError(
                path,
                "body_pos_w",
                f"without body_names the bodies must be the model's {count} in model order "
                f"(or {count + 1} with 'world' first), got {columns}",
            )
        for field in _BODY_FIELD_WIDTH:
            if arrays[field].shape[1] != columns:
                raise MotionFileError(
                    path,
                    field,
                    f"expected {columns} bodies like body_pos_w, got {arrays[field].shape[1]}",
                )
        index = np.arange(columns - count, columns)
    for field in _BODY_FIELD_WIDTH:
        arrays[field] = arrays[field][:, index]


def _check_values(
    path: Path, arrays: dict[str, np.ndarray], joint_names: Sequence[str], body_names: Sequence[str]
) -> None:
    for field, array in arrays.items():
        bad = ~np.isfinite(array)
        if bad.any():
            where = np.argwhere(bad)[0]
            frame, column = int(where[0]), int(where[1])
            name = (joint_names if field.startswith("joint") else body_names)[column]
            raise MotionFileError(
                path,
                field,
                f"expected finite numbers; {int(bad.sum())} are not, the first at frame {frame} "
                f"({name!r})",
            )
    norm = np.linalg.norm(arrays["body_quat_w"], axis=-1)
    off = np.abs(norm - 1.0) > QUAT_NORM_TOLERANCE
    if off.any():
        frame, body = (int(i) for i in np.argwhere(off)[0])
        raise MotionFileError(
            path,
            "body_quat_w",
            f"expected unit quaternions (w, x, y, z) within {QUAT_NORM_TOLERANCE}; "
            f"{int(off.sum())} are not, the first at frame {frame} body {body_names[body]!r} "
            f"with norm {norm[frame, body]:.6g}",
        )


def load_motion(
    path: str | Path,
    *,
    joint_names: Sequence[str],
    body_names: Sequence[str],
    fps: float | None = None,
    file_velocities: bool = False,
) -> MotionClip:
    """Load a BeyondMimic-layout ``.npz`` onto a model's joints and bodies.

    ``joint_names`` are the model's hinge joints and ``body_names`` its bodies, both in model
    order (a leading 'world' body is dropped). The file is matched by its ``joint_names`` /
    ``body_names`` arrays when present (extra entries ignored), otherwise by order. ``fps=None``
    keeps the file's rate; any other value resamples the clip to it. Velocities that contradict
    the file's poses are recomputed from them (:func:`with_consistent_velocities`) unless
    ``file_velocities`` (what ``fuselab-motion inspect`` reports on).
    """
    started = time.perf_counter()
    path = Path(path)
    joint_names = tuple(joint_names)
    body_names = tuple(body_names)
    if body_names and body_names[0] == "world":
        body_names = body_names[1:]

    fields = read_npz_fields(path)
    missing = [name for name in REQUIRED_FIELDS if name not in fields]
    if missing:
        hint = (
            "; a clip of root and joint trajectories alone becomes one with `fuselab-motion "
            "convert FILE -o OUT.npz` (forward kinematics of the model)"
            if "fps" not in missing and "body_pos_w" in missing
            else ""
        )
        raise MotionFileError(
            path,
            ", ".join(missing),
            f"missing; a motion file needs {list(REQUIRED_FIELDS)}, this one has "
            f"{sorted(fields)}{hint}",
        )
    file_fps = frame_rate(path, fields["fps"])
    arrays = {
        "joint_pos": _numeric(path, "joint_pos", fields["joint_pos"], 2, "(T, joints)"),
        "joint_vel": _numeric(path, "joint_vel", fields["joint_vel"], 2, "(T, joints)"),
        **{
            field: _numeric(path, field, fields[field], 3, f"(T, bodies, {width})")
            for field, width in _BODY_FIELD_WIDTH.items()
        },
    }
    num_frames = arrays["joint_pos"].shape[0]
    for field, array in arrays.items():
        if array.shape[0] != num_frames:
            raise MotionFileError(
                path,
                field,
                f"expected {num_frames} frames like joint_pos, got {array.shape[0]}",
            )
    if num_frames < MIN_FRAMES:
        raise MotionFileError(
            path, "joint_pos", f"expected at least {MIN_FRAMES} frames, got {num_frames}"
        )
    _joint_columns(path, fields, arrays, joint_names)
    _body_columns(path, fields, arrays, body_names)
    _check_values(path, arrays, joint_names, body_names)

    quat = arrays["body_quat_w"]
    arrays["body_quat_w"] = quat / np.linalg.norm(quat, axis=-1, keepdims=True)
    clip = MotionClip(
        fps=file_fps,
        joint_names=joint_names,
        body_names=body_names,
        **{field: np.ascontiguousarray(array, dtype=np.float32) for field, array in arrays.items()},
        source=str(path),
    )
    if not file_velocities:
        clip = with_consistent_velocities(clip)
    if fps is not None:
        clip = clip.resample(fps)
    log.info(
        "load motion %s: %d frames at %g fps (%.2f s), %d bodies, %d joints: %.1f ms",
        path,
        clip.num_frames,
        clip.fps,
        clip.duration_s,
        len(body_names),
        len(joint_names),
        elapsed_ms(started),
    )
    return clip
