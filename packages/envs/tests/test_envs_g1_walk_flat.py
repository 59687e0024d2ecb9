"""g1_walk_flat: every term against its NumPy twin, the env on each backend, its velocity
commands, pushes, and its config."""

import numpy as np
import pytest
from envs_term_twins import common  # noqa: F401 - attaches the NumPy twins
from omegaconf import OmegaConf

import fuselab_envs
from fuselab_env_core.numpy_runtime import NumpyTerms
from fuselab_env_core.rotations import np_yaw
from fuselab_env_core.runtime import FusedTerms

WALK = fuselab_envs.compose("g1_walk_flat")
BODIES = tuple(WALK.entity.bodies)  # what the env copies for the terms, in the YAML's order
CONTACT_BODIES = tuple(WALK.entity.contact_bodies)
PUSH = (  # a push every 0.1 s (5 control steps) of up to 0.5 m/s in x and y
    "++events.push={term: push_by_setting_velocity, mode: interval, interval_s: [0.1, 0.1], "
    "params: {lin_vel_x_mps: [-0.5, 0.5], lin_vel_y_mps: [-0.5, 0.5]}}"
)

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
        "encoder_bias": rng.uniform(-0.02, 0.02, (n, joints)).astype(np.float32),
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
    fused.next_step()
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
    assert f.obs["actor"].shape == (N_RANDOM, 96) and f.obs["critic"].shape == (N_RANDOM, 101)


@pytest.mark.parametrize("yaw_rate_weight", [0.0, 1.0])
def test_the_air_time_gate_counts_a_turn_in_place_by_its_yaw_rate_weight(yaw_rate_weight):
    """Standing earns no air-time reward; a turn in place earns it only when the gate counts
    the yaw rate (mjlab's |v_xy| + |wz|), and then as a walk at the same speed does."""
    commands = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.6], [0.6, 0.0, 0.0]], np.float32)
    state = random_walk_state(np.random.default_rng(0), n=len(commands))
    state["command"][:] = commands
    terms, bound = walk_terms([f"rewards.feet_air_time.params.yaw_rate_weight={yaw_rate_weight}"])
    fused = FusedTerms.build(terms, state, dt=0.02, **bound)
    air_time = [c.entry for c in fused.plan.rewards].index("feet_air_time")
    touching = np.zeros((len(commands), 6, 3), np.float32)
    touching[:, :2, 2] = 100.0  # both feet (the first two contact bodies) on the floor
    for force in [touching] + [np.zeros_like(touching)] * 20 + [touching]:  # a 0.42 s flight
        state["contact_force_w"][:] = force
        fused()
    stand, turn, walk = fused.buffers.reward_terms[:, air_time]
    assert stand == 0 and walk > 0
    assert turn == (pytest.approx(walk) if yaw_rate_weight else 0.0)


# MotrixSim sets no model parameters per env: the task runs there nominal (no randomization).
NOMINAL_ON = {"motrix": {"env.randomize": False}}


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp", "motrix"])
def test_200_random_steps_on_each_backend(backend):
    n = 4
    env = fuselab_envs.make(
        "g1_walk_flat",
        num_envs=n,
        backend=backend,
        **{"env.episode_length_s": 1.0, **NOMINAL_ON.get(backend, {})},
    )
    command = env.commands["velocity"].command
    command_columns = env.terms.plan.observations["actor"].slices()["command"]
    rng = np.random.default_rng(0)
    resets = 0
    for _ in range(200):
        result = env.step(rng.uniform(-1, 1, (n, 29)).astype(np.float32))
        for group, obs in result.obs.items():
            assert obs.dtype == np.float32 and np.isfinite(obs).all(), group
        assert np.isfinite(result.reward).all()
        resets += len(result.info["reset_envs"])
        if len(result.info["reset_envs"]):  # the new episodes observe their new commands
            fresh = result.obs["actor"][result.info["reset_envs"], command_columns]
            np.testing.assert_array_equal(fresh, command[result.info["reset_envs"]])
    assert resets >= 4 * n  # 1 s episodes: every env timed out (or fell) several times


def test_randomization_a_backend_cannot_do_is_refused_by_name():
    with pytest.raises(ValueError, match="MotrixBackend does not set model parameters per env"):
        fuselab_envs.make("g1_walk_flat", num_envs=2, backend="motrix")


