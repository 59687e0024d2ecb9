"""fuselab-sim2sim on trained runs: policy.onnx alone in a plain MuJoCo loop, measured as
fuselab-eval measures (a walk, a tracking dataset clip by clip), on another physics step and on
a G1 model with torque actuators; files without the deploy contract are refused."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from fuselab_envs.motion.synth import synth_clip
from fuselab_envs.robots import robot
from fuselab_rl.deploy import METADATA_KEY, load_deployed
from fuselab_rl.runner import compose_config, create_training_handle
from fuselab_rl.sim2sim import Robot, _failure_rules, _termination_params, sim2sim

QUICK = ["num_envs=8", "progress=false", "plot=false", "threads=1", "algo.num_steps_per_env=4"]


def trained(run_dir, *overrides) -> None:
    """One PPO iteration into ``run_dir`` (its checkpoint and policy.onnx)."""
    with create_training_handle(compose_config([f"run_dir={run_dir}", *QUICK, *overrides])) as h:
        h.train(1)


@pytest.fixture(scope="module")
def walk_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("walk")
    trained(run, "task=g1_walk_flat")
    return run


def test_a_walk_policy_runs_alone_and_is_measured_like_fuselab_eval(walk_run):
    report = sim2sim(walk_run, seconds=0.3, num_envs=5)
    metrics = report["metrics"]
    assert set(metrics) == {"overall", "forward", "backward", "lateral", "turning", "standing"}
    assert [metrics[k]["envs"] for k in ("forward", "standing")] == [1, 1]
    assert np.isfinite(metrics["overall"]["lin_vel_rms_mps"])
    assert report["decimation"] == 4 and report["physics_dt"] == pytest.approx(0.005)
    fine = sim2sim(walk_run, seconds=0.3, num_envs=5, physics_dt=0.001)
    assert fine["decimation"] == 20
    with pytest.raises(ValueError, match=r"physics_dt: 0.003 does not divide .* 0.02"):
        sim2sim(walk_run, seconds=0.3, num_envs=5, physics_dt=0.003)


def test_a_policy_trained_on_another_physics_step_is_run_on_its_own(tmp_path):
    """The deploy document's physics step, not the MJCF's, is sim2sim's default."""
    trained(tmp_path, "task=g1_walk_flat", "env.physics_dt=0.01", "env.decimation=2")
    report = sim2sim(tmp_path, seconds=0.1, num_envs=5)
    assert report["physics_dt"] == pytest.approx(0.01) and report["decimation"] == 2


def g1_variant(tmp_path, edit) -> str:
    spec = mujoco.MjSpec.from_file(str(robot("g1").model()))
    edit(spec)
    path = tmp_path / "g1_variant.xml"
    path.write_text(spec.to_xml())
    return str(path)


def test_a_g1_with_torque_actuators_runs_the_pd_law_itself(walk_run, tmp_path):
    def motors(spec):
        for actuator in spec.actuators:  # position servos -> motors of the same force range
            actuator.gaintype = mujoco.mjtGain.mjGAIN_FIXED
            actuator.gainprm[0] = 1.0
            actuator.biastype = mujoco.mjtBias.mjBIAS_NONE
            actuator.ctrlrange = actuator.forcerange
            actuator.ctrllimited = True

    mjcf = g1_variant(tmp_path, motors)
    policy = load_deployed(walk_run / "policy.onnx")
    model = mujoco.MjModel.from_xml_path(mjcf)
    one = Robot(model, policy, decimation=4)
    assert one.motors
    one.data.qpos[:] = model.qpos0
    one.act(np.full(model.nu, 100.0, np.float32))  # targets far off every joint: torques clip
    low, high = model.actuator_ctrlrange[one.actuators].T
    assert (one.data.ctrl[one.actuators] <= high + 1e-9).all()
    assert np.isclose(one.data.ctrl[one.actuators], high).all()
    report = sim2sim(walk_run, mjcf=mjcf, seconds=0.3, num_envs=5)
    assert np.isfinite(report["metrics"]["overall"]["yaw_rate_rms_radps"])


def test_a_model_missing_a_policy_joint_is_refused(walk_run, tmp_path):
    def rename(spec):
        spec.joint("left_knee_joint").name = "left_knee"
        spec.actuator("left_knee").target = "left_knee"

    with pytest.raises(ValueError, match=r"mjcf: the model has no joints \['left_knee_joint'\]"):
        sim2sim(walk_run, mjcf=g1_variant(tmp_path, rename), seconds=0.1, num_envs=1)


