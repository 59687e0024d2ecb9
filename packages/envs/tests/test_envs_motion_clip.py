"""Motion files: loading onto the G1's names, one clear error per malformed field, resampling."""

from __future__ import annotations

import numpy as np
import pytest

from fuselab_env_core.rotations import np_quat_mul as quat_mul
from fuselab_envs.motion import MotionClip, MotionFileError, load_motion, synth_clip
from fuselab_envs.motion.clip import REQUIRED_FIELDS, quat_slerp, velocity_mismatches
from fuselab_envs.motion.convert import load_model
from fuselab_sim_backends.model import model_facts

FACTS = model_facts(load_model())
JOINTS = FACTS.joint_names  # 29 hinges
MODEL_BODIES = FACTS.body_names  # 31, 'world' first
BODIES = MODEL_BODIES[1:]


@pytest.fixture(scope="module")
def clip() -> MotionClip:
    return synth_clip(1.0, 30.0)


def _fields(clip: MotionClip, names: bool = True) -> dict[str, np.ndarray]:
    fields = {
        "fps": np.array([clip.fps]),
        "joint_pos": clip.joint_pos,
        "joint_vel": clip.joint_vel,
        "body_pos_w": clip.body_pos_w,
        "body_quat_w": clip.body_quat_w,
        "body_lin_vel_w": clip.body_lin_vel_w,
        "body_ang_vel_w": clip.body_ang_vel_w,
    }
    if names:
        fields["joint_names"] = np.array(clip.joint_names)
        fields["body_names"] = np.array(clip.body_names)
    return fields


def _write(tmp_path, fields, name="motion.npz"):
    path = tmp_path / name
    np.savez(path, **fields)
    return path


def _load(path, **kwargs) -> MotionClip:
    return load_motion(path, joint_names=JOINTS, body_names=MODEL_BODIES, **kwargs)


def _error(path, **kwargs) -> str:
    with pytest.raises(MotionFileError) as info:
        _load(path, **kwargs)
    message = str(info.value)
    assert str(path) in message  # every error names the file
    return message


def _same(a: MotionClip, b: MotionClip) -> None:
    for field in ("joint_pos", "joint_vel", "body_pos_w", "body_lin_vel_w", "body_ang_vel_w"):
        np.testing.assert_allclose(getattr(a, field), getattr(b, field), atol=1e-6, err_msg=field)
    np.testing.assert_allclose(a.body_quat_w, b.body_quat_w, atol=1e-6)


# --------------------------------------------------------------------------------------------
# Good files
# --------------------------------------------------------------------------------------------


def test_loads_named_file_onto_model_names(tmp_path, clip):
    loaded = _load(_write(tmp_path, _fields(clip)))
    assert loaded.joint_names == JOINTS and len(JOINTS) == 29
    assert loaded.body_names == BODIES and len(BODIES) == 30 and "world" not in loaded.body_names
    assert loaded.fps == 30.0 and loaded.num_frames == 31
    assert loaded.duration_s == pytest.approx(1.0)
    for field in ("joint_pos", "body_pos_w", "body_quat_w", "body_ang_vel_w"):
        assert getattr(loaded, field).dtype == np.float32
    assert loaded.body_pos_w.shape == (31, 30, 3) and loaded.body_quat_w.shape == (31, 30, 4)
    _same(loaded, clip)
    assert loaded.source == str(tmp_path / "motion.npz")


def test_save_then_load_is_exact_and_deterministic(tmp_path, clip):
    first, second = clip.save(tmp_path / "a.npz"), clip.save(tmp_path / "b.npz")
    assert first.read_bytes() == second.read_bytes()
    with np.load(first) as raw:
        assert raw["fps"].shape == (1,) and list(raw["body_names"]) == list(BODIES)
    loaded = _load(first)
    for field in ("joint_pos", "joint_vel", "body_pos_w", "body_quat_w"):
        np.testing.assert_array_equal(getattr(loaded, field), getattr(clip, field))


def test_body_names_argument_may_start_with_world_or_not(tmp_path, clip):
    path = _write(tmp_path, _fields(clip))
    without = load_motion(path, joint_names=JOINTS, body_names=BODIES)
    assert without.body_names == _load(path).body_names == BODIES


