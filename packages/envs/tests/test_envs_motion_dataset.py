"""Motion datasets: sources (directory, manifest, list), the end-to-end table, and the motion
command tracking one clip per env (starts, clip ends, adaptive bins that stay in their clip)."""

import dataclasses

import numpy as np
import pytest
from envs_motion import NO_LEAD, STILL

import fuselab_envs
from fuselab_envs.motion import MotionFileError, load_motion
from fuselab_envs.motion.dataset import clip_entries, concatenate, load_dataset
from fuselab_envs.motion.lead import LedClip
from fuselab_envs.motion.synth import synth_clip

G1 = fuselab_envs.compose("g1_motion_tracking")


@pytest.fixture(scope="module")
def clips_dir(tmp_path_factory):
    """Three procedural clips of 2, 3 and 4 s: a/short.npz, a/mid.npz, b/long.npz."""
    root = tmp_path_factory.mktemp("clips")
    for rel, seconds in (("a/short", 2.0), ("a/mid", 3.0), ("b/long", 4.0)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        synth_clip(seconds, 50.0).save(root / f"{rel}.npz")
    return root


def model_names():
    env = fuselab_envs.make("g1_motion_tracking", num_envs=1, num_threads=1)
    facts = env.backend.model
    env.close()
    return facts.joint_names, facts.body_names


def test_a_directory_is_every_clip_below_it_named_by_its_relative_path(clips_dir):
    entries = clip_entries(clips_dir)
    assert [e.name for e in entries] == ["a/mid", "a/short", "b/long"]
    assert {e.weight for e in entries} == {1.0}


def test_a_manifest_gives_files_and_directories_weights(clips_dir, tmp_path):
    manifest = tmp_path / "set.yaml"
    manifest.write_text(
        f"clips:\n  - {{file: {clips_dir / 'b/long.npz'}, weight: 3}}\n"
        f"  - {{file: {clips_dir / 'a'}}}\n"
    )
    entries = clip_entries(manifest)
    assert [(e.name, e.weight) for e in entries] == [("long", 3.0), ("mid", 1.0), ("short", 1.0)]
    joints, bodies = model_names()
    dataset = load_dataset(manifest, joint_names=joints, body_names=bodies, fps=50.0)
    np.testing.assert_allclose(dataset.weights, [0.6, 0.2, 0.2])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("clips: []\n", r"clips: expected a non-empty list"),
        ("clips:\n  - {file: a, wieght: 2}\n", r"clips\[0\]: unknown keys \['wieght'\]"),
        ("clips:\n  - {file: a, weight: 0}\n", r"clips\[0\]\.weight: expected a finite number > 0"),
        ("clips:\n  - {file: missing.npz}\n", r"missing\.npz: file: no such file or directory"),
        ("clips: [\n", r"file: not a readable YAML manifest"),
    ],
)
def test_a_bad_manifest_is_one_line_naming_the_entry(tmp_path, text, match):
    (tmp_path / "a").mkdir()
    manifest = tmp_path / "set.yaml"
    manifest.write_text(text)
    with pytest.raises(MotionFileError, match=match):
        clip_entries(manifest)


def test_sources_refuse_missing_paths_empty_directories_and_repeated_names(clips_dir, tmp_path):
    with pytest.raises(MotionFileError, match="no such file or directory"):
        clip_entries(tmp_path / "nothing.npz")
    with pytest.raises(MotionFileError, match="holds no .npz motion file"):
        clip_entries(tmp_path)
    with pytest.raises(ValueError, match=r"repeated: \['short'\]"):
        clip_entries([clips_dir / "a/short.npz", clips_dir / "a/short.npz"])


def test_the_table_holds_the_clips_end_to_end(clips_dir):
    joints, bodies = model_names()
    dataset = load_dataset(clips_dir, joint_names=joints, body_names=bodies, fps=50.0)
    alone = [
        load_motion(clips_dir / f"{n}.npz", joint_names=joints, body_names=bodies, fps=50.0)
        for n in dataset.names
    ]
    assert list(dataset.frames) == [clip.num_frames for clip in alone] == [151, 101, 201]
    assert list(dataset.starts) == [0, 151, 252]
    assert dataset.table.num_frames == 453
    for c, clip in enumerate(alone):
        np.testing.assert_array_equal(dataset.clip(c).body_pos_w, clip.body_pos_w)
        np.testing.assert_array_equal(dataset.clip(c).joint_vel, clip.joint_vel)
    assert list(dataset.clip_of_frame[[0, 150, 151, 252, 452]]) == [0, 0, 1, 2, 2]
    with pytest.raises(KeyError, match="clip 'walk' is not among the dataset's clips: a/mid, "):
        dataset.index("walk")


