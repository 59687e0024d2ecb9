"""Every Numba kernel a G1 step runs is cached on disk: a fresh process compiles none again.

A kernel Numba cannot cache (one reading a dynamic global such as ``numba.get_num_threads()``)
only warns, and then compiles in every process: seconds of start-up for each env and each test.
"""

import subprocess
import sys

STEP_EVERY_G1_TASK = """
import warnings
warnings.filterwarnings("error", message="Cannot cache compiled function")
import numpy as np
import fuselab_envs
for task in ("g1_walk_flat", "g1_motion_tracking"):
    env = fuselab_envs.make(task, num_envs=4, backend="mujoco", num_threads=1)
    for _ in range(3):
        env.step(np.zeros((4, env.action_dim), np.float32))
    env.robot.update(np.array([1, 2]))
"""


def test_a_g1_step_runs_only_kernels_numba_can_cache():
    done = subprocess.run(
        [sys.executable, "-c", STEP_EVERY_G1_TASK], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
