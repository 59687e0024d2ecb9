"""G1WalkFlat: every term against its NumPy twin, the env on each backend, and its config."""

import numpy as np
import pytest
from envs_term_twins import common  # noqa: F401 - attaches the NumPy twins
from omegaconf import OmegaConf

import fuselab_envs
from fuselab_env_core.numpy_runtime import NumpyTerms
from fuselab_env_core.rotations import np_yaw
from fuselab_env_core.runtime import FusedTerms
from fuselab_envs.tasks.g1_walk_flat import BODIES, CONTACT_BODIES

N_RANDOM = 256


def random_walk_state(rng, n=N_RANDOM, joints=29):
    quat = rng.normal(0, 1, (n, 4, 4)).astype(np.float32)
    quat /= np.linalg.norm(quat, axis=-1, keepdims=True)
    return {
        "body_pos_w": rng.normal(0, 0.5, (n, 4, 3)).astype(np.float32),
        "body_quat_w": quat,
        "body_lin_vel_w": rng.normal(0, 1, (n, 4, 3)).astype(np.float32),
        "body_ang_vel_w": rng.normal(0, 1, (n, 4, 3)).astype(np.float32),
        "joint_pos": rng.normal(0, 1.5, (n, joints)).astype(np.float32),
        "joint_vel": rng.normal(0, 3, (n, joints)).astype(np.float32),
        "actions": rng.normal(0, 1, (n, joints)).astype(np.float32),
        "last_actions": rng.normal(0, 1, (n, joints)).astype(np.float32),
        "episode_step": rng.integers(0, 1200, n).astype(np.int32),
        "max_episode_steps": np.full(n, 1000, np.int32),
        "command": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "contact_force_w": np.where(
            rng.random((n, 6, 1)) < 0.5, rng.normal(0, 50, (n, 6, 3)), 0.0
        ).astype(np.float32),
    }


def walk_terms(overrides=()):
    """The task's terms, and what the env gives them: task arrays and body names."""
    cfg = fuselab_envs.compose("g1_walk_flat", overrides)
    terms = {
        s: OmegaConf.to_container(cfg[s], resolve=True)
        for s in ("preamble", "rewards", "terminations", "observations")
    }
    joints = 29
    arrays = {
        "soft_joint_pos_lower": np.full(joints, -1.0, np.float32),
        "soft_joint_pos_upper": np.full(joints, 1.0, np.float32),
        "default_joint_pos": np.random.default_rng(7).normal(0, 0.3, joints).astype(np.float32),
        "posture_std_standing": np.full(joints, 0.05, np.float32),
        "posture_std_walking": np.linspace(0.1, 0.4, joints).astype(np.float32),
        "posture_std_running": np.linspace(0.2, 0.6, joints).astype(np.float32),
    }
    names = {"body_names": BODIES, "contact_body_names": CONTACT_BODIES}
    return terms, {"arrays": arrays, "names": names}


