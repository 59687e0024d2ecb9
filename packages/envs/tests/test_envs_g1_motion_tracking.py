"""g1_motion_tracking: terms against their NumPy twins, kinematic replay on every backend, the
motion command's start sampling and clip ends, terminal observations."""

import numpy as np
import pytest
from envs_motion import STILL
from envs_term_twins import tracking  # noqa: F401 - attaches the NumPy twins
from omegaconf import OmegaConf

import fuselab_envs
from fuselab_env_core.numpy_runtime import NumpyTerms
from fuselab_env_core.runtime import FusedTerms

TRACKING = fuselab_envs.compose("g1_motion_tracking")
TRACKED_BODIES = tuple(TRACKING.entity.bodies)  # BeyondMimic's, the motion command's too
CONTACT_BODIES = tuple(TRACKING.entity.contact_bodies)

N_RANDOM = 256
FRAMES, BODIES, JOINTS = 40, 14, 29
TRACKING_REWARDS = (
    "anchor_pos",
    "anchor_ori",
    "body_pos",
    "body_ori",
    "body_lin_vel",
    "body_ang_vel",
)


def unit(q):
    return (q / np.linalg.norm(q, axis=-1, keepdims=True)).astype(np.float32)


def random_clip(rng):
    return {
        "motion_joint_pos": rng.normal(0, 0.5, (FRAMES, JOINTS)).astype(np.float32),
        "motion_joint_vel": rng.normal(0, 2, (FRAMES, JOINTS)).astype(np.float32),
        "motion_body_pos_w": rng.normal(0, 0.5, (FRAMES, BODIES, 3)).astype(np.float32),
        "motion_body_quat_w": unit(rng.normal(0, 1, (FRAMES, BODIES, 4))),
        "motion_body_lin_vel_w": rng.normal(0, 1, (FRAMES, BODIES, 3)).astype(np.float32),
        "motion_body_ang_vel_w": rng.normal(0, 2, (FRAMES, BODIES, 3)).astype(np.float32),
    }