def make(clips_dir, *overrides, num_envs=64):
    """The task on the clips of ``clips_dir``, as they are (no lead frames)."""
    return fuselab_envs.make(
        "g1_motion_tracking",
        [f"commands.motion.params.file={clips_dir}", *NO_LEAD, *overrides],
        num_envs=num_envs,
        num_threads=1,
    )


def test_every_env_tracks_one_clip_and_is_truncated_at_its_end(clips_dir):
    env = make(clips_dir, *STILL, "env.episode_length_s=30.0")
    motion, data = env.commands["motion"], env.commands["motion"].dataset
    assert set(motion.motion_clip) == {0, 1, 2}  # adaptive starts reach every clip
    np.testing.assert_array_equal(motion.motion_clip, data.clip_of_frame[motion.motion_frame])
    # every env two frames before its clip's end, on the reference there
    rows = np.arange(env.num_envs)
    frames = (data.ends[motion.motion_clip] - 2).astype(np.int32)
    motion.set_frames(rows, frames)
    env.write_state(rows, *motion.reference_state(frames))
    env.robot.update()
    hold = ((env.robot.joint_pos - env.action.offset) / env.action.scale).astype(np.float32)
    assert not env.step(hold).truncated.any()
    assert env.step(hold).truncated.all()  # each at the end of its own clip


def test_clip_end_resample_goes_on_in_a_new_clip_and_frame(clips_dir):
    env = make(clips_dir, *STILL, "commands.motion.params.clip_end=resample", num_envs=32)
    motion, data = env.commands["motion"], env.commands["motion"].dataset
    rows = np.arange(env.num_envs)
    frames = np.full(env.num_envs, data.ends[0] - 1, np.int32)  # the last frame of clip 0
    motion.set_frames(rows, frames)
    env.write_state(rows, *motion.reference_state(frames))
    env.robot.update()
    hold = ((env.robot.joint_pos - env.action.offset) / env.action.scale).astype(np.float32)
    result = env.step(hold)
    assert not result.truncated.any() and not result.terminated.any()
    assert len(set(motion.motion_clip)) > 1
    np.testing.assert_array_equal(motion.motion_clip, data.clip_of_frame[motion.motion_frame])
    assert (motion.motion_frame < data.ends[motion.motion_clip] - 1).all()


def test_uniform_starts_follow_the_clip_weights(clips_dir, tmp_path):
    manifest = tmp_path / "set.yaml"
    manifest.write_text(
        f"clips:\n  - {{file: {clips_dir / 'a/short.npz'}, weight: 3}}\n"
        f"  - {{file: {clips_dir / 'b/long.npz'}}}\n"
    )
    env = make(manifest, "commands.motion.params.start=uniform", num_envs=4)
    motion, data = env.commands["motion"], env.commands["motion"].dataset
    frames = motion.sample_start_frames(env.rng, 8000)
    clips = data.clip_of_frame[frames]
    assert abs(np.mean(clips == 0) - 0.75) < 0.03
    assert (frames < data.ends[clips] - 1).all()  # never a clip's last frame
    motion.start = "start"  # each clip's first frame, clips by weight
    starts = motion.sample_start_frames(env.rng, 4000)
    assert set(starts) == set(data.starts) and abs(np.mean(starts == 0) - 0.75) < 0.03


def test_adaptive_bins_stay_in_their_clip(clips_dir):
    env = make(clips_dir, num_envs=4)
    motion, data = env.commands["motion"], env.commands["motion"].dataset
    assert motion.num_bins == 4 + 3 + 5  # each clip's frames x 20 ms in bins of 1 s, rounded up
    first_of_clip_1 = int(np.flatnonzero(motion.bin_clip == 1)[0])
    motion.bin_failures[:] = 0.0
    motion.bin_failures[first_of_clip_1] = 1.0
    p = motion.bin_probabilities()
    assert p[first_of_clip_1 - 1] == pytest.approx(0.1 * data.weights[0] / 4)  # not raised
    assert p.sum() == pytest.approx(1.0)
    frames = motion.sample_start_frames(env.rng, 2000)
    assert np.mean(data.clip_of_frame[frames] == 1) > 0.8


def test_failures_land_in_the_bin_of_their_clip(clips_dir):
    env = make(clips_dir, num_envs=2)
    motion, data = env.commands["motion"], env.commands["motion"].dataset
    motion.bin_failures[:] = 0.0
    motion.set_frames(np.arange(2), np.array([data.starts[2] + 60, 10], np.int32))
    env.terminated[:] = [True, False]
    env.truncated[:] = False
    motion.advance(env)
    (failed,) = np.flatnonzero(motion.bin_failures)
    assert motion.bin_clip[failed] == 2 and failed == 4 + 3 + 1  # its second bin


