"""Retargeted CSV -> clip (kinematics, velocities, speed), the procedural clip and the default clip."""

from __future__ import annotations

import logging
import time

import mujoco
import numpy as np
import pytest

from fuselab_env_core.rotations import np_quat_mul as quat_mul
from fuselab_envs.g1 import DEFAULT_JOINT_POS, STANDING_PELVIS_HEIGHT
from fuselab_envs.motion import (
    DEFAULT_MOTION_PATH,
    MotionClip,
    MotionFileError,
    convert_csv,
    load_motion,
    synth_clip,
    write_motion_csv,
)
from fuselab_envs.motion.convert import load_model, lowest_foot_points
from fuselab_sim_backends.model import model_facts

MODEL = load_model()
FACTS = model_facts(MODEL)


def _quat_close(a: np.ndarray, b: np.ndarray, atol: float) -> None:
    """Equal as rotations: q and -q are the same."""
    dot = np.abs(np.sum(a.astype(np.float64) * b, axis=-1))
    np.testing.assert_allclose(dot, 1.0, atol=atol)


def _write_rows(path, rows: np.ndarray) -> None:
    np.savetxt(path, rows, fmt="%.9g", delimiter=",")


def _lowest_foot_point_mujoco(clip: MotionClip) -> np.ndarray:
    """Per frame, the lowest corner of the two foot boxes, from MuJoCo's own geom poses."""
    data = mujoco.MjData(MODEL)
    corners = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).reshape(3, -1).T
    feet = [MODEL.geom(f"{s}_foot_collision").id for s in ("left", "right")]
    lowest = np.empty(clip.num_frames)
    for k in range(clip.num_frames):
        data.qpos[:3] = clip.body_pos_w[k, 0]
        data.qpos[3:7] = clip.body_quat_w[k, 0]
        data.qpos[FACTS.joint_qpos_adr] = clip.joint_pos[k]
        mujoco.mj_kinematics(MODEL, data)
        lowest[k] = min(
            (
                data.geom_xpos[g]
                + (corners * MODEL.geom_size[g]) @ data.geom_xmat[g].reshape(3, 3).T
            )[:, 2].min()
            for g in feet
        )
    return lowest


# --------------------------------------------------------------------------------------------
# CSV -> clip
# --------------------------------------------------------------------------------------------


def test_round_trip_synth_csv_convert(tmp_path):
    clip = synth_clip(4.0, 50.0)
    csv = write_motion_csv(clip, tmp_path / "synth.csv")
    rows = np.loadtxt(csv, delimiter=",")
    assert rows.shape == (201, 7 + 29)
    back = convert_csv(csv, input_fps=50.0, output_fps=50.0)
    assert back.num_frames == clip.num_frames and back.fps == 50.0
    assert back.joint_names == clip.joint_names and back.body_names == clip.body_names
    np.testing.assert_allclose(back.joint_pos, clip.joint_pos, atol=1e-6)
    np.testing.assert_allclose(back.body_pos_w, clip.body_pos_w, atol=1e-4)
    _quat_close(back.body_quat_w, clip.body_quat_w, atol=1e-6)
    np.testing.assert_allclose(back.joint_vel, clip.joint_vel, atol=1e-3)
    np.testing.assert_allclose(back.body_lin_vel_w, clip.body_lin_vel_w, atol=1e-3)
    np.testing.assert_allclose(back.body_ang_vel_w, clip.body_ang_vel_w, atol=1e-3)
    # ... and through the npz file.
    loaded = load_motion(
        back.save(tmp_path / "synth.npz"),
        joint_names=FACTS.joint_names,
        body_names=FACTS.body_names,
    )
    np.testing.assert_allclose(loaded.body_pos_w, clip.body_pos_w, atol=1e-4)


def test_convert_resamples_onto_the_same_motion(tmp_path):
    """The procedural motion written at 30 fps and converted to 50 fps is that motion at 50 fps."""
    at_30, at_50 = synth_clip(4.0, 30.0), synth_clip(4.0, 50.0)
    csv = write_motion_csv(at_30, tmp_path / "m.csv")
    converted = convert_csv(csv, input_fps=30.0, output_fps=50.0)
    assert converted.num_frames == at_50.num_frames == 201
    # Linear interpolation of smooth motion: errors of order (dt^2 / 8) * acceleration.
    np.testing.assert_allclose(converted.joint_pos, at_50.joint_pos, atol=5e-3)
    np.testing.assert_allclose(converted.body_pos_w, at_50.body_pos_w, atol=5e-3)
    _quat_close(converted.body_quat_w, at_50.body_quat_w, atol=1e-4)
    # Velocities of the piecewise-linear 30 fps motion: close on average, looser at the peaks.
    velocity_error = np.abs(converted.joint_vel - at_50.joint_vel)
    assert velocity_error.max() < 0.3 and velocity_error.mean() < 0.01


