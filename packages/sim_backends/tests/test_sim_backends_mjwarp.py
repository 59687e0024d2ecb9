"""What only the MuJoCo Warp backend has: raw host arrays and devices. The contract itself:
test_sim_backends_contract.py.

Warp runs on its CPU device where there is no GPU: few worlds, and one backend for the module,
so the step kernels and graphs are compiled and recorded once.
"""

import mujoco
import numpy as np
import pytest
from sim_backends_models import WALKER_XML, body_buffers, random_states

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


def test_body_copy_equals_a_numpy_oracle_on_the_raw_host_arrays(backend, model):
    qpos0, qvel0 = random_states(model, N, np.random.default_rng(2))
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


def test_an_unknown_device_is_rejected_by_name():
    with pytest.raises(ValueError, match=r"device: unknown Warp device .tpu.; available: \[.cpu"):
        MjWarpBackend(WALKER_XML, N, device="tpu")