def test_extra_and_reordered_bodies_and_joints_are_matched_by_name(tmp_path, clip):
    fields = _fields(clip)
    body_order = np.random.default_rng(0).permutation(len(BODIES))
    joint_order = np.random.default_rng(1).permutation(len(JOINTS))
    num_frames = clip.num_frames
    for field in ("body_pos_w", "body_lin_vel_w", "body_ang_vel_w", "body_quat_w"):
        width = fields[field].shape[2]
        extra = np.full((num_frames, 2, width), np.nan, dtype=np.float32)  # never used
        fields[field] = np.concatenate((extra, fields[field][:, body_order]), axis=1)
    fields["body_names"] = np.array(["world", "marker", *np.array(BODIES)[body_order]])
    fields["joint_names"] = np.array([*np.array(JOINTS)[joint_order], "gripper_joint"])
    for field in ("joint_pos", "joint_vel"):
        fields[field] = np.concatenate(
            (fields[field][:, joint_order], np.zeros((num_frames, 1), np.float32)), axis=1
        )
    loaded = _load(_write(tmp_path, fields))
    _same(loaded, clip)


def test_nameless_file_in_model_order_with_or_without_world(tmp_path, clip):
    _same(_load(_write(tmp_path, _fields(clip, names=False))), clip)
    fields = _fields(clip, names=False)
    for field in ("body_pos_w", "body_lin_vel_w", "body_ang_vel_w", "body_quat_w"):
        world = np.zeros_like(fields[field][:, :1])
        if field == "body_quat_w":
            world[..., 0] = 1.0
        fields[field] = np.concatenate((world, fields[field]), axis=1)
    loaded = _load(_write(tmp_path, fields, "with_world.npz"))
    assert loaded.body_pos_w.shape[1] == 30
    _same(loaded, clip)


@pytest.mark.parametrize("names", [True, False])
def test_floating_base_columns_are_stripped(tmp_path, clip, names):
    fields = _fields(clip, names=names)
    num_frames = clip.num_frames
    root_pos = np.concatenate((clip.body_pos_w[:, 0], clip.body_quat_w[:, 0]), axis=1)
    root_vel = np.concatenate((clip.body_lin_vel_w[:, 0], clip.body_ang_vel_w[:, 0]), axis=1)
    fields["joint_pos"] = np.concatenate((root_pos, clip.joint_pos), axis=1)
    fields["joint_vel"] = np.concatenate((root_vel, clip.joint_vel), axis=1)
    assert fields["joint_pos"].shape == (num_frames, 36)
    assert fields["joint_vel"].shape == (num_frames, 35)
    _same(_load(_write(tmp_path, fields)), clip)


def test_nearly_unit_quaternions_are_accepted_and_normalised(tmp_path, clip):
    fields = _fields(clip)
    fields["body_quat_w"] = clip.body_quat_w * np.float32(1.0 + 5e-4)
    loaded = _load(_write(tmp_path, fields))
    np.testing.assert_allclose(np.linalg.norm(loaded.body_quat_w, axis=-1), 1.0, atol=1e-6)


def test_velocities_that_contradict_the_poses_are_recomputed_from_them(tmp_path, clip, caplog):
    fields = _fields(clip)
    # the box lift's fault: the root's angular velocity taken in the wrong frame moves every
    # body's velocities off the rate of change of its pose (here: a spin about x added)
    fields["body_ang_vel_w"] = fields["body_ang_vel_w"] + np.array([1.0, 0.0, 0.0], np.float32)
    fields["body_lin_vel_w"] = fields["body_lin_vel_w"] + np.array([0.0, 0.3, 0.0], np.float32)
    path = _write(tmp_path, fields)
    with caplog.at_level("WARNING"):
        loaded = _load(path)
    for field in ("body_lin_vel_w", "body_ang_vel_w"):  # the synthetic clip's own, to rounding
        np.testing.assert_allclose(getattr(loaded, field), getattr(clip, field), atol=1e-3)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2
    assert warned[0].startswith(f"{path}: body_lin_vel_w differs from the rate of change of ")
    assert "body_pos_w by 0.3 m/s (median; up to 0.05" in warned[0]
    assert "body_ang_vel_w differs from the rate of change of body_quat_w by 1 rad/s" in warned[1]
    kept = _load(path, file_velocities=True)  # what fuselab-motion inspect reports on
    np.testing.assert_array_equal(kept.body_lin_vel_w, fields["body_lin_vel_w"])
    assert set(velocity_mismatches(kept)) == {"body_lin_vel_w", "body_ang_vel_w"}

    fields = _fields(clip)
    fields["joint_vel"] = 2.0 * fields["joint_vel"] + 0.1  # another unit, say
    caplog.clear()
    with caplog.at_level("WARNING"):
        np.testing.assert_allclose(
            _load(_write(tmp_path, fields)).joint_vel, clip.joint_vel, atol=1e-5
        )
    assert "joint_vel differs from the rate of change of joint_pos" in caplog.text