def test_velocities_are_world_frame_finite_differences(tmp_path):
    """A tilted robot, joints fixed, sliding along x at 0.5 m/s and spinning about world z."""
    fps, rate = 50.0, 1.0
    t = np.arange(101) / fps
    tilt = np.array([np.cos(0.15), 0.0, np.sin(0.15), 0.0])  # 0.3 rad about y
    spin = np.stack((np.cos(0.5 * rate * t), 0 * t, 0 * t, np.sin(0.5 * rate * t)), axis=1)
    root_quat = quat_mul(spin, np.broadcast_to(tilt, spin.shape))  # world-z spin of a tilted body
    rows = np.zeros((t.size, 36))
    rows[:, 0] = 0.5 * t
    rows[:, 2] = 0.8
    rows[:, 3:7] = root_quat[:, [1, 2, 3, 0]]
    rows[:, 7:] = [DEFAULT_JOINT_POS[n] for n in FACTS.joint_names]
    _write_rows(tmp_path / "spin.csv", rows)
    clip = convert_csv(tmp_path / "spin.csv", input_fps=fps, output_fps=fps)
    np.testing.assert_allclose(
        clip.body_ang_vel_w, np.broadcast_to([0, 0, rate], clip.body_ang_vel_w.shape), atol=1e-4
    )
    pelvis = clip.body_index("pelvis")
    np.testing.assert_allclose(
        clip.body_lin_vel_w[:, pelvis], np.broadcast_to([0.5, 0, 0], (101, 3)), atol=1e-5
    )
    # Other bodies: v = v_root + w x r; central differences of a circle are short by sinc.
    torso = clip.body_index("torso_link")
    r = clip.body_pos_w[:, torso] - clip.body_pos_w[:, pelvis]
    expected = np.array([0.5, 0, 0]) + np.cross([0, 0, rate], r)
    np.testing.assert_allclose(clip.body_lin_vel_w[1:-1, torso], expected[1:-1], atol=1e-4)
    np.testing.assert_allclose(clip.joint_vel, 0.0, atol=1e-6)


def test_conversion_is_over_100x_real_time(tmp_path, caplog):
    clip = synth_clip(60.0, 30.0)
    csv = write_motion_csv(clip, tmp_path / "long.csv")
    timings = []
    with caplog.at_level(logging.INFO, logger="fuselab_envs.motion.convert"):
        for _ in range(3):
            started = time.perf_counter()
            out = convert_csv(csv, input_fps=30.0, output_fps=50.0, progress=False)
            timings.append(time.perf_counter() - started)
    assert out.num_frames == 3001
    speed = out.duration_s / min(timings)
    # Measured ~1500-2000x on a 2-core machine; 100x leaves room for a heavily loaded one.
    assert speed > 100.0, f"conversion ran at {speed:.0f}x real time"
    assert any(
        "x real time" in r.getMessage() and "3001 frames" in r.getMessage() for r in caplog.records
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "1,2,3\n",
            "line 1: expected 36 columns (root x,y,z, root quaternion x,y,z,w, 29 joint angles), got 3",
        ),
        (",".join(["0"] * 36) + "\n" + ",".join(["0"] * 35) + "\n", "line 2: expected 36 columns"),
        (
            ",".join(["0"] * 36) + "\n" + ",".join(["0"] * 5 + ["abc"] + ["0"] * 30) + "\n",
            "line 2, column 6: expected a number, got 'abc'",
        ),
        (
            ",".join(["x"] * 36) + "\n",
            "line 1, column 1: expected a number, got 'x' (the layout has no header line)",
        ),
        ("", "rows: expected at least 2 rows (frames), got 0"),
        (
            ",".join(["0"] * 6 + ["1"] + ["0"] * 29) + "\n",
            "rows: expected at least 2 rows (frames), got 1",
        ),
        (
            ",".join(["0"] * 36) + "\n" + ",".join(["0"] * 36) + "\n",
            "row 1, columns 4-7: expected a root quaternion (x, y, z, w), got zeros",
        ),
        (
            ",".join(["0"] * 6 + ["1"] + ["nan"] + ["0"] * 28)
            + "\n"
            + ",".join(["0"] * 6 + ["1"] + ["0"] * 29)
            + "\n",
            "row 1, column 8: expected a finite number, got nan",
        ),
    ],
)
def test_bad_csv(tmp_path, text, expected):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(MotionFileError) as info:
        convert_csv(path, input_fps=30.0)
    assert str(path) in str(info.value)
    assert expected in str(info.value)