def random_tracking_state(rng, clip, n=N_RANDOM):
    """Robot states near the reference of each env's frame, like a tracking policy sees."""
    frame = rng.integers(0, FRAMES, n).astype(np.int32)
    near = lambda a, std: (a[frame] + rng.normal(0, std, a[frame].shape)).astype(np.float32)  # noqa: E731
    quat = near(clip["motion_body_quat_w"], 0.3)
    quat[: n // 8] = rng.normal(0, 1, (n // 8, BODIES, 4))  # some far off, for the terminations
    pos = near(clip["motion_body_pos_w"], 0.15)
    pos[n // 8 : n // 4, :, :2] += 1.0  # some a metre behind, at the clip's heights
    return {
        "body_pos_w": pos,
        "body_quat_w": unit(quat),
        "body_lin_vel_w": near(clip["motion_body_lin_vel_w"], 0.5),
        "body_ang_vel_w": near(clip["motion_body_ang_vel_w"], 1.0),
        "joint_pos": near(clip["motion_joint_pos"], 0.3),
        "joint_vel": near(clip["motion_joint_vel"], 1.0),
        "contact_force_w": np.where(
            rng.random((n, 4, 1)) < 0.5, rng.normal(0, 50, (n, 4, 3)), 0.0
        ).astype(np.float32),
        "actions": rng.normal(0, 1, (n, JOINTS)).astype(np.float32),
        "last_actions": rng.normal(0, 1, (n, JOINTS)).astype(np.float32),
        "encoder_bias": rng.uniform(-0.02, 0.02, (n, JOINTS)).astype(np.float32),
        "episode_step": rng.integers(0, 600, n).astype(np.int32),
        "max_episode_steps": np.full(n, 500, np.int32),
        "motion_frame": frame,
    }


def tracking_terms(clip):
    """The task's terms, and what the env gives them: task arrays and body names."""
    cfg = fuselab_envs.compose("g1_motion_tracking")
    terms = {
        s: OmegaConf.to_container(cfg[s], resolve=True)
        for s in ("preamble", "rewards", "terminations", "observations")
    }
    robot = {
        "soft_joint_pos_lower": np.full(JOINTS, -0.8, np.float32),
        "soft_joint_pos_upper": np.full(JOINTS, 0.8, np.float32),
        "default_joint_pos": np.random.default_rng(7).normal(0, 0.3, JOINTS).astype(np.float32),
    }
    names = {"body_names": TRACKED_BODIES, "contact_body_names": CONTACT_BODIES}
    return terms, {"arrays": {**robot, **clip}, "names": names}


@pytest.mark.parametrize("seed", [0, 1])
def test_every_term_matches_its_numpy_twin(seed):
    rng = np.random.default_rng(seed)
    clip = random_clip(rng)
    state = random_tracking_state(rng, clip)
    terms, bound = tracking_terms(clip)
    fused = FusedTerms.build(terms, state, dt=0.02, **bound)
    oracle = NumpyTerms(fused.plan, state)
    fused.seed_noise(seed)
    fused.next_step()
    oracle.buffers.noise_key[:] = fused.buffers.noise_key
    fused()
    oracle()
    f, o = fused.buffers, oracle.buffers
    for name in (
        "motion_to_robot_yaw",
        "body_ori_error_sin_half",
        "body_ori_error_cos_half",
        "motion_anchor_pos_b",
        "motion_anchor_ori_b",
    ):
        np.testing.assert_allclose(
            f.workspace[name], o.workspace[name], rtol=1e-5, atol=1e-5, err_msg=name
        )
    np.testing.assert_allclose(f.reward_terms, o.reward_terms, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(f.termination_terms, o.termination_terms)
    for k in range(f.termination_terms.shape[1] - 1):  # each failure term fires for some rows only
        assert 0 < f.termination_terms[:, k].mean() < 1, fused.plan.terminations[k].entry
    for group in f.obs:
        np.testing.assert_allclose(f.obs[group], o.obs[group], rtol=1e-5, atol=1e-5, err_msg=group)
    assert f.obs["actor"].shape == (N_RANDOM, 154) and f.obs["critic"].shape == (N_RANDOM, 286)


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp", "motrix"])
def test_kinematic_replay_earns_every_tracking_reward(backend):
    """The robot put exactly on the clip each step: full tracking rewards, no failures."""
    env = fuselab_envs.make(
        "g1_motion_tracking",
        STILL,
        num_envs=2,
        backend=backend,
        num_threads=1,
        **{"commands.motion.params.start": "uniform"},
        **({"env.randomize": False} if backend == "motrix" else {}),  # no per-env parameters
    )
    motion = env.commands["motion"]
    b, plan = env.terms.buffers, env.terms.plan
    index = {c.entry: k for k, c in enumerate(plan.rewards)}
    weights = fuselab_envs.compose("g1_motion_tracking").rewards
    for _ in range(30):
        qpos, qvel = motion.reference_state(motion.motion_frame)
        env.backend.reset_envs(np.arange(2), qpos, qvel)
        env.robot.update()
        env.terms()
        for name in TRACKING_REWARDS:
            value = b.reward_terms[:, index[name]] / (env.step_dt * weights[name].weight)
            floor = 0.97 if "vel" in name else 0.999  # velocities: finite differences of the clip
            assert (value > floor).all(), (name, value)
        assert not b.terminated.any() and not b.truncated.any()
        np.testing.assert_allclose(b.workspace["motion_anchor_pos_b"], 0.0, atol=2e-4)
        np.testing.assert_allclose(b.workspace["motion_to_robot_yaw"][:, 1], 0.0, atol=2e-4)
        motion.motion_frame[:] = np.minimum(motion.motion_frame + 1, motion.num_frames - 1)


def test_an_episode_starts_on_the_clip_at_its_start_frame_within_the_reset_noise():
    """Reference state initialization: the clip's state at each env's start frame plus uniform
    noise within the configured half-widths (base position, orientation, velocities, joints)."""
    from fuselab_env_core.rotations import np_quat_mul

    env = fuselab_envs.make("g1_motion_tracking", num_envs=300, num_threads=1)
    motion, facts = env.commands["motion"], env.backend.model
    noise = TRACKING.commands.motion.params
    qpos, qvel = motion.reference_state(motion.motion_frame)
    assert len(np.unique(motion.motion_frame)) > 50  # adaptive starts spread over the clip
    got_qpos, got_qvel = env.robot.qpos, env.robot.qvel
    xy, z = np.abs(got_qpos[:, :2] - qpos[:, :2]), np.abs(got_qpos[:, 2] - qpos[:, 2])
    assert np.all(xy <= noise.reset_pos_xy_m + 1e-5) and xy.max() > 0.8 * noise.reset_pos_xy_m
    assert np.all(z <= noise.reset_pos_z_m + 1e-5)
    turn = np_quat_mul(got_qpos[:, 3:7], qpos[:, 3:7] * [1, -1, -1, -1])  # noise rotation
    angle = 2 * np.arccos(np.clip(np.abs(turn[:, 0]), 0, 1))
    bound = 2 * noise.reset_roll_pitch_rad + noise.reset_yaw_rad  # (a composed turn's angle)
    assert np.all(angle <= bound + 1e-4) and angle.max() > 0.1
    lin, ang = np.abs(got_qvel[:, :3] - qvel[:, :3]), np.abs(got_qvel[:, 3:6] - qvel[:, 3:6])
    assert np.all(lin <= noise.reset_lin_vel_mps + 1e-5)
    assert np.all(ang <= noise.reset_ang_vel_radps + 1e-5)
    joints = np.abs(env.robot.joint_pos - qpos[:, facts.joint_qpos_adr])
    assert np.all(joints <= noise.reset_joint_pos_rad + 1e-5) and joints.max() > 0.09
    np.testing.assert_allclose(env.robot.joint_vel, qvel[:, facts.joint_qvel_adr], atol=1e-5)


def test_adaptive_sampling_starts_more_often_where_envs_fail():
    env = fuselab_envs.make("g1_motion_tracking", num_envs=4, num_threads=1)
    motion = env.commands["motion"]
    uniform = motion.sample_start_frames(env.rng, 4000)
    assert np.histogram(uniform, motion.num_bins, (0, motion.num_frames))[0].min() > 0
    motion.bin_failures[:] = 0.0
    motion.bin_failures[6] = 1.0  # every failure so far happened in the seventh second
    frames = motion.sample_start_frames(env.rng, 4000)
    counts = np.bincount(frames * motion.num_bins // motion.num_frames, minlength=motion.num_bins)
    assert counts[6] > 0.3 * 4000 and counts[6] > 5 * np.median(counts)
    assert counts[5] > counts[4]  # the seconds leading up to a failure are raised too
    assert counts.min() > 0  # the uniform share keeps every bin alive


def test_failures_are_counted_in_the_bin_of_the_failing_frame():
    env = fuselab_envs.make("g1_motion_tracking", num_envs=4, num_threads=1)
    motion = env.commands["motion"]
    motion.bin_failures[:] = 0.0
    motion.motion_frame[:] = [10, 10, 260, 400]
    env.terminated[:] = [True, False, True, False]
    env.truncated[:] = False
    motion.advance(env)  # after the step is scored: count its failures, then the next frame
    failed_bins = np.flatnonzero(motion.bin_failures)
    assert list(failed_bins) == [
        10 * motion.num_bins // motion.num_frames,
        260 * motion.num_bins // motion.num_frames,
    ]
    assert list(motion.motion_frame) == [11, 11, 261, 401]


@pytest.mark.parametrize("clip_end", ["truncate", "resample"])
def test_clip_end(clip_end):
    env = fuselab_envs.make(
        "g1_motion_tracking",
        STILL,
        num_envs=3,
        num_threads=1,
        **{"commands.motion.params.clip_end": clip_end, "env.episode_length_s": 30.0},
    )
    motion = env.commands["motion"]
    motion.motion_frame[:] = motion.num_frames - 2
    qpos, qvel = motion.reference_state(motion.motion_frame)
    env.backend.reset_envs(np.arange(3), qpos, qvel)
    steps_before = env.episode_step.copy()
    hold = (env.robot.joint_pos - env.action.offset) / env.action.scale
    first = env.step(hold.astype(np.float32))
    assert not first.truncated.any()
    second = env.step(hold.astype(np.float32))
    if clip_end == "truncate":
        assert second.truncated.all()
        assert (env.episode_step == 0).all()
    else:
        assert not second.truncated.any() and not second.terminated.any()
        assert (env.episode_step == steps_before + 2).all()  # the episode goes on
        assert (motion.motion_frame < motion.num_frames - 1).all()
        qpos, _ = motion.reference_state(motion.motion_frame)
        np.testing.assert_allclose(env.robot.qpos, qpos, atol=1e-5)  # teleported onto the clip


def test_terminated_rows_keep_their_final_observation():
    env = fuselab_envs.make("g1_motion_tracking", num_envs=4, num_threads=1)
    before_reset = {}
    original_reset = env._reset

    def snapshot_then_reset(env_ids):
        before_reset.update(
            {g: (env_ids.copy(), o[env_ids].copy()) for g, o in env.terms.buffers.obs.items()}
        )
        original_reset(env_ids)

    env._reset = snapshot_then_reset
    qpos, qvel = env.robot.qpos.copy(), env.robot.qvel.copy()
    qpos[1, 2] -= 0.5  # env 1 sinks: anchor height error
    env.backend.reset_envs(np.arange(4), qpos, qvel)
    result = env.step(np.zeros((4, 29), np.float32))
    assert result.terminated[1]
    for group, (rows, obs) in before_reset.items():
        assert 1 in rows
        np.testing.assert_array_equal(result.info["terminal_obs"][group][rows], obs)
        assert not np.array_equal(result.obs[group][rows], obs)  # the new episode's observation


def test_bad_task_settings_are_named():
    with pytest.raises(
        ValueError,
        match=r"commands\.motion\.params\.start: expected one of start, uniform, adaptive, "
        r"got 'often'",
    ):
        fuselab_envs.make(
            "g1_motion_tracking", num_envs=2, **{"commands.motion.params.start": "often"}
        )
    with pytest.raises(
        ValueError, match=r"commands\.motion\.params\.clip_end: expected one of truncate, resample"
    ):
        fuselab_envs.make(
            "g1_motion_tracking", num_envs=2, **{"commands.motion.params.clip_end": "loop"}
        )
    with pytest.raises(
        ValueError, match=r"commands\.motion\.params\.smoothing_decay: expected >= 0 and <= 1"
    ):
        fuselab_envs.make(
            "g1_motion_tracking", num_envs=2, **{"commands.motion.params.smoothing_decay": 1.5}
        )
    with pytest.raises(
        ValueError,
        match=r"commands\.motion\.params\.bodies: \[.*\] must be entity\.bodies \[.*\], in order",
    ):
        fuselab_envs.make(
            "g1_motion_tracking",
            ["commands.motion.params.bodies=[pelvis,torso_link]"],
            num_envs=2,
        )