def test_velocities_that_agree_with_the_poses_are_kept_as_the_file_has_them(tmp_path, clip):
    fields = _fields(clip)
    fields["body_lin_vel_w"] = fields["body_lin_vel_w"] + np.float32(0.02)  # within the tolerance
    loaded = _load(_write(tmp_path, fields))
    np.testing.assert_array_equal(loaded.body_lin_vel_w, fields["body_lin_vel_w"])
    assert velocity_mismatches(loaded) == {}


def test_body_index(clip):
    assert clip.body_index("pelvis") == 0
    assert clip.body_names[clip.body_index("torso_link")] == "torso_link"
    with pytest.raises(KeyError, match="body 'head_link' is not among the clip's bodies: pelvis"):
        clip.body_index("head_link")


# --------------------------------------------------------------------------------------------
# Malformed files: each gives its own error naming the file, the field and what was expected
# --------------------------------------------------------------------------------------------


def test_error_is_a_value_error():
    assert issubclass(MotionFileError, ValueError)


@pytest.mark.parametrize("field", REQUIRED_FIELDS)
def test_missing_field(tmp_path, clip, field):
    fields = _fields(clip)
    del fields[field]
    message = _error(_write(tmp_path, fields))
    assert f": {field}: missing" in message and "needs" in message


def test_missing_file(tmp_path):
    assert "file: no such file" in _error(tmp_path / "nope.npz")


def test_not_an_npz(tmp_path, clip):
    text = tmp_path / "motion.csv"
    text.write_text("1,2,3\n")
    assert "file: not an .npz archive" in _error(text)
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"PK\x03\x04 truncated")
    assert "file: not a readable .npz archive" in _error(broken)
    single = tmp_path / "array.npy"
    np.save(single, clip.joint_pos)
    assert "single .npy array" in _error(single)


def test_object_arrays_are_refused(tmp_path, clip):
    fields = _fields(clip)
    fields["body_names"] = np.array(list(BODIES), dtype=object)
    assert "body_names: expected a plain numeric or string array" in _error(
        _write(tmp_path, fields)
    )


@pytest.mark.parametrize("fps", [0.0, -30.0, np.nan, np.inf])
def test_fps_must_be_positive(tmp_path, clip, fps):
    fields = _fields(clip)
    fields["fps"] = np.array(fps)
    assert ": fps: expected a frame rate > 0" in _error(_write(tmp_path, fields))


def test_fps_must_be_one_number(tmp_path, clip):
    fields = _fields(clip)
    fields["fps"] = np.array([30.0, 50.0])
    assert ": fps: expected one number" in _error(_write(tmp_path, fields))


def test_one_frame_is_not_a_clip(tmp_path, clip):
    fields = {
        k: (v[:1] if k not in ("fps", "joint_names", "body_names") else v)
        for k, v in _fields(clip).items()
    }
    assert "joint_pos: expected at least 2 frames, got 1" in _error(_write(tmp_path, fields))


def test_wrong_joint_columns(tmp_path, clip):
    fields = _fields(clip, names=False)
    fields["joint_pos"] = clip.joint_pos[:, :28]
    message = _error(_write(tmp_path, fields))
    assert (
        "joint_pos: expected 29 columns (the model's joints), or 36 with the floating base first, got 28"
        in message
    )


def test_joint_columns_must_match_joint_names(tmp_path, clip):
    fields = _fields(clip)
    fields["joint_vel"] = clip.joint_vel[:, :20]
    assert "joint_vel: expected 29 columns (the file's joint_names)" in _error(
        _write(tmp_path, fields)
    )


def test_wrong_quaternion_width(tmp_path, clip):
    fields = _fields(clip)
    fields["body_quat_w"] = clip.body_quat_w[..., :3]
    assert "body_quat_w: expected shape (T, bodies, 4), got (31, 30, 3)" in _error(
        _write(tmp_path, fields)
    )


def test_wrong_rank(tmp_path, clip):
    fields = _fields(clip)
    fields["body_pos_w"] = clip.body_pos_w.reshape(31, -1)
    assert "body_pos_w: expected shape (T, bodies, 3), got (31, 90)" in _error(
        _write(tmp_path, fields)
    )


def test_frame_counts_must_agree(tmp_path, clip):
    fields = _fields(clip)
    fields["body_lin_vel_w"] = clip.body_lin_vel_w[:-1]
    assert "body_lin_vel_w: expected 31 frames like joint_pos, got 30" in _error(
        _write(tmp_path, fields)
    )


def test_body_count_must_match_body_names(tmp_path, clip):
    fields = _fields(clip)
    fields["body_ang_vel_w"] = clip.body_ang_vel_w[:, :29]
    assert "body_ang_vel_w: expected 30 bodies (one per body_names entry), got 29" in _error(
        _write(tmp_path, fields)
    )