def test_missing_csv_and_bad_rates(tmp_path):
    with pytest.raises(MotionFileError, match="file: no such file; expected a CSV"):
        convert_csv(tmp_path / "none.csv", input_fps=30.0)
    with pytest.raises(ValueError, match="input_fps: expected a frame rate > 0, got 0"):
        convert_csv(tmp_path / "none.csv", input_fps=0.0)


# --------------------------------------------------------------------------------------------
# The procedural clip and the embedded default clip
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def default_clip() -> MotionClip:
    return load_motion(
        DEFAULT_MOTION_PATH, joint_names=FACTS.joint_names, body_names=FACTS.body_names
    )


def test_default_clip_loads_against_the_g1(default_clip):
    assert DEFAULT_MOTION_PATH.name == "g1_synth.npz" and DEFAULT_MOTION_PATH.is_file()
    assert default_clip.fps == 50.0 and default_clip.num_frames == 501
    assert len(default_clip.joint_names) == 29 and len(default_clip.body_names) == 30
    assert default_clip.body_names[0] == "pelvis"


def test_default_clip_is_the_current_synth_output(default_clip):
    fresh = synth_clip()
    for field in (
        "joint_pos",
        "joint_vel",
        "body_pos_w",
        "body_quat_w",
        "body_lin_vel_w",
        "body_ang_vel_w",
    ):
        np.testing.assert_allclose(
            getattr(default_clip, field), getattr(fresh, field), atol=1e-6, err_msg=field
        )


def test_default_clip_feet_touch_and_never_sink(default_clip):
    lowest = _lowest_foot_point_mujoco(default_clip)
    assert lowest.min() > -1e-4, f"a foot sinks {-lowest.min():.4f} m"
    assert lowest.max() < 1e-3, f"both feet off the floor by {lowest.max():.4f} m"


def test_default_clip_starts_and_ends_standing(default_clip):
    standing = np.array([DEFAULT_JOINT_POS[n] for n in default_clip.joint_names])
    for frame in (0, -1):
        np.testing.assert_allclose(default_clip.joint_pos[frame], standing, atol=1e-5)
        assert default_clip.body_pos_w[frame, 0, 2] == pytest.approx(
            STANDING_PELVIS_HEIGHT, abs=2e-3
        )
        np.testing.assert_allclose(default_clip.joint_vel[frame], 0.0, atol=0.05)


def test_default_clip_moves_smoothly_within_the_joint_ranges(default_clip):
    ranges = FACTS.joint_ranges
    assert (default_clip.joint_pos >= ranges[:, 0]).all() and (
        default_clip.joint_pos <= ranges[:, 1]
    ).all()
    moving = np.ptp(default_clip.joint_pos, axis=0) > 0.1
    for name in (
        "left_knee_joint",
        "right_knee_joint",
        "left_shoulder_pitch_joint",
        "waist_yaw_joint",
    ):
        assert moving[default_clip.joint_index(name)], name
    assert np.abs(default_clip.joint_vel).max() < 5.0
    accel = np.diff(default_clip.joint_vel, axis=0) * default_clip.fps
    assert np.abs(accel).max() < 50.0
    # Stepping in place: each foot leaves the floor at some point.
    feet = [default_clip.body_index(f"{s}_ankle_roll_link") for s in ("left", "right")]
    lift = default_clip.body_pos_w[:, feet, 2] - default_clip.body_pos_w[0, feet, 2]
    assert (lift.max(axis=0) > 0.03).all()


def test_synth_rejects_bad_arguments():
    with pytest.raises(ValueError, match="fps: expected a frame rate > 0"):
        synth_clip(1.0, 0.0)
    with pytest.raises(ValueError, match="duration_s: expected at least 2 frames"):
        synth_clip(0.0, 50.0)


def test_a_foot_of_another_shape_is_named_with_its_shape():
    feet = "".join(
        f'<body name="{side}_foot_link"><site name="{side}_foot"/>'
        '<geom type="cylinder" size="0.02 0.05"/></body>'
        for side in ("left", "right")
    )
    model = mujoco.MjModel.from_xml_string(f"<mujoco><worldbody>{feet}</worldbody></mujoco>")
    names = ("left_foot_link", "right_foot_link")
    pos, quat = np.zeros((2, 2, 3)), np.tile([1.0, 0.0, 0.0, 0.0], (2, 2, 1))
    with pytest.raises(ValueError, match="expected a box, sphere or capsule, got a cylinder"):
        lowest_foot_points(model, names, pos, quat)