@pytest.mark.parametrize("seed", [0, 1])
def test_every_term_matches_its_numpy_twin(seed):
    rng = np.random.default_rng(seed)
    state = random_walk_state(rng)
    terms, bound = walk_terms()
    fused = FusedTerms.build(terms, state, dt=0.02, **bound)
    oracle = NumpyTerms(fused.plan, state)
    fused.seed_noise(seed)
    fused.next_noise_draw()
    oracle.buffers.noise_key[:] = fused.buffers.noise_key
    for _ in range(3):  # the feet timers carry state from step to step
        state["contact_force_w"][:] = np.where(
            rng.random((N_RANDOM, 6, 1)) < 0.5, rng.normal(0, 50, (N_RANDOM, 6, 3)), 0.0
        )
        fused()
        oracle()
    f, o = fused.buffers, oracle.buffers
    assert f.workspace["feet_first_contact"].any() and f.workspace["feet_air_time"].any()
    np.testing.assert_allclose(f.reward_terms, o.reward_terms, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(f.termination_terms, o.termination_terms)
    assert 0 < f.terminated.mean() < 1 and 0 < f.truncated.mean() < 1
    for group in f.obs:
        np.testing.assert_allclose(f.obs[group], o.obs[group], rtol=1e-5, atol=1e-6)
    assert f.obs["actor"].shape == (N_RANDOM, 99) and f.obs["critic"].shape == (N_RANDOM, 101)


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp", "motrix"])
def test_200_random_steps_on_each_backend(backend):
    n = 4
    env = fuselab_envs.make(
        "g1_walk_flat", num_envs=n, backend=backend, **{"env.episode_length_s": 1.0}
    )
    rng = np.random.default_rng(0)
    resets = 0
    for _ in range(200):
        result = env.step(rng.uniform(-1, 1, (n, 29)).astype(np.float32))
        for group, obs in result.obs.items():
            assert obs.dtype == np.float32 and np.isfinite(obs).all(), group
        assert np.isfinite(result.reward).all()
        resets += len(result.info["reset_envs"])
        if len(result.info["reset_envs"]):
            fresh = result.obs["actor"][
                result.info["reset_envs"], 9:12
            ]  # command of the new episode
            np.testing.assert_array_equal(fresh, env.command[result.info["reset_envs"]])
    assert resets >= 4 * n  # 1 s episodes: every env timed out (or fell) several times


def test_overrides_compose_and_reach_the_env():
    cfg = fuselab_envs.compose(
        "g1_walk_flat", ["backend=mjwarp", "num_envs=8", "rewards.track_lin_vel.weight=1.5"]
    )
    assert cfg.backend == "mjwarp" and cfg.num_envs == 8
    assert cfg.rewards.track_lin_vel.weight == 1.5
    assert "g1_walk_flat" in fuselab_envs.list_tasks()


def test_after_pushes_and_resets_the_bound_state_equals_a_full_copy():
    env = fuselab_envs.make(
        "g1_walk_flat",
        num_envs=6,
        **{"env.episode_length_s": 0.3, "events.push_interval_s": 0.1},
    )
    rng = np.random.default_rng(2)
    for _ in range(40):
        env.step(rng.uniform(-1, 1, (6, 29)).astype(np.float32))
        copied = {name: array.copy() for name, array in env.robot.state().items()}
        env.robot.update()
        for name, array in env.robot.state().items():
            np.testing.assert_array_equal(copied[name], array, err_msg=name)


def test_commands_stand_turn_in_place_walk_straight_or_walk_in_their_shares():
    shares = {"standing": 0.2, "turning": 0.3, "straight": 0.25}
    env = fuselab_envs.make(
        "g1_walk_flat",
        num_envs=4000,
        **{f"commands.{kind}_fraction": share for kind, share in shares.items()},
    )
    c = env.command
    planar, yaw = np.any(c[:, :2] != 0.0, axis=1), c[:, 2] != 0.0
    kinds = {
        "standing": ~planar & ~yaw,
        "turning": ~planar & yaw,
        "straight": planar & ~yaw,
    }
    for kind, share in shares.items():
        assert abs(kinds[kind].mean() - share) < 0.03, kind
    assert (
        np.all(np.abs(c[kinds["turning"], 2]) <= 1.0) and np.abs(c[kinds["turning"], 2]).max() > 0.9
    )
    walking = planar & yaw
    assert np.all(c[walking, :2] != 0.0)  # drawn jointly: no axis left zero
    assert abs(walking.mean() - 0.25) < 0.03


def test_heading_commands_steer_the_yaw_rate_to_the_heading_every_step():
    stiffness = 0.5
    env = fuselab_envs.make(
        "g1_walk_flat",
        num_envs=400,
        **{
            "commands.heading_fraction": 0.5,
            "commands.heading_stiffness": stiffness,
            "commands.turning_fraction": 0.0,
            "commands.straight_fraction": 0.0,
        },
    )
    walking = np.any(env.command[:, :2] != 0.0, axis=1)
    assert not env.steering[~walking].any()  # standing commands stay zero
    assert abs(env.steering[walking].mean() - 0.5) < 0.1

    def steered_yaw_rate():
        yaw = np_yaw(env.robot.qpos[:, 3:7].astype(np.float64))
        error = np.mod(env.heading_target - yaw + np.pi, 2 * np.pi) - np.pi
        return np.clip(stiffness * error, -1.0, 1.0)

    rng = np.random.default_rng(3)
    held = env.command[~env.steering, 2].copy()
    for _ in range(3):  # after the reset, and after steps (the robots turn as they fall)
        np.testing.assert_allclose(
            env.command[env.steering, 2], steered_yaw_rate()[env.steering], atol=1e-5
        )
        env.step(rng.uniform(-1, 1, (400, 29)).astype(np.float32))
    np.testing.assert_array_equal(env.command[~env.steering, 2], held)  # the others hold
    saturated = np.abs(env.command[env.steering, 2]) == 1.0
    assert 0.1 < saturated.mean() < 0.9  # heading errors past 2 rad ask the range's end


def test_bad_override_unknown_task_and_missing_file_are_named():
    with pytest.raises(
        KeyError,
        match=r"no key 'rewards.track_lin_vel.wieght' in the config; did you mean 'rewards.track_lin_vel.weight'",
    ):
        fuselab_envs.compose("g1_walk_flat", ["rewards.track_lin_vel.wieght=2"])
    with pytest.raises(KeyError, match="unknown task 'g1_walk_flt'; did you mean 'g1_walk_flat'"):
        fuselab_envs.compose("g1_walk_flt")
    with pytest.raises(FileNotFoundError, match="mjcf: no MJCF file at '/no/such/g1.xml'"):
        fuselab_envs.make("g1_walk_flat", num_envs=2, **{"robot.mjcf": "/no/such/g1.xml"})


def test_a_term_parameter_out_of_its_range_is_named_with_its_key():
    with pytest.raises(
        ValueError, match=r"rewards\.track_lin_vel\.params\.std: expected > 0, got 0"
    ):
        fuselab_envs.make("g1_walk_flat", num_envs=2, **{"rewards.track_lin_vel.params.std": 0})
    with pytest.raises(
        ValueError,
        match=r"terminations\.fell_over\.params\.limit_angle_rad: expected > 0 and <= 3\.14159",
    ):
        fuselab_envs.make(
            "g1_walk_flat", num_envs=2, **{"terminations.fell_over.params.limit_angle_rad": 4}
        )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "commands.standing_fraction=2",
            r"commands\.standing_fraction: expected >= 0 and <= 1, got 2",
        ),
        ("commands.resample_s=0", r"commands\.resample_s: expected > 0, got 0"),
        (
            "commands.turning_fraction=0.95",
            r"commands\.standing_fraction \+ commands\.turning_fraction \+ "
            r"commands\.straight_fraction: expected <= 1, got 0\.1 \+ 0\.95 \+ 0\.2",
        ),
        (
            "commands.lin_vel_x=[1,-1]",
            r"commands\.lin_vel_x: expected \[low, high\], numbers with low <= high",
        ),
        ("events.push_interval_s=-1", r"events\.push_interval_s: expected > 0 or null, got -1"),
        ("events.joint_noise_rad=-0.1", r"events\.joint_noise_rad: expected >= 0, got -0\.1"),
        ("env.decimation=0", r"env\.decimation: expected >= 1, got 0"),
        (
            "env.episode_length_s=abc",
            r"env\.episode_length_s: expected a finite number > 0, got 'abc'",
        ),
    ],
)
def test_a_task_value_out_of_its_range_is_named_before_anything_is_built(
    monkeypatch, override, message
):
    from fuselab_envs import registry

    def no_backend(cfg):
        raise AssertionError("a backend was built for a config that fails")

    monkeypatch.setattr(registry, "make_backend", no_backend)
    with pytest.raises(ValueError, match=message):
        registry.make_env(fuselab_envs.compose("g1_walk_flat", [override]))


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            '"left_knee_joint"',
            '"left_knee_jnt"',
            r"robot: G1WalkFlat needs the G1's joints by name; the model has no joint "
            r"'left_knee_joint'; did you mean 'left_knee_jnt'\? \(1 of 29 missing",
        ),
        (
            '<general name="left_knee"',
            '<general name="knee_l"',
            r"joint 3 is 'left_knee_joint', so actuator 3 must be 'left_knee', found 'knee_l'",
        ),
    ],
)
def test_a_user_mjcf_that_breaks_the_g1_naming_rule_is_named(tmp_path, old, new, message):
    from fuselab_envs.g1 import G1_XML_PATH

    mjcf = tmp_path / "g1_renamed.xml"
    mjcf.write_text(G1_XML_PATH.read_text().replace(old, new))
    with pytest.raises(ValueError, match=message):
        fuselab_envs.make("g1_walk_flat", num_envs=2, **{"robot.mjcf": str(mjcf)})