def test_nameless_bodies_must_be_the_model_bodies(tmp_path, clip):
    fields = _fields(clip, names=False)
    for field in ("body_pos_w", "body_lin_vel_w", "body_ang_vel_w", "body_quat_w"):
        fields[field] = fields[field][:, :25]
    assert (
        "body_pos_w: without body_names the bodies must be the model's 30 in model order (or 31 with 'world' first), got 25"
        in _error(_write(tmp_path, fields))
    )


def test_non_numeric_field(tmp_path, clip):
    fields = _fields(clip)
    fields["joint_vel"] = np.full(clip.joint_vel.shape, "x")
    assert "joint_vel: expected numbers (T, joints), got dtype <U1" in _error(
        _write(tmp_path, fields)
    )


@pytest.mark.parametrize(
    ("field", "index", "expected"),
    [
        (
            "joint_vel",
            (3, 4),
            "joint_vel: expected finite numbers; 1 are not, the first at frame 3 ('left_ankle_pitch_joint')",
        ),
        (
            "body_pos_w",
            (5, 0, 2),
            "body_pos_w: expected finite numbers; 1 are not, the first at frame 5 ('pelvis')",
        ),
        (
            "body_ang_vel_w",
            (0, 15, 1),
            "body_ang_vel_w: expected finite numbers; 1 are not, the first at frame 0 ('torso_link')",
        ),
    ],
)
def test_nan(tmp_path, clip, field, index, expected):
    fields = _fields(clip)
    fields[field] = fields[field].copy()
    fields[field][index] = np.nan
    assert expected in _error(_write(tmp_path, fields))


def test_non_unit_quaternion(tmp_path, clip):
    fields = _fields(clip)
    fields["body_quat_w"] = clip.body_quat_w.copy()
    fields["body_quat_w"][7, 2] *= 1.5
    message = _error(_write(tmp_path, fields))
    assert (
        "body_quat_w: expected unit quaternions (w, x, y, z) within 0.001; 1 are not, the first at frame 7 body 'left_hip_roll_link' with norm 1.5"
        in message
    )


def test_unknown_names(tmp_path, clip):
    fields = _fields(clip)
    fields["joint_names"] = np.array(["knee" if n == "left_knee_joint" else n for n in JOINTS])
    assert "joint_names: the model's joints ['left_knee_joint'] are not in the file" in _error(
        _write(tmp_path, fields)
    )
    fields = _fields(clip)
    renamed = {"torso_link": "chest", "pelvis": "hips"}
    fields["body_names"] = np.array([renamed.get(n, n) for n in BODIES])
    assert "body_names: the model's bodies ['pelvis', 'torso_link'] are not in the file" in _error(
        _write(tmp_path, fields, "bodies.npz")
    )


def test_duplicate_and_malformed_names(tmp_path, clip):
    fields = _fields(clip)
    fields["body_names"] = np.array(["pelvis", *BODIES[:-1]])
    assert "body_names: expected unique names, repeated: ['pelvis']" in _error(
        _write(tmp_path, fields)
    )
    fields = _fields(clip)
    fields["joint_names"] = np.arange(29)
    assert "joint_names: expected a 1-D array of strings" in _error(
        _write(tmp_path, fields, "j.npz")
    )


# --------------------------------------------------------------------------------------------
# Resampling
# --------------------------------------------------------------------------------------------


def _ramp_clip(fps: float, duration_s: float) -> tuple[MotionClip, float]:
    """Linear ramps in every vector field, a constant-rate spin about a tilted axis in the quats."""
    t = np.arange(int(round(duration_s * fps)) + 1) / fps
    num_frames, num_joints, num_bodies = t.size, len(JOINTS), len(BODIES)
    slope = np.linspace(-1.0, 1.0, num_joints)
    ramp = t[:, None] * slope  # (T, J)
    body_ramp = t[:, None, None] * np.linspace(0.5, 2.0, num_bodies * 3).reshape(1, num_bodies, 3)
    rate = 2.0  # rad/s, about a tilted axis, so slerp is exact
    quat = _spin(t, rate)
    return (
        MotionClip(
            fps=fps,
            joint_names=JOINTS,
            body_names=BODIES,
            joint_pos=ramp.astype(np.float32),
            joint_vel=np.tile(slope, (num_frames, 1)).astype(np.float32),
            body_pos_w=body_ramp.astype(np.float32),
            body_quat_w=np.repeat(quat[:, None], num_bodies, axis=1).astype(np.float32),
            body_lin_vel_w=body_ramp.astype(np.float32) * 2.0,
            body_ang_vel_w=body_ramp.astype(np.float32) * -1.0,
        ),
        rate,
    )


