"""A synthetic task shaped like G1 motion tracking, for env_core's tests and tools/bench.py's
core suite (a test helper: it registers ``synthetic_*`` term names on import).

14 tracked bodies, 29 joints, a yaw-aligned anchor preamble, 8 rewards, 3 terminations, a
noisy actor group and a clean critic group. The terms follow BeyondMimic's definitions so
the kernel does the work a real tracking task does; the state is random, not simulated.
Every term has a NumPy twin, so the NumPy runtime can run the same plan as an oracle.
Importing this module registers its terms.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from fuselab_env_core.plan import BufferSpec
from fuselab_env_core.rotations import (
    atan2_nonnegative,
    matrix_first_two_columns,
    np_matrix_first_two_columns,
    np_quat_apply,
    np_quat_apply_inverse,
    np_quat_conjugate,
    np_quat_error_angle,
    np_quat_mul,
    np_yaw_quat,
    quat_apply,
    quat_apply_inverse,
    quat_error_angle,
    quat_mul,
    yaw_quat,
)
from fuselab_env_core.terms import observation, preamble, reward, termination

NUM_BODIES = 14
NUM_JOINTS = 29
ANCHOR_BODY = 7  # torso_link among the tracked bodies


def _bodies_by(name: str):
    return lambda shapes, params: (shapes[name][0], 3)


def _per_body(name: str):
    return lambda shapes, params: (shapes[name][0],)


# -- preamble -----------------------------------------------------------------------------------


@preamble(
    outputs={
        "target_body_pos_w": _bodies_by("ref_body_pos_w"),
        "target_body_quat_w": lambda shapes, params: (shapes["ref_body_quat_w"][0], 4),
        "anchor_pos_b": (3,),
        "anchor_ori_b": (6,),
        "body_ori_error_sin_half": _per_body("ref_body_quat_w"),
        "body_ori_error_cos_half": _per_body("ref_body_quat_w"),
    },
    name="synthetic_anchor_frame",
)
def anchor_frame(
    i,
    body_pos_w,
    body_quat_w,
    ref_body_pos_w,
    ref_body_quat_w,
    target_body_pos_w,
    target_body_quat_w,
    anchor_pos_b,
    anchor_ori_b,
    body_ori_error_sin_half,
    body_ori_error_cos_half,
    anchor_body: int = ANCHOR_BODY,
):
    """Reference bodies moved under the robot: robot anchor xy and yaw, motion anchor height.

    Also the orientation error of each body to its target, as |xyz| and |w| of the error
    quaternion (sine and cosine of half the error angle): rewards turn them into angles in a
    loop of contiguous loads, which vectorizes where the quaternion loop does not.
    """
    a = anchor_body
    pw, px, py, pz = (
        body_quat_w[i, a, 0],
        body_quat_w[i, a, 1],
        body_quat_w[i, a, 2],
        body_quat_w[i, a, 3],
    )
    rw, rx, ry, rz = (
        ref_body_quat_w[i, a, 0],
        ref_body_quat_w[i, a, 1],
        ref_body_quat_w[i, a, 2],
        ref_body_quat_w[i, a, 3],
    )
    yw, yx, yy, yz = yaw_quat(pw, px, py, pz)
    mw, mx, my, mz = yaw_quat(rw, rx, ry, rz)
    dw, dx, dy, dz = quat_mul(yw, yx, yy, yz, mw, -mx, -my, -mz)
    ax, ay, az = body_pos_w[i, a, 0], body_pos_w[i, a, 1], ref_body_pos_w[i, a, 2]
    # Reference anchor read once: the workspace stores below may alias it as far as LLVM knows.
    rax, ray, raz = ref_body_pos_w[i, a, 0], ref_body_pos_w[i, a, 1], ref_body_pos_w[i, a, 2]
    for b in range(ref_body_pos_w.shape[1]):
        ox, oy, oz = quat_apply(
            dw,
            dx,
            dy,
            dz,
            ref_body_pos_w[i, b, 0] - rax,
            ref_body_pos_w[i, b, 1] - ray,
            ref_body_pos_w[i, b, 2] - raz,
        )
        target_body_pos_w[i, b, 0] = ax + ox
        target_body_pos_w[i, b, 1] = ay + oy
        target_body_pos_w[i, b, 2] = az + oz
        qw, qx, qy, qz = quat_mul(
            dw,
            dx,
            dy,
            dz,
            ref_body_quat_w[i, b, 0],
            ref_body_quat_w[i, b, 1],
            ref_body_quat_w[i, b, 2],
            ref_body_quat_w[i, b, 3],
        )
        target_body_quat_w[i, b, 0] = qw
        target_body_quat_w[i, b, 1] = qx
        target_body_quat_w[i, b, 2] = qy
        target_body_quat_w[i, b, 3] = qz
        ew, ex, ey, ez = quat_mul(
            body_quat_w[i, b, 0],
            -body_quat_w[i, b, 1],
            -body_quat_w[i, b, 2],
            -body_quat_w[i, b, 3],
            qw,
            qx,
            qy,
            qz,
        )
        body_ori_error_sin_half[i, b] = math.sqrt(ex * ex + ey * ey + ez * ez)
        body_ori_error_cos_half[i, b] = abs(ew)
    ex, ey, ez = quat_apply_inverse(
        pw,
        px,
        py,
        pz,
        ref_body_pos_w[i, a, 0] - body_pos_w[i, a, 0],
        ref_body_pos_w[i, a, 1] - body_pos_w[i, a, 1],
        ref_body_pos_w[i, a, 2] - body_pos_w[i, a, 2],
    )
    anchor_pos_b[i, 0] = ex
    anchor_pos_b[i, 1] = ey
    anchor_pos_b[i, 2] = ez
    ow, ox2, oy2, oz2 = quat_mul(pw, -px, -py, -pz, rw, rx, ry, rz)
    m = matrix_first_two_columns(ow, ox2, oy2, oz2)
    for k in range(6):
        anchor_ori_b[i, k] = m[k]


@anchor_frame.numpy
def _(
    body_pos_w,
    body_quat_w,
    ref_body_pos_w,
    ref_body_quat_w,
    target_body_pos_w,
    target_body_quat_w,
    anchor_pos_b,
    anchor_ori_b,
    body_ori_error_sin_half,
    body_ori_error_cos_half,
    anchor_body,
):
    a = anchor_body
    robot_q, ref_q = body_quat_w[:, a], ref_body_quat_w[:, a]
    delta = np_quat_mul(np_yaw_quat(robot_q), np_quat_conjugate(np_yaw_quat(ref_q)))
    anchor = np.concatenate([body_pos_w[:, a, :2], ref_body_pos_w[:, a, 2:]], axis=-1)
    offsets = ref_body_pos_w - ref_body_pos_w[:, a : a + 1]
    target_body_pos_w[:] = anchor[:, None] + np_quat_apply(delta[:, None], offsets)
    target_body_quat_w[:] = np_quat_mul(delta[:, None], ref_body_quat_w)
    error = np_quat_mul(np_quat_conjugate(body_quat_w), target_body_quat_w)
    body_ori_error_sin_half[:] = np.linalg.norm(error[..., 1:], axis=-1)
    body_ori_error_cos_half[:] = np.abs(error[..., 0])
    anchor_pos_b[:] = np_quat_apply_inverse(robot_q, ref_body_pos_w[:, a] - body_pos_w[:, a])
    relative = np_quat_mul(np_quat_conjugate(robot_q), ref_q)
    anchor_ori_b[:] = np_matrix_first_two_columns(relative)


# -- rewards ------------------------------------------------------------------------------------


@reward(name="synthetic_anchor_pos_error_exp")
def anchor_pos_error_exp(
    i, body_pos_w, ref_body_pos_w, anchor_body: int = ANCHOR_BODY, std: float = 0.3
):
    error = 0.0
    for k in range(3):
        d = ref_body_pos_w[i, anchor_body, k] - body_pos_w[i, anchor_body, k]
        error += d * d
    return math.exp(-error / (std * std))


@anchor_pos_error_exp.numpy
def _(body_pos_w, ref_body_pos_w, anchor_body, std):
    error = np.sum(np.square(ref_body_pos_w[:, anchor_body] - body_pos_w[:, anchor_body]), axis=-1)
    return np.exp(-error / (std * std))


@reward(name="synthetic_anchor_ori_error_exp")
def anchor_ori_error_exp(
    i, body_quat_w, ref_body_quat_w, anchor_body: int = ANCHOR_BODY, std: float = 0.4
):
    a = anchor_body
    angle = quat_error_angle(
        body_quat_w[i, a, 0],
        body_quat_w[i, a, 1],
        body_quat_w[i, a, 2],
        body_quat_w[i, a, 3],
        ref_body_quat_w[i, a, 0],
        ref_body_quat_w[i, a, 1],
        ref_body_quat_w[i, a, 2],
        ref_body_quat_w[i, a, 3],
    )
    return math.exp(-angle * angle / (std * std))


@anchor_ori_error_exp.numpy
def _(body_quat_w, ref_body_quat_w, anchor_body, std):
    angle = np_quat_error_angle(body_quat_w[:, anchor_body], ref_body_quat_w[:, anchor_body])
    return np.exp(-np.square(angle) / (std * std))


@numba.njit
def _mean_squared_error_exp(i, actual, reference, std):
    """exp(-mean over bodies of |reference - actual|^2 / std^2) for (N, B, 3) arrays."""
    error = 0.0
    for b in range(actual.shape[1]):
        for k in range(3):
            d = reference[i, b, k] - actual[i, b, k]
            error += d * d
    return math.exp(-error / actual.shape[1] / (std * std))


def _np_mean_squared_error_exp(actual, reference, std):
    error = np.mean(np.sum(np.square(reference - actual), axis=-1), axis=-1)
    return np.exp(-error / (std * std))


@reward(name="synthetic_body_pos_error_exp")
def body_pos_error_exp(i, body_pos_w, target_body_pos_w, std: float = 0.3):
    return _mean_squared_error_exp(i, body_pos_w, target_body_pos_w, std)


body_pos_error_exp.numpy(_np_mean_squared_error_exp)


@reward(name="synthetic_body_ori_error_exp")
def body_ori_error_exp(i, body_ori_error_sin_half, body_ori_error_cos_half, std: float = 0.4):
    error = 0.0
    for b in range(body_ori_error_sin_half.shape[1]):
        angle = 2.0 * atan2_nonnegative(
            body_ori_error_sin_half[i, b], body_ori_error_cos_half[i, b]
        )
        error += angle * angle
    return math.exp(-error / body_ori_error_sin_half.shape[1] / (std * std))


@body_ori_error_exp.numpy
def _(body_ori_error_sin_half, body_ori_error_cos_half, std):
    angles = 2.0 * np.arctan2(body_ori_error_sin_half, body_ori_error_cos_half)
    return np.exp(-np.mean(np.square(angles), axis=-1) / (std * std))


@reward(name="synthetic_body_lin_vel_error_exp")
def body_lin_vel_error_exp(i, body_lin_vel_w, ref_body_lin_vel_w, std: float = 1.0):
    return _mean_squared_error_exp(i, body_lin_vel_w, ref_body_lin_vel_w, std)


body_lin_vel_error_exp.numpy(_np_mean_squared_error_exp)


@reward(name="synthetic_body_ang_vel_error_exp")
def body_ang_vel_error_exp(i, body_ang_vel_w, ref_body_ang_vel_w, std: float = 3.14):
    return _mean_squared_error_exp(i, body_ang_vel_w, ref_body_ang_vel_w, std)


body_ang_vel_error_exp.numpy(_np_mean_squared_error_exp)


@reward(name="synthetic_action_rate_l2")
def action_rate_l2(i, actions, last_actions):
    total = 0.0
    for j in range(actions.shape[1]):
        d = actions[i, j] - last_actions[i, j]
        total += d * d
    return total


@action_rate_l2.numpy
def _(actions, last_actions):
    return np.sum(np.square(actions - last_actions), axis=-1)


@reward(name="synthetic_joint_pos_limits")
def joint_pos_limits(i, joint_pos, lower: np.ndarray, upper: np.ndarray):
    """Sum over joints of how far each is outside [lower, upper] (radians)."""
    total = 0.0
    for j in range(joint_pos.shape[1]):
        q = joint_pos[i, j]
        total += max(lower[j] - q, 0.0) + max(q - upper[j], 0.0)
    return total


@joint_pos_limits.numpy
def _(joint_pos, lower, upper):
    below = np.maximum(lower - joint_pos, 0.0)
    above = np.maximum(joint_pos - upper, 0.0)
    return np.sum(below + above, axis=-1)


# -- terminations -------------------------------------------------------------------------------


@termination(name="synthetic_anchor_height_error")
def anchor_height_error(
    i, body_pos_w, ref_body_pos_w, anchor_body: int = ANCHOR_BODY, threshold_m: float = 0.25
):
    return abs(ref_body_pos_w[i, anchor_body, 2] - body_pos_w[i, anchor_body, 2]) > threshold_m


@anchor_height_error.numpy
def _(body_pos_w, ref_body_pos_w, anchor_body, threshold_m):
    return np.abs(ref_body_pos_w[:, anchor_body, 2] - body_pos_w[:, anchor_body, 2]) > threshold_m


@termination(name="synthetic_body_height_error")
def body_height_error(
    i, body_pos_w, target_body_pos_w, body_ids: np.ndarray, threshold_m: float = 0.25
):
    for k in range(body_ids.shape[0]):
        b = body_ids[k]
        if abs(target_body_pos_w[i, b, 2] - body_pos_w[i, b, 2]) > threshold_m:
            return True
    return False


@body_height_error.numpy
def _(body_pos_w, target_body_pos_w, body_ids, threshold_m):
    error = np.abs(target_body_pos_w[:, body_ids, 2] - body_pos_w[:, body_ids, 2])
    return np.any(error > threshold_m, axis=-1)


@termination(name="synthetic_time_out")
def time_out(i, episode_step, max_steps: int = 500):
    return episode_step[i] >= max_steps


@time_out.numpy
def _(episode_step, max_steps):
    return episode_step >= max_steps


# -- observations -------------------------------------------------------------------------------


@observation(
    size=lambda shapes, params: 2 * shapes["ref_joint_pos"][0], name="synthetic_motion_command"
)
def motion_command(i, out, col, ref_joint_pos, ref_joint_vel):
    n = ref_joint_pos.shape[1]
    for j in range(n):
        out[i, col + j] = ref_joint_pos[i, j]
        out[i, col + n + j] = ref_joint_vel[i, j]


@motion_command.numpy
def _(ref_joint_pos, ref_joint_vel):
    return np.concatenate([ref_joint_pos, ref_joint_vel], axis=-1)


@observation(size=3, name="synthetic_anchor_pos_b")
def anchor_pos_b_obs(i, out, col, anchor_pos_b):
    for k in range(3):
        out[i, col + k] = anchor_pos_b[i, k]


anchor_pos_b_obs.numpy(lambda anchor_pos_b: anchor_pos_b)


@observation(size=6, name="synthetic_anchor_ori_b")
def anchor_ori_b_obs(i, out, col, anchor_ori_b):
    for k in range(6):
        out[i, col + k] = anchor_ori_b[i, k]


anchor_ori_b_obs.numpy(lambda anchor_ori_b: anchor_ori_b)


@observation(size=3, name="synthetic_base_ang_vel")
def base_ang_vel(i, out, col, body_quat_w, body_ang_vel_w, body: int = 0):
    x, y, z = quat_apply_inverse(
        body_quat_w[i, body, 0],
        body_quat_w[i, body, 1],
        body_quat_w[i, body, 2],
        body_quat_w[i, body, 3],
        body_ang_vel_w[i, body, 0],
        body_ang_vel_w[i, body, 1],
        body_ang_vel_w[i, body, 2],
    )
    out[i, col] = x
    out[i, col + 1] = y
    out[i, col + 2] = z


@base_ang_vel.numpy
def _(body_quat_w, body_ang_vel_w, body):
    return np_quat_apply_inverse(body_quat_w[:, body], body_ang_vel_w[:, body])


@observation(size=lambda shapes, params: shapes["joint_pos"][0], name="synthetic_joint_pos_rel")
def joint_pos_rel(i, out, col, joint_pos, default: np.ndarray):
    for j in range(joint_pos.shape[1]):
        out[i, col + j] = joint_pos[i, j] - default[j]


joint_pos_rel.numpy(lambda joint_pos, default: joint_pos - default)


@observation(size=lambda shapes, params: shapes["joint_vel"][0], name="synthetic_joint_vel")
def joint_vel(i, out, col, joint_vel):
    for j in range(joint_vel.shape[1]):
        out[i, col + j] = joint_vel[i, j]


joint_vel.numpy(lambda joint_vel: joint_vel)


@observation(size=lambda shapes, params: shapes["actions"][0], name="synthetic_last_action")
def last_action(i, out, col, actions):
    for j in range(actions.shape[1]):
        out[i, col + j] = actions[i, j]


last_action.numpy(lambda actions: actions)


@observation(size=lambda shapes, params: 3 * shapes["body_pos_w"][0], name="synthetic_body_pos_b")
def body_pos_b(i, out, col, body_pos_w, body_quat_w, anchor_body: int = ANCHOR_BODY):
    a = anchor_body
    # Anchor values read once: the stores to `out` may alias them as far as LLVM knows.
    qw, qx, qy, qz = (
        body_quat_w[i, a, 0],
        body_quat_w[i, a, 1],
        body_quat_w[i, a, 2],
        body_quat_w[i, a, 3],
    )
    px, py, pz = body_pos_w[i, a, 0], body_pos_w[i, a, 1], body_pos_w[i, a, 2]
    for b in range(body_pos_w.shape[1]):
        x, y, z = quat_apply_inverse(
            qw,
            qx,
            qy,
            qz,
            body_pos_w[i, b, 0] - px,
            body_pos_w[i, b, 1] - py,
            body_pos_w[i, b, 2] - pz,
        )
        out[i, col + 3 * b] = x
        out[i, col + 3 * b + 1] = y
        out[i, col + 3 * b + 2] = z


@body_pos_b.numpy
def _(body_pos_w, body_quat_w, anchor_body):
    a = anchor_body
    offsets = body_pos_w - body_pos_w[:, a : a + 1]
    local = np_quat_apply_inverse(body_quat_w[:, a : a + 1], offsets)
    return local.reshape(len(body_pos_w), -1)


# -- the task -----------------------------------------------------------------------------------


def state_specs(
    num_bodies: int = NUM_BODIES, num_joints: int = NUM_JOINTS
) -> dict[str, BufferSpec]:
    bodies = {
        f"{prefix}{name}": BufferSpec.of((num_bodies, width))
        for prefix in ("", "ref_")
        for name, width in (
            ("body_pos_w", 3),
            ("body_quat_w", 4),
            ("body_lin_vel_w", 3),
            ("body_ang_vel_w", 3),
        )
    }
    joints = {
        name: BufferSpec.of(num_joints)
        for name in (
            "joint_pos",
            "joint_vel",
            "ref_joint_pos",
            "ref_joint_vel",
            "actions",
            "last_actions",
        )
    }
    return {**bodies, **joints, "episode_step": BufferSpec.of((), np.int32)}


def random_state(num_envs: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random robot and reference states near each other, like a tracking policy sees."""
    state = {}
    for name, spec in state_specs().items():
        shape = (num_envs, *spec.shape)
        if name.endswith("quat_w"):
            q = rng.standard_normal(shape).astype(np.float32)
            state[name] = q / np.linalg.norm(q, axis=-1, keepdims=True)
        elif name == "episode_step":
            state[name] = rng.integers(0, 600, shape, dtype=np.int32)
        else:
            state[name] = rng.normal(0.0, 0.5, shape).astype(np.float32)
    state["ref_body_pos_w"] = state["body_pos_w"] + rng.normal(
        0, 0.15, state["body_pos_w"].shape
    ).astype(np.float32)
    return state


