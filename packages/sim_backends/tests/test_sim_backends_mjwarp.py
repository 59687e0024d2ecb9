"""The MuJoCo Warp backend against plain MuJoCo, and against its own raw host arrays.

Warp runs on its CPU device where there is no GPU: few worlds, and one backend for the module,
so the step kernels and graphs are compiled and recorded once.
"""

import mujoco
import numpy as np
import pytest
from sim_backends_models import WALKER_XML, mujoco_body_states, random_states

pytest.importorskip("mujoco_warp")

from fuselab_sim_backends.mjwarp import MjWarpBackend  # noqa: E402

N = 4
SUBSTEPS = 4


@pytest.fixture(scope="module")
def model():
    return mujoco.MjModel.from_xml_string(WALKER_XML)


@pytest.fixture(scope="module")
def backend():
    return MjWarpBackend(WALKER_XML, N)


def body_buffers(num_envs, num_bodies):
    return (
        np.zeros((num_envs, num_bodies, 3), np.float32),
        np.zeros((num_envs, num_bodies, 4), np.float32),
        np.zeros((num_envs, num_bodies, 3), np.float32),
        np.zeros((num_envs, num_bodies, 3), np.float32),
    )


def state_buffers(model, num_envs=N):
    return np.zeros((num_envs, model.nq), np.float32), np.zeros((num_envs, model.nv), np.float32)


def float32_states(model, seed):
    qpos, qvel = random_states(model, N, np.random.default_rng(seed))
    return qpos.astype(np.float32), qvel.astype(np.float32)


def standing_states(model):
    return np.tile(model.qpos0, (N, 1)).astype(np.float32), np.zeros((N, model.nv), np.float32)


def positive_w(quat):
    """q and -q are one rotation: compare quaternions with w >= 0."""
    return np.where(quat[..., :1] < 0, -quat, quat)


def assert_body_states_close(got, want, atol):
    for name, g, w in zip(("pos", "quat", "lin_vel", "ang_vel"), got, want, strict=True):
        if name == "quat":
            g, w = positive_w(g), positive_w(w)
        np.testing.assert_allclose(g, w, rtol=0, atol=atol, err_msg=f"body {name}")


def test_model_facts_from_a_file_path_match_mujoco(tmp_path, model):
    path = tmp_path / "walker.xml"
    path.write_text(WALKER_XML)
    facts = MjWarpBackend(path, 2).model
    hinges = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
    assert facts.body_names == tuple(model.body(b).name for b in range(model.nbody))
    assert facts.body_names[0] == "world"
    assert facts.joint_names == tuple(model.joint(j).name for j in hinges)
    assert facts.actuator_names == tuple(model.actuator(a).name for a in range(model.nu))
    np.testing.assert_allclose(facts.joint_ranges, model.jnt_range[hinges], rtol=1e-6)
    np.testing.assert_array_equal(facts.joint_qpos_adr, model.jnt_qposadr[hinges])
    np.testing.assert_array_equal(facts.joint_qvel_adr, model.jnt_dofadr[hinges])
    assert (facts.nq, facts.nv, facts.nu) == (model.nq, model.nv, model.nu) == (13, 12, 6)
    assert facts.physics_dt == pytest.approx(model.opt.timestep)


def test_body_states_after_reset_match_mujoco(backend, model):
    qpos, qvel = float32_states(model, seed=0)
    backend.reset_envs(np.arange(N), qpos, qvel)
    ids = np.arange(1, model.nbody, dtype=np.int32)
    out = body_buffers(N, len(ids))
    backend.copy_body_state_w(ids, *out)
    expected = [array[:, 1:] for array in mujoco_body_states(model, qpos, qvel)]
    assert_body_states_close(out, expected, atol=1e-5)
    got_qpos, got_qvel = state_buffers(model)
    backend.copy_qpos_qvel(got_qpos, got_qvel)
    np.testing.assert_array_equal(got_qpos, qpos)
    np.testing.assert_array_equal(got_qvel, qvel)


def test_stepping_matches_a_plain_mujoco_loop(backend, model):
    qpos0, qvel0 = standing_states(model)
    backend.reset_envs(np.arange(N), qpos0, qvel0)
    backend.set_controls(np.zeros((N, model.nu), np.float32))
    data = mujoco.MjData(model)  # qpos0, zero velocity and controls: the torso starts at 0.75 m
    qpos, qvel = state_buffers(model)
    worst_height = worst_qpos = 0.0
    for _ in range(50):
        backend.step(SUBSTEPS)
        for _ in range(SUBSTEPS):
            mujoco.mj_step(model, data)
        backend.copy_qpos_qvel(qpos, qvel)
        worst_height = max(worst_height, float(np.abs(qpos[:, 2] - data.qpos[2]).max()))
        worst_qpos = max(worst_qpos, float(np.abs(qpos - data.qpos).max()))
    assert data.qpos[2] < 0.72, "the walker should have dropped onto its feet"
    assert worst_height < 5e-3, (
        f"root height off by {worst_height:.2e} m; max |qpos| deviation {worst_qpos:.2e}"
    )