def _spin(t: np.ndarray, rate: float) -> np.ndarray:
    axis = np.array([1.0, 2.0, 2.0]) / 3.0
    half = 0.5 * rate * t[:, None]
    return np.concatenate((np.cos(half), np.sin(half) * axis), axis=1)


def test_resample_is_exact_on_ramps_and_constant_spins():
    source, rate = _ramp_clip(30.0, 2.0)
    out = source.resample(50.0)
    t = np.arange(out.num_frames) / 50.0
    assert out.fps == 50.0 and out.num_frames == 101 and out.duration_s == pytest.approx(2.0)
    np.testing.assert_allclose(out.joint_pos, t[:, None] * np.linspace(-1, 1, 29), atol=1e-5)
    np.testing.assert_allclose(out.joint_vel, np.tile(np.linspace(-1, 1, 29), (101, 1)), atol=1e-6)
    expected_pos = t[:, None, None] * np.linspace(0.5, 2.0, 90).reshape(1, 30, 3)
    np.testing.assert_allclose(out.body_pos_w, expected_pos, atol=1e-5)
    np.testing.assert_allclose(out.body_lin_vel_w, 2.0 * expected_pos, atol=2e-5)
    np.testing.assert_allclose(out.body_ang_vel_w, -expected_pos, atol=1e-5)
    np.testing.assert_allclose(out.body_quat_w[:, 3], _spin(t, rate), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out.body_quat_w, axis=-1), 1.0, atol=1e-6)


def test_resample_down_keeps_the_time_span_inside_the_clip():
    source, rate = _ramp_clip(50.0, 1.0)
    out = source.resample(30.0)
    assert out.num_frames == 31
    t = np.arange(31) / 30.0
    np.testing.assert_allclose(out.joint_pos[:, -1], t, atol=1e-5)
    np.testing.assert_allclose(out.body_quat_w[:, 0], _spin(t, rate), atol=1e-6)


def test_resample_to_the_same_rate_is_the_clip(clip):
    assert clip.resample(clip.fps) is clip


def test_resample_rejects_bad_rates(clip):
    with pytest.raises(MotionFileError, match="fps: expected a target rate > 0, got 0"):
        clip.resample(0.0)
    short = MotionClip(
        **{
            **{
                f: getattr(clip, f)[:2]
                for f in (
                    "joint_pos",
                    "joint_vel",
                    "body_pos_w",
                    "body_quat_w",
                    "body_lin_vel_w",
                    "body_ang_vel_w",
                )
            }
        },
        fps=clip.fps,
        joint_names=clip.joint_names,
        body_names=clip.body_names,
    )
    with pytest.raises(MotionFileError, match="fewer than 2 frames at 10"):
        short.resample(10.0)


def test_slerp_takes_the_short_way_and_stays_unit():
    rng = np.random.default_rng(3)
    q0 = rng.normal(size=(200, 4))
    q0 /= np.linalg.norm(q0, axis=1, keepdims=True)
    q1 = rng.normal(size=(200, 4))
    q1 /= np.linalg.norm(q1, axis=1, keepdims=True)
    alpha = rng.uniform(size=200)
    q = quat_slerp(q0, q1, alpha)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.abs(quat_slerp(q0, -q1, alpha)), np.abs(q), atol=1e-12)
    np.testing.assert_allclose(np.abs(quat_slerp(q0, q1, np.zeros(200))), np.abs(q0), atol=1e-12)
    np.testing.assert_allclose(np.abs(quat_slerp(q0, q1, np.ones(200))), np.abs(q1), atol=1e-12)

    # Angles split in proportion to alpha.
    def angle(a, b):
        return 2 * np.arccos(np.clip(np.abs(np.sum(a * b, axis=1)), 0, 1))

    np.testing.assert_allclose(angle(q0, q), alpha * angle(q0, q1), atol=1e-9)
    # Identical quaternions (the degenerate case) stay put.
    np.testing.assert_allclose(quat_slerp(q0, q0, alpha), q0, atol=1e-12)
    assert quat_mul(q0, q0).shape == (200, 4)


def test_load_motion_resamples_on_request(tmp_path):
    source, _ = _ramp_clip(30.0, 2.0)
    loaded = _load(source.save(tmp_path / "ramp.npz"), fps=50.0)
    assert loaded.fps == 50.0 and loaded.num_frames == 101
    np.testing.assert_allclose(loaded.joint_pos[:, 0], -np.arange(101) / 50.0, atol=1e-5)
