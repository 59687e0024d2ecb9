"""Small MJCF models for the backend contract tests: cheap to step on every backend."""

from pathlib import Path

WALKER_XML = (Path(__file__).parent / "walker.xml").read_text()  # MJCF text, as backends take it


def random_states(model, num_envs, rng):
    """Random (qpos, qvel) for a floating-base model: unit root quaternion, joints in range."""
    import mujoco
    import numpy as np

    qpos = np.tile(model.qpos0, (num_envs, 1))
    qpos[:, 0:3] += rng.normal(0, 0.1, (num_envs, 3))
    quat = rng.normal(0, 1, (num_envs, 4))
    qpos[:, 3:7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    for j in range(model.njnt):
        if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE:
            low, high = model.jnt_range[j]
            qpos[:, model.jnt_qposadr[j]] = rng.uniform(low, high, num_envs)
    qvel = rng.normal(0, 1.0, (num_envs, model.nv))
    return qpos.astype(np.float32), qvel.astype(np.float32)


def mujoco_body_states(model, qpos, qvel):
    """Oracle: world-frame body states from plain MuJoCo (mj_forward per env), float64."""
    import mujoco
    import numpy as np

    data = mujoco.MjData(model)
    n = len(qpos)
    pos, quat = np.zeros((n, model.nbody, 3)), np.zeros((n, model.nbody, 4))
    lin, ang = np.zeros((n, model.nbody, 3)), np.zeros((n, model.nbody, 3))
    velocity = np.zeros(6)
    for i in range(n):
        data.qpos[:], data.qvel[:] = qpos[i], qvel[i]
        mujoco.mj_forward(model, data)
        pos[i], quat[i] = data.xpos, data.xquat
        for b in range(model.nbody):
            mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_XBODY, b, velocity, 0)
            ang[i, b], lin[i, b] = velocity[:3], velocity[3:]
    return pos, quat, lin, ang


def body_buffers(num_envs, num_bodies):
    """Zeroed (pos, quat, lin_vel, ang_vel) buffers for copy_body_state_w."""
    import numpy as np

    return tuple(np.zeros((num_envs, num_bodies, k), np.float32) for k in (3, 4, 3, 3))


def state_buffers(model, num_envs):
    """Zeroed (qpos, qvel) buffers for copy_qpos_qvel."""
    import numpy as np

    return np.zeros((num_envs, model.nq), np.float32), np.zeros((num_envs, model.nv), np.float32)


def assert_body_states_close(got, want, atol):
    """Body states equal within ``atol``; quaternions compared with w >= 0 (q and -q are one
    rotation)."""
    import numpy as np

    for name, g, w in zip(("pos", "quat", "lin_vel", "ang_vel"), got, want, strict=True):
        if name == "quat":
            g, w = (np.where(q[..., :1] < 0, -q, q) for q in (g, w))
        np.testing.assert_allclose(g, w, rtol=0, atol=atol, err_msg=f"body {name}")