def test_body_states_after_steps_describe_the_current_qpos(backend, model):
    # MuJoCo leaves xpos & co. one substep behind qpos after a step; the backend must not.
    qpos0, qvel0 = float32_states(model, seed=1)
    backend.reset_envs(np.arange(N), qpos0, qvel0)
    backend.set_controls(np.full((N, model.nu), 0.2, np.float32))
    for _ in range(3):
        backend.step(SUBSTEPS)
    qpos, qvel = state_buffers(model)
    backend.copy_qpos_qvel(qpos, qvel)
    ids = np.arange(model.nbody, dtype=np.int32)
    out = body_buffers(N, model.nbody)
    backend.copy_body_state_w(ids, *out)
    assert_body_states_close(out, mujoco_body_states(model, qpos, qvel), atol=1e-5)


def test_body_copy_equals_a_numpy_oracle_on_the_raw_host_arrays(backend, model):
    qpos0, qvel0 = float32_states(model, seed=2)
    backend.reset_envs(np.arange(N), qpos0, qvel0)
    backend.set_controls(np.full((N, model.nu), -0.1, np.float32))
    backend.step(SUBSTEPS)
    ids = np.array([4, 0, 1, 7, 4], dtype=np.int32)  # any order, repeats, the world body
    out = body_buffers(N, len(ids))
    backend.copy_body_state_w(ids, *out)

    xpos, xquat, cvel, subtree_com = (a.copy() for a in backend.host_body_arrays())
    assert xpos.dtype == xquat.dtype == cvel.dtype == subtree_com.dtype == np.float32
    assert cvel.shape == (N, model.nbody, 6)
    root_com = subtree_com[:, model.body_rootid[ids]]
    ang, lin_ref = cvel[:, ids, 0:3], cvel[:, ids, 3:6]
    lin_origin = lin_ref + np.cross(ang, xpos[:, ids] - root_com)
    expected = (xpos[:, ids], xquat[:, ids], lin_origin, ang)
    for name, got, want in zip(("pos", "quat", "lin_vel", "ang_vel"), out, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=f"body {name}")
    assert np.abs(out[2][:, 2:4]).max() > 1e-2, "velocities should be non-trivial"


def test_nan_control_rows_leave_other_envs_untouched_and_reset_recovers_them(backend, model):
    qpos0, qvel0 = float32_states(model, seed=3)
    controls = np.random.default_rng(4).uniform(-0.5, 0.5, (N, model.nu)).astype(np.float32)
    bad = np.array([1, 3])
    good = np.array([0, 2])
    everyone = np.arange(N)

    def run(ctrl):
        backend.reset_envs(everyone, qpos0, qvel0)
        backend.set_controls(ctrl)
        for _ in range(10):
            backend.step(SUBSTEPS)
        qpos, qvel = state_buffers(model)
        backend.copy_qpos_qvel(qpos, qvel)
        bodies = body_buffers(N, model.nbody)
        backend.copy_body_state_w(np.arange(model.nbody, dtype=np.int32), *bodies)
        return (qpos, qvel, *bodies)

    clean = run(controls)
    poisoned_controls = controls.copy()
    poisoned_controls[bad] = np.nan
    poisoned = run(poisoned_controls)
    for want, got in zip(clean, poisoned, strict=True):
        np.testing.assert_array_equal(got[good], want[good])

    backend.reset_envs(bad, qpos0[bad], qvel0[bad])
    qpos, qvel = state_buffers(model)
    backend.copy_qpos_qvel(qpos, qvel)
    np.testing.assert_array_equal(qpos[bad], qpos0[bad])
    np.testing.assert_array_equal(qvel[bad], qvel0[bad])
    np.testing.assert_array_equal(qpos[good], poisoned[0][good])  # untouched by the reset
    bodies = body_buffers(N, model.nbody)
    backend.copy_body_state_w(np.arange(model.nbody, dtype=np.int32), *bodies)
    assert all(np.isfinite(array).all() for array in bodies)

    backend.set_controls(controls)
    backend.step(SUBSTEPS)
    backend.copy_qpos_qvel(qpos, qvel)
    assert np.isfinite(qpos).all() and np.isfinite(qvel).all()