def test_file_and_files_together_are_refused(clips_dir):
    with pytest.raises(ValueError, match=r"params\.file, commands\.motion\.params\.files"):
        make(clips_dir, f"+commands.motion.params.files=[{clips_dir / 'a/short.npz'}]")


def test_files_lists_clips(clips_dir):
    files = f"[{clips_dir / 'a/short.npz'},{clips_dir / 'b/long.npz'}]"
    env = fuselab_envs.make(
        "g1_motion_tracking", [f"+commands.motion.params.files={files}"], num_envs=2, num_threads=1
    )
    data = env.commands["motion"].dataset
    lead = data.lead_in + data.lead_out  # the task's lead frames, from and to rest
    assert data.names == ("short", "long") and list(data.frames) == list(lead + [101, 201])
    description = env.commands["motion"].describe()
    assert [c["name"] for c in description["clips"]] == ["short", "long"]
    assert description["clips"][1]["first_frame"] == data.frames[0]
    assert description["clips"][1]["lead_in"] == data.lead_in[1]


def test_lead_frames_blend_from_the_standing_pose_into_each_clip_and_back(clips_dir):
    files = f"[{clips_dir / 'a/short.npz'},{clips_dir / 'b/long.npz'}]"
    env = fuselab_envs.make(
        "g1_motion_tracking",
        [
            f"+commands.motion.params.files={files}",
            "commands.motion.params.lead_in_s=1.0",
            "commands.motion.params.lead_out_s=0.5",
        ],
        num_envs=2,
        num_threads=1,
    )
    data, facts = env.commands["motion"].dataset, env.backend.model
    joints, bodies = facts.joint_names, facts.body_names
    env.close()
    legs = np.array([("hip" in name or "knee" in name or "ankle" in name) for name in joints])
    feet = [bodies.index(name) - 1 for name in ("left_ankle_roll_link", "right_ankle_roll_link")]
    assert list(data.lead_in) == [50, 50] and list(data.lead_out) == [25, 25]
    assert list(data.frames) == [50 + 101 + 25, 50 + 201 + 25]
    for c, name in enumerate(("a/short", "b/long")):
        alone = load_motion(clips_dir / f"{name}.npz", joint_names=joints, body_names=bodies)
        led = data.clip(c)
        own = slice(50, 50 + alone.num_frames)
        np.testing.assert_array_equal(led.body_pos_w[own], alone.body_pos_w)  # the clip, as is
        np.testing.assert_array_equal(led.joint_vel[own], alone.joint_vel)
        for rest, end in ((0, 0), (-1, -1)):  # standing where the clip starts / ends
            standing = env.init_qpos[facts.joint_qpos_adr]
            np.testing.assert_allclose(led.joint_pos[rest, ~legs], standing[~legs], atol=1e-6)
            np.testing.assert_allclose(led.body_pos_w[rest, 0, :2], alone.body_pos_w[end, 0, :2])
            # the legs stand on the spots where the clip's end frame has the feet
            np.testing.assert_allclose(
                led.body_pos_w[rest, feet, :2], alone.body_pos_w[end, feet, :2], atol=1e-4
            )
            assert led.body_pos_w[rest, 0, 2] == pytest.approx(env.init_qpos[2], abs=1e-6)
            # at rest: the smoothstep ends still (a one-sided difference, 6% of the joint change)
            assert np.abs(led.joint_vel[rest]).max() < 5e-3
        assert np.isfinite(led.body_lin_vel_w).all() and np.isfinite(led.body_ang_vel_w).all()
        measured = data.motion_frames[data.starts[c] : data.ends[c]]
        assert list(np.flatnonzero(measured)) == list(range(50, 50 + alone.num_frames))


def test_clips_of_another_model_or_rate_are_refused_naming_the_first_difference():
    first = dataclasses.replace(synth_clip(1.0, 50.0), source="a.npz")
    joints = list(first.joint_names)
    joints[3] = "tail_joint"
    renamed = dataclasses.replace(first, joint_names=tuple(joints), source="b.npz")
    slower = dataclasses.replace(first, fps=30.0, source="c.npz")
    join = [LedClip(first, 0, 0)]
    with pytest.raises(
        MotionFileError,
        match=rf"b.npz: joint_names: \['tail_joint'\] at entry 3 of {len(joints)}; "
        rf"expected a.npz's \['{first.joint_names[3]}'\]",
    ):
        concatenate([*join, LedClip(renamed, 0, 0)], ["a", "b"], [1.0, 1.0])
    with pytest.raises(MotionFileError, match=r"c.npz: fps: 30.0; expected a.npz's 50.0"):
        concatenate([*join, LedClip(slower, 0, 0)], ["a", "c"], [1.0, 1.0])
