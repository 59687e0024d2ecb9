"""The fuselab-motion command: inspect, convert, synth (through main([...]))."""

from __future__ import annotations

import numpy as np
import pytest

from fuselab_envs.motion import DEFAULT_MOTION_PATH, MotionClip, load_motion, write_motion_csv
from fuselab_envs.motion.cli import main
from fuselab_envs.motion.convert import load_model
from fuselab_sim_backends.model import model_facts

FACTS = model_facts(load_model())


def _load(path) -> MotionClip:
    return load_motion(path, joint_names=FACTS.joint_names, body_names=FACTS.body_names)


def _fields(clip: MotionClip) -> dict[str, np.ndarray]:
    fields = {
        name: getattr(clip, name).copy()
        for name in (
            "joint_pos",
            "joint_vel",
            "body_pos_w",
            "body_quat_w",
            "body_lin_vel_w",
            "body_ang_vel_w",
        )
    }
    return {"fps": np.array(clip.fps), **fields}


def test_inspect_default_clip(capsys):
    assert main(["inspect", str(DEFAULT_MOTION_PATH)]) == 0
    out = capsys.readouterr().out
    assert "frames     501" in out
    assert "fps        50" in out
    assert "duration   10.00 s" in out
    assert "bodies     30 (root pelvis)" in out
    assert "left_knee_joint" in out and "[-0.087, 2.880]" in out
    assert "problems   none" in out


def test_inspect_unusable_file_exits_with_the_loader_error(tmp_path, capsys):
    fields = _fields(_load(DEFAULT_MOTION_PATH))
    fields["joint_vel"][10, 3] = np.nan
    bad = tmp_path / "bad.npz"
    np.savez(bad, **fields)
    assert main(["inspect", str(bad)]) == 1
    captured = capsys.readouterr()
    assert f"{bad}: joint_vel: expected finite numbers" in captured.err
    assert "frames" not in captured.out
    assert main(["inspect", str(tmp_path / "missing.npz")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_inspect_reports_problems(tmp_path, capsys):
    clip = _load(DEFAULT_MOTION_PATH)
    fields = _fields(clip)
    knee = clip.joint_index("left_knee_joint")
    fields["joint_pos"][100:110, knee] = 3.2  # past the knee's 2.88 rad
    fields["body_pos_w"][:, :, 2] -= 0.03  # whole robot 3 cm into the floor
    path = tmp_path / "problems.npz"
    np.savez(path, **fields)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "problems   3" in out
    assert (
        "joint left_knee_joint leaves the model range [-0.087, 2.880] in 10 frames (first: frame 100, 3.200 rad)"
        in out
    )
    assert "feet sink 30.0 mm below the floor" in out
    assert "differ from the model's forward kinematics" in out  # the knee no longer matches
    assert "left_knee_joint" in out and " !" in out
    assert main(["inspect", "--strict", str(path)]) == 1


def test_inspect_flags_floating_clips(tmp_path, capsys):
    fields = _fields(_load(DEFAULT_MOTION_PATH))
    fields["body_pos_w"][:, :, 2] += 0.2
    path = tmp_path / "floating.npz"
    np.savez(path, **fields)
    main(["inspect", str(path)])
    assert "feet never touch the floor" in capsys.readouterr().out


def test_convert(tmp_path, capsys):
    source = _load(DEFAULT_MOTION_PATH).resample(30.0)
    csv = write_motion_csv(source, tmp_path / "clip.csv")
    out = tmp_path / "clip.npz"
    assert main(["convert", str(csv), "--fps", "30", "-o", str(out), "--no-progress"]) == 0
    assert f"wrote {out}: 501 frames at 50 fps" in capsys.readouterr().out
    converted = _load(out)
    assert converted.fps == 50.0 and converted.num_frames == 501
    assert (
        main(
            [
                "convert",
                str(csv),
                "--fps",
                "30",
                "--output-fps",
                "30",
                "-o",
                str(tmp_path / "b.npz"),
            ]
        )
        == 0
    )
    np.testing.assert_allclose(_load(tmp_path / "b.npz").body_pos_w, source.body_pos_w, atol=1e-4)


def test_convert_bad_csv(tmp_path, capsys):
    csv = tmp_path / "bad.csv"
    csv.write_text("1,2,3\n4,5,6\n")
    assert main(["convert", str(csv), "-o", str(tmp_path / "x.npz")]) == 1
    assert f"{csv}: line 1: expected 36 columns" in capsys.readouterr().err
    assert not (tmp_path / "x.npz").exists()


def test_synth(tmp_path, capsys):
    out = tmp_path / "synth.npz"
    assert main(["synth", "-o", str(out), "--duration-s", "2", "--fps", "25"]) == 0
    assert "51 frames at 25 fps" in capsys.readouterr().out
    clip = _load(out)
    assert clip.fps == 25.0 and clip.duration_s == pytest.approx(2.0)


def test_usage_errors():
    with pytest.raises(SystemExit) as info:
        main(["synth"])  # -o is required
    assert info.value.code == 2
    with pytest.raises(SystemExit):
        main([])