def test_bad_body_ids_and_buffers_are_rejected_by_name(backend, model):
    nb = model.nbody
    ids = np.array([1, 2], dtype=np.int32)
    for bad_ids in (np.array([nb], np.int32), np.array([-1], np.int32)):
        with pytest.raises(ValueError, match=r"body_ids: expected ids in 0\.\.7"):
            backend.copy_body_state_w(bad_ids, *body_buffers(N, 1))
    with pytest.raises(TypeError, match="body_ids"):
        backend.copy_body_state_w(ids.astype(np.int64), *body_buffers(N, 2))
    pos, quat, lin, ang = body_buffers(N, 2)
    with pytest.raises(ValueError, match=r"out_quat: expected shape \(4, 2, 4\)"):
        backend.copy_body_state_w(ids, pos, quat[:, :, :3].copy(), lin, ang)
    with pytest.raises(ValueError, match="out_pos: .* dtype float32"):
        backend.copy_body_state_w(ids, pos.astype(np.float64), quat, lin, ang)
    with pytest.raises(ValueError, match="out_lin_vel"):
        backend.copy_body_state_w(ids, pos, quat, np.zeros((N + 1, 2, 3), np.float32), ang)
    qpos, qvel = state_buffers(model)
    with pytest.raises(ValueError, match="out_qvel"):
        backend.copy_qpos_qvel(qpos, qvel[:, :-1].copy())


def test_bad_controls_and_substeps_are_rejected_by_name(backend, model):
    with pytest.raises(ValueError, match=r"controls: expected shape \(4, 6\)"):
        backend.set_controls(np.zeros((N, model.nu + 1), np.float32))
    with pytest.raises(ValueError, match="controls: .* dtype float32"):
        backend.set_controls(np.zeros((N, model.nu), np.float64))
    with pytest.raises(ValueError, match="controls: expected a C-contiguous"):
        backend.set_controls(np.zeros((N, model.nu), np.float32, order="F"))
    with pytest.raises(TypeError, match="controls"):
        backend.set_controls([[0.0] * model.nu] * N)
    for substeps in (0, -1, 2.0, True, "4"):
        with pytest.raises(ValueError, match="substeps: expected a positive int"):
            backend.step(substeps)


def test_bad_resets_are_rejected_and_change_nothing(backend, model):
    qpos0, qvel0 = standing_states(model)
    backend.reset_envs(np.arange(N), qpos0, qvel0)
    one_qpos, one_qvel = qpos0[:1], qvel0[:1]
    with pytest.raises(ValueError, match=r"env_ids: expected ids in 0\.\.3"):
        backend.reset_envs(np.array([N]), one_qpos, one_qvel)
    with pytest.raises(ValueError, match="env_ids: expected distinct ids"):
        backend.reset_envs(np.array([1, 1]), qpos0[:2], qvel0[:2])
    with pytest.raises(TypeError, match="env_ids"):
        backend.reset_envs(np.array([0.0]), one_qpos, one_qvel)
    with pytest.raises(ValueError, match=r"qpos: expected shape \(1, 13\)"):
        backend.reset_envs(np.array([0]), qpos0[:2], one_qvel)
    with pytest.raises(ValueError, match="qvel: .* dtype float32"):
        backend.reset_envs(np.array([0]), one_qpos, one_qvel.astype(np.float64))
    not_finite = one_qpos.copy()
    not_finite[0, 8] = np.inf
    with pytest.raises(ValueError, match="qpos: expected finite values"):
        backend.reset_envs(np.array([2]), not_finite, one_qvel)
    qpos, qvel = state_buffers(model)
    backend.copy_qpos_qvel(qpos, qvel)
    np.testing.assert_array_equal(qpos, qpos0)
    np.testing.assert_array_equal(qvel, qvel0)


def test_bad_construction_arguments_are_rejected_by_name(tmp_path):
    missing = tmp_path / "no_such_walker.xml"
    with pytest.raises(FileNotFoundError, match="no_such_walker.xml"):
        MjWarpBackend(missing, N)
    with pytest.raises(FileNotFoundError, match="no_such_walker.xml"):
        MjWarpBackend(str(missing), N)
    with pytest.raises(ValueError, match="mjcf: MuJoCo could not parse the MJCF string"):
        MjWarpBackend("<mujoco><worldbody><body></mujoco>", N)
    for num_envs in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="num_envs: expected a positive int"):
            MjWarpBackend(WALKER_XML, num_envs)
    with pytest.raises(ValueError, match="device: "):
        MjWarpBackend(WALKER_XML, N, device="tpu")