def test_overrides_compose_and_reach_the_env():
    cfg = fuselab_envs.compose(
        "g1_walk_flat", ["backend=mjwarp", "num_envs=8", "rewards.track_lin_vel.weight=1.5"]
    )
    assert cfg.backend == "mjwarp" and cfg.num_envs == 8
    assert cfg.rewards.track_lin_vel.weight == 1.5
    assert "g1_walk_flat" in fuselab_envs.list_tasks()


def test_the_physics_step_is_the_tasks_and_the_control_step_follows():
    env = fuselab_envs.make(
        "g1_walk_flat", ["env.physics_dt=0.01", "env.decimation=2"], num_envs=2, num_threads=1
    )
    facts, step_dt = env.backend.model, env.step_dt
    env.close()
    assert facts.physics_dt == pytest.approx(0.01) and step_dt == pytest.approx(0.02)


def test_after_pushes_and_resets_the_bound_state_equals_a_full_copy():
    env = fuselab_envs.make("g1_walk_flat", [PUSH], num_envs=6, **{"env.episode_length_s": 0.3})
    written, write_state = [], env.write_state

    def record(env_ids, qpos, qvel):
        written.append(len(env_ids))
        write_state(env_ids, qpos, qvel)

    env.write_state = record
    rng = np.random.default_rng(2)
    resets = 0
    for _ in range(40):
        result = env.step(rng.uniform(-1, 1, (6, 29)).astype(np.float32))
        resets += len(result.info["reset_envs"])
        copied = {name: array.copy() for name, array in env.robot.state().items()}
        env.robot.update()
        for name, array in env.robot.state().items():
            np.testing.assert_array_equal(copied[name], array, err_msg=name)
    assert resets > 0 and sum(written) - resets >= 6 * 2  # pushed rows: written beyond resets


def test_an_episode_starts_standing_facing_any_way_with_its_joints_jittered():
    """The reset events: the base at the standing pose turned by a yaw uniform in [0, 2 pi),
    still; each joint within 0.1 rad of the default pose (and its range)."""
    from fuselab_envs.g1 import STANDING_PELVIS_HEIGHT

    env = fuselab_envs.make("g1_walk_flat", num_envs=400, num_threads=1)
    qpos, qvel, facts = env.robot.qpos, env.robot.qvel, env.backend.model
    np.testing.assert_allclose(qpos[:, :3], [[0.0, 0.0, STANDING_PELVIS_HEIGHT]] * 400, atol=1e-6)
    yaw = np.mod(np_yaw(qpos[:, 3:7].astype(np.float64)), 2 * np.pi)
    assert np.histogram(yaw, 8, (0, 2 * np.pi))[0].min() > 20  # every heading
    np.testing.assert_allclose(qpos[:, 4:6], 0.0, atol=1e-6)  # a turn about z: no roll, pitch
    offset = env.robot.joint_pos - env.action.offset  # the default pose, the actions' offset
    low, high = facts.joint_ranges[:, 0], facts.joint_ranges[:, 1]
    assert np.all(np.abs(offset) <= 0.1 + 1e-6) and np.abs(offset).max() > 0.09
    assert np.all((env.robot.joint_pos >= low - 1e-6) & (env.robot.joint_pos <= high + 1e-6))
    np.testing.assert_array_equal(qvel, 0.0)


def test_commands_stand_turn_in_place_walk_straight_step_sideways_or_walk_in_their_shares():
    shares = {"standing": 0.2, "turning": 0.25, "straight": 0.2, "sideways": 0.1}
    env = fuselab_envs.make(
        "g1_walk_flat",
        num_envs=4000,
        **{f"commands.velocity.params.{kind}_fraction": share for kind, share in shares.items()},
    )
    c = env.commands["velocity"].command
    planar, yaw = np.any(c[:, :2] != 0.0, axis=1), c[:, 2] != 0.0
    forward = c[:, 0] != 0.0
    kinds = {
        "standing": ~planar & ~yaw,
        "turning": ~planar & yaw,
        "straight": forward & ~yaw,
        "sideways": planar & ~forward & ~yaw,
    }
    for kind, share in shares.items():
        assert abs(kinds[kind].mean() - share) < 0.03, kind
    assert (
        np.all(np.abs(c[kinds["turning"], 2]) <= 1.0) and np.abs(c[kinds["turning"], 2]).max() > 0.9
    )
    assert np.abs(c[kinds["sideways"], 1]).max() > 0.45  # sideways to the range's end (0.5)
    walking = planar & yaw
    assert np.all(c[walking, :2] != 0.0)  # drawn jointly: no axis left zero
    assert abs(walking.mean() - 0.25) < 0.03


