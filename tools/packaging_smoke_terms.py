"""The terms of check_packaging's env_core smoke plan: a speed reward, a too-fast termination and
a joint-velocity observation, each with its NumPy oracle."""

import numpy as np

from fuselab_env_core.terms import observation, reward, termination


@reward(name="smoke_speed_l2")
def speed_l2(i, joint_vel):
    total = 0.0
    for j in range(joint_vel.shape[1]):
        total += joint_vel[i, j] * joint_vel[i, j]
    return total


speed_l2.numpy(lambda joint_vel: np.sum(joint_vel**2, axis=-1))


@termination(name="smoke_too_fast")
def too_fast(i, joint_vel, limit: float = 2.0):
    return abs(joint_vel[i, 0]) > limit


too_fast.numpy(lambda joint_vel, limit: np.abs(joint_vel[:, 0]) > limit)


@observation(size=lambda shapes, params: shapes["joint_vel"][0], name="smoke_joint_vel")
def joint_vel_obs(i, out, col, joint_vel):
    for j in range(joint_vel.shape[1]):
        out[i, col + j] = joint_vel[i, j]


joint_vel_obs.numpy(lambda joint_vel: joint_vel)