def test_an_onnx_file_without_the_deploy_document_is_refused(tmp_path):
    path = tmp_path / "plain.onnx"
    torch.onnx.export(torch.nn.Linear(3, 2), (torch.zeros(1, 3),), str(path), dynamo=False)
    with pytest.raises(ValueError, match=f"no deploy metadata \\(key '{METADATA_KEY}'\\)"):
        load_deployed(path)
    with pytest.raises(FileNotFoundError, match="policy: no ONNX file at"):
        load_deployed(tmp_path / "missing.onnx")


def test_a_tracking_dataset_is_tracked_clip_by_clip(tmp_path):
    clips = tmp_path / "clips"
    clips.mkdir()
    for name, seconds in (("squat", 0.5), ("stand", 0.3)):
        synth_clip(seconds, 50.0).save(clips / f"{name}.npz")
    run = tmp_path / "run"
    lead = ["commands.motion.params.lead_in_s=0.2", "commands.motion.params.lead_out_s=0.1"]
    trained(run, "task=g1_motion_tracking", f"commands.motion.params.file={clips}", *lead)
    policy = load_deployed(run / "policy.onnx")
    motion = policy.doc["commands"]["motion"]
    assert [c["name"] for c in motion["clips"]] == ["squat", "stand"]
    assert [(c["lead_in"], c["lead_out"]) for c in motion["clips"]] == [(10, 5), (10, 5)]
    assert motion["frames"] == (10 + 26 + 5) + (10 + 16 + 5)
    first = sim2sim(run)["metrics"]["from_first_frame"]
    assert set(first["clips"]) == {"squat", "stand"}
    stand = first["clips"]["stand"]
    assert stand["frames"] == 30  # its frames after the first
    # MPKPE over the clip's own frames: 16 of them, up to where it failed
    own = range(10, 10 + 16)
    assert stand["frames_measured"] == len([f for f in own if f < stand["frames_tracked"]])
    assert first["frames"] == 40 + 30


def test_a_robot_that_lags_the_clip_fails_by_the_tasks_anchor_position_rule():
    """sim2sim applies the task's motion_anchor_pos_error as the env does: the anchor's distance
    to the clip's in all three axes, whatever its height error."""
    config = OmegaConf.create(
        {
            "terminations": {
                "anchor_pos": {"term": "motion_anchor_pos_error"},  # on its defaults: 0.5 m
                "anchor_height": {
                    "term": "motion_anchor_height_error",
                    "params": {"threshold_m": 1.0},
                },
            }
        }
    )
    rules = _termination_params(config)
    assert rules["motion_anchor_pos_error"] == {"anchor_body": "torso_link", "threshold_m": 0.5}
    assert rules["motion_anchor_height_error"]["threshold_m"] == 1.0  # the task's, not 0.25
    bodies = ["pelvis", "torso_link"]
    upright = [1.0, 0.0, 0.0, 0.0]
    clip = {
        "motion_body_pos_w": np.array([[[0.0, 0.0, 0.8], [0.0, 0.0, 1.0]]]),  # one frame
        "motion_body_quat_w": np.tile(upright, (1, 2, 1)),
    }

    def behind(metres: float) -> dict[str, np.ndarray]:  # the anchor (torso) only
        robot = clip["motion_body_pos_w"] - [[[0.0, 0.0, 0.0], [metres, 0.0, 0.0]]]
        return clip | {"motion_frame": np.array([0]), "body_pos_w": robot,
                       "body_quat_w": clip["motion_body_quat_w"]}  # fmt: skip

    rules = _failure_rules(config, bodies)
    assert not any(rule(behind(0.4)) for rule in rules)
    assert any(rule(behind(0.6)) for rule in rules)
    config.terminations.anchor_pos.params = {"anchor_body": "head"}  # not a tracked body
    with pytest.raises(ValueError, match="terminations.anchor_pos.params.anchor_body: 'head'"):
        _failure_rules(config, bodies)


def test_sim2sim_leaves_out_a_failure_rule_it_cannot_measure_with_a_warning(caplog):
    """A termination that reads what the tracking loop does not measure (here the base's
    projected gravity) is not checked, and the warning names it; time-outs are no failure."""
    config = OmegaConf.create(
        {
            "terminations": {
                "fell": {"term": "bad_orientation"},
                "time_out": {"term": "time_out", "time_out": True},
            }
        }
    )
    assert _failure_rules(config, ["pelvis"]) == []
    assert "terminations.fell: bad_orientation reads projected_gravity_b" in caplog.text
    assert "time_out" not in caplog.text