def test_heading_commands_steer_the_yaw_rate_to_the_heading_every_step():
    stiffness = 0.5
    env = fuselab_envs.make(
        "g1_walk_flat",
        num_envs=400,
        **{
            "commands.velocity.params.heading_fraction": 0.5,
            "commands.velocity.params.heading_stiffness": stiffness,
            "commands.velocity.params.turning_fraction": 0.0,
            "commands.velocity.params.straight_fraction": 0.0,
        },
    )
    velocity = env.commands["velocity"]
    command, steering = velocity.command, velocity.steering
    walking = np.any(command[:, :2] != 0.0, axis=1)
    assert not steering[~walking].any()  # standing commands stay zero
    assert abs(steering[walking].mean() - 0.5) < 0.1

    def steered_yaw_rate():
        yaw = np_yaw(env.robot.qpos[:, 3:7].astype(np.float64))
        error = np.mod(velocity.heading_target - yaw + np.pi, 2 * np.pi) - np.pi
        return np.clip(stiffness * error, -1.0, 1.0)

    rng = np.random.default_rng(3)
    held = command[~steering, 2].copy()
    for _ in range(3):  # after the reset, and after steps (the robots turn as they fall)
        np.testing.assert_allclose(command[steering, 2], steered_yaw_rate()[steering], atol=1e-5)
        env.step(rng.uniform(-1, 1, (400, 29)).astype(np.float32))
    np.testing.assert_array_equal(command[~steering, 2], held)  # the others hold
    saturated = np.abs(command[steering, 2]) == 1.0
    assert 0.1 < saturated.mean() < 0.9  # heading errors past 2 rad ask the range's end


def walk_levels(**params):
    """A curriculum entry: the velocity command's linear ranges by levels."""
    given = ", ".join(f"{key}: {value}" for key, value in params.items())
    return f"+curriculum.speeds={{term: velocity_command_levels, params: {{{given}}}}}"


def test_a_curriculum_widens_the_linear_ranges_by_levels_as_their_reward_is_earned():
    def commands_after(env, steps):
        for _ in range(steps):
            result = env.step(np.zeros((64, 29), np.float32))
        return np.abs(env.commands["velocity"].command).max(axis=0), result.info

    redraw = "commands.velocity.params.resample_s=0.02"  # every step: the ranges show at once
    # a robot that stands earns most of the reward for commands this small, not for the
    # configured ones: the levels climb while it can
    env = fuselab_envs.make(
        "g1_walk_flat",
        [redraw, walk_levels(start=0.25, step=0.25, threshold=0.75, window_s=0.2)],
        num_envs=64,
    )
    reach, info = commands_after(env, 1)
    assert reach[0] <= 0.25 and reach[1] <= 0.125 and reach[2] > 0.9  # yaw: all of its range
    assert info["curriculum"] == {"speeds": 0.25}
    reach, info = commands_after(env, 40)  # 4 windows
    assert 0.5 <= info["curriculum"]["speeds"] < 1.0
    assert reach[0] <= info["curriculum"]["speeds"] + 1e-6
    assert env.commands["velocity"].describe()["ranges"]["lin_vel_x"] == [-1.0, 1.0]

    out_of_reach = walk_levels(start=0.25, threshold=1.0, window_s=0.2)
    env = fuselab_envs.make("g1_walk_flat", [redraw, out_of_reach], num_envs=64)
    assert commands_after(env, 40)[1]["curriculum"] == {"speeds": 0.25}


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
            "commands.velocity.params.standing_fraction=2",
            r"commands\.velocity\.params\.standing_fraction: expected >= 0 and <= 1, got 2",
        ),
        (
            "commands.velocity.params.resample_s=0",
            r"commands\.velocity\.params\.resample_s: expected > 0, got 0",
        ),
        (
            "commands.velocity.params.lin_vel_x=[1,-1]",
            r"commands\.velocity\.params\.lin_vel_x: expected \[low, high\], numbers with low <= high",
        ),
        (
            "+commands.velocity.params.speed=1",
            r"commands\.velocity\.params: unknown parameter 'speed'",
        ),
        (
            "commands.velocity.term=uniform_velocty",
            r"commands\.velocity\.term: unknown command 'uniform_velocty'; did you mean "
            r"'uniform_velocity'",
        ),
        (
            PUSH.replace("[0.1, 0.1]", "[-1, 1]"),
            r"events\.push\.interval_s: expected \[low, high\], numbers with low <= high, each >= 0",
        ),
        (
            PUSH.replace("mode: interval", "mode: startup"),
            r"events\.push\.mode: expected one of interval, reset, got 'startup'",
        ),
        (
            "events.reset_joints.params.position_rad=[0.1,-0.1]",
            r"events\.reset_joints\.params\.position_rad: expected \[low, high\], numbers with "
            r"low <= high",
        ),
        (
            "+actions.joint_pos.params.clip=0",
            r"actions\.joint_pos\.params\.clip: expected > 0",
        ),
        (
            "events.action_delay.params.steps=[0,1.5]",
            r"events\.action_delay\.params\.steps: expected \[low, high\], ints with low <= high, "
            r"each >= 0",
        ),
        (
            "+curriculum.speeds={term: velocity_command_level}",
            r"curriculum\.speeds\.term: unknown curriculum 'velocity_command_level'; did you "
            r"mean 'velocity_command_levels'",
        ),
        (
            walk_levels(threshold=1.5),
            r"curriculum\.speeds\.params\.threshold: expected >= 0 and <= 1, got 1\.5",
        ),
        ("robot.name=h1", r"robot\.name: unknown robot 'h1'"),
        ("env.decimation=0", r"env\.decimation: expected >= 1, got 0"),
        ("env.physics_dt=0", r"env\.physics_dt: expected .*> 0.*, got 0"),
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

    def no_backend(*args, **kwargs):
        raise AssertionError("a backend was built for a config that fails")

    monkeypatch.setattr(registry, "make_backend", no_backend)
    with pytest.raises((ValueError, KeyError), match=message):
        registry.make_env(fuselab_envs.compose("g1_walk_flat", [override]))