EXP_REWARDS = {
    "anchor_pos": "synthetic_anchor_pos_error_exp",
    "anchor_ori": "synthetic_anchor_ori_error_exp",
    "body_pos": "synthetic_body_pos_error_exp",
    "body_ori": "synthetic_body_ori_error_exp",
    "body_lin_vel": "synthetic_body_lin_vel_error_exp",
    "body_ang_vel": "synthetic_body_ang_vel_error_exp",
}
# Every float of the task (weights, stds, thresholds) with its default, BeyondMimic's values.
DEFAULT_FLOATS = {
    **{f"w_{name}": 0.5 if name.startswith("anchor") else 1.0 for name in EXP_REWARDS},
    "std_anchor_pos": 0.3,
    "std_anchor_ori": 0.4,
    "std_body_pos": 0.3,
    "std_body_ori": 0.4,
    "std_body_lin_vel": 1.0,
    "std_body_ang_vel": 3.14,
    "w_action_rate": -0.1,
    "w_joint_limit": -10.0,
    "anchor_height_m": 0.25,
    "ee_height_m": 0.25,
}


def task_terms(**floats: float) -> dict:
    """The tracking-shaped term configuration; ``floats`` override DEFAULT_FLOATS by name."""
    unknown = sorted(set(floats) - set(DEFAULT_FLOATS))
    if unknown:
        raise KeyError(f"unknown synthetic task floats {unknown}; known: {sorted(DEFAULT_FLOATS)}")
    f = DEFAULT_FLOATS | floats
    joints = np.arange(NUM_JOINTS, dtype=np.float32)
    rewards: dict = {
        name: {"term": term, "weight": f[f"w_{name}"], "params": {"std": f[f"std_{name}"]}}
        for name, term in EXP_REWARDS.items()
    }
    rewards["action_rate"] = {"term": "synthetic_action_rate_l2", "weight": f["w_action_rate"]}
    rewards["joint_limit"] = {
        "term": "synthetic_joint_pos_limits",
        "weight": f["w_joint_limit"],
        "params": {"lower": -0.3 - 0.01 * joints, "upper": 0.3 + 0.01 * joints},
    }
    return {
        "preamble": {"anchor": {"term": "synthetic_anchor_frame"}},
        "rewards": rewards,
        "terminations": {
            "anchor_height": {
                "term": "synthetic_anchor_height_error",
                "params": {"threshold_m": f["anchor_height_m"]},
            },
            "ee_height": {
                "term": "synthetic_body_height_error",
                "params": {
                    "body_ids": np.array([3, 6, 10, 13], np.int64),
                    "threshold_m": f["ee_height_m"],
                },
            },
            "time_out": {
                "term": "synthetic_time_out",
                "time_out": True,
                "params": {"max_steps": 500},
            },
        },
        "observations": {
            "actor": {
                "noise": True,
                "terms": {
                    "command": {"term": "synthetic_motion_command"},
                    "anchor_pos_b": {"term": "synthetic_anchor_pos_b", "noise_std": 0.25},
                    "anchor_ori_b": {"term": "synthetic_anchor_ori_b", "noise_std": 0.05},
                    "base_ang_vel": {"term": "synthetic_base_ang_vel", "noise_std": 0.2},
                    "joint_pos": {
                        "term": "synthetic_joint_pos_rel",
                        "noise_std": 0.01,
                        "params": {"default": np.zeros(NUM_JOINTS, np.float32)},
                    },
                    "joint_vel": {"term": "synthetic_joint_vel", "noise_std": 0.5},
                    "actions": {"term": "synthetic_last_action"},
                },
            },
            "critic": {
                "terms": {
                    "command": {"term": "synthetic_motion_command"},
                    "anchor_pos_b": {"term": "synthetic_anchor_pos_b"},
                    "anchor_ori_b": {"term": "synthetic_anchor_ori_b"},
                    "body_pos_b": {"term": "synthetic_body_pos_b"},
                    "base_ang_vel": {"term": "synthetic_base_ang_vel"},
                    "joint_pos": {
                        "term": "synthetic_joint_pos_rel",
                        "params": {"default": np.zeros(NUM_JOINTS, np.float32)},
                    },
                    "joint_vel": {"term": "synthetic_joint_vel"},
                    "actions": {"term": "synthetic_last_action"},
                },
            },
        },
    }