def test_a_value_checked_against_the_model_or_its_neighbours_is_named_and_the_backend_closed(
    monkeypatch,
):
    from fuselab_envs import registry

    closed, make_backend = [], registry.make_backend

    def closing_backend(*args, **kwargs):
        backend = make_backend(*args, **kwargs)
        close = backend.close
        backend.close = lambda: (closed.append(True), close())
        return backend

    monkeypatch.setattr(registry, "make_backend", closing_backend)
    bad = [
        (
            "commands.velocity.params.turning_fraction=0.95",
            r"commands\.velocity\.params\.standing_fraction \+ "
            r"commands\.velocity\.params\.turning_fraction \+ "
            r"commands\.velocity\.params\.straight_fraction \+ "
            r"commands\.velocity\.params\.sideways_fraction: expected <= 1, "
            r"got 0\.1 \+ 0\.95 \+ 0\.2 \+ 0\.0",
        ),
        (
            "+events.reset_joints.params.joints='.*_knee_jont'",
            r"events\.reset_joints\.params\.joints: '\.\*_knee_jont' matches none of the model's "
            r"joints",
        ),
        (
            "entity.bodies=[pelvis,torso]",
            r"body 'torso' is not in the model; did you mean 'torso_link'",
        ),
        (
            walk_levels(command="motion"),
            r"curriculum\.speeds\.params\.command: expected a uniform_velocity command of the "
            r"task \(\['velocity'\]\), got 'motion'",
        ),
        (
            walk_levels(axes="[lin_vel_z]"),
            r"curriculum\.speeds\.params\.axes: expected names among \['lin_vel_x', 'lin_vel_y', "
            r"'ang_vel_z'\], got \['lin_vel_z'\]",
        ),
        (
            walk_levels(step=0),
            r"curriculum\.speeds\.params\.step: expected a fraction > 0, got 0",
        ),
        (
            walk_levels(reward="track_velocity"),
            r"curriculum\.speeds\.params\.reward: expected one of \['track_lin_vel', .*\], "
            r"got 'track_velocity'",
        ),
        (
            walk_levels(reward="action_rate"),
            r"curriculum\.speeds\.params\.reward: 'action_rate' has weight -0\.01; a level is "
            r"earned by a share of a positive reward's most",
        ),
    ]
    for override, message in bad:
        with pytest.raises((ValueError, KeyError), match=message):
            registry.make_env(fuselab_envs.compose("g1_walk_flat", [override, "num_envs=2"]))
    assert len(closed) == len(bad)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            '"left_knee_joint"',
            '"left_knee_jnt"',
            r"robot: g1_walk_flat needs the G1's joints by name; the model has no joint "
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
