"""A downstream project built on fuselab-env-core alone.

It brings its own physics (a batch of point masses on a plane, in NumPy) behind the SimBackend
contract, its own terms, and gets a fused kernel for them. Run: ``point-masses``.
"""

from __future__ import annotations

import argparse
import logging
import math

import numpy as np

from fuselab_env_core import FusedTerms, observation, reward, termination
from fuselab_env_core.backend import ModelFacts, SimBackend, check_buffer
from fuselab_env_core.entity import Entity


class PointMassBackend(SimBackend):
    """Point masses pushed by (fx, fy) forces, with viscous damping, integrated semi-implicitly."""

    def __init__(self, num_envs: int, dt: float = 0.01, mass: float = 1.0, damping: float = 0.5):
        self.num_envs = num_envs
        self.model = ModelFacts(
            body_names=("world", "mass"),
            joint_names=("x", "y"),
            actuator_names=("force_x", "force_y"),
            joint_ranges=np.array([[-np.inf, np.inf]] * 2, np.float32),
            joint_qpos_adr=np.array([0, 1], np.int32),
            joint_qvel_adr=np.array([0, 1], np.int32),
            nq=2,
            nv=2,
            nu=2,
            physics_dt=dt,
        )
        self._mass, self._damping = mass, damping
        self._qpos = np.zeros((num_envs, 2))
        self._qvel = np.zeros((num_envs, 2))
        self._force = np.zeros((num_envs, 2))

    def set_controls(self, controls: np.ndarray) -> None:
        check_buffer("controls", controls, (self.num_envs, 2))
        self._force[:] = controls

    def step(self, substeps: int) -> None:
        dt = self.model.physics_dt
        for _ in range(substeps):
            self._qvel += dt * (self._force - self._damping * self._qvel) / self._mass
            self._qpos += dt * self._qvel

    def reset_envs(self, env_ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        self._qpos[env_ids] = qpos
        self._qvel[env_ids] = qvel

    # The reads fill every row, which the contract allows when asked for some (env_ids).

    def copy_qpos_qvel(self, out_qpos, out_qvel, env_ids=None) -> None:
        out_qpos[:] = self._qpos
        out_qvel[:] = self._qvel

    def copy_body_state_w(
        self, body_ids, out_pos, out_quat, out_lin_vel, out_ang_vel, env_ids=None
    ) -> None:
        for k, body in enumerate(body_ids):
            moving = body == 1  # the world body stays at the origin
            out_pos[:, k, :2] = self._qpos if moving else 0.0
            out_pos[:, k, 2] = 0.0
            out_quat[:, k] = (1.0, 0.0, 0.0, 0.0)
            out_lin_vel[:, k, :2] = self._qvel if moving else 0.0
            out_lin_vel[:, k, 2] = 0.0
            out_ang_vel[:, k] = 0.0

    def copy_contact_forces(self, body_ids, out_force, env_ids=None) -> None:
        check_buffer("out_force", out_force, (self.num_envs, len(body_ids), 3))
        out_force[...] = 0.0  # a planar model without gravity or contacts


@reward()
def target_distance_exp(i, body_pos_w, target, std_m: float = 0.5):
    dx = target[i, 0] - body_pos_w[i, 0, 0]
    dy = target[i, 1] - body_pos_w[i, 0, 1]
    return math.exp(-(dx * dx + dy * dy) / (std_m * std_m))


@termination()
def out_of_bounds(i, body_pos_w, limit_m: float = 5.0):
    return abs(body_pos_w[i, 0, 0]) > limit_m or abs(body_pos_w[i, 0, 1]) > limit_m


@observation(size=4)
def target_and_velocity(i, out, col, body_pos_w, body_lin_vel_w, target):
    out[i, col] = target[i, 0] - body_pos_w[i, 0, 0]
    out[i, col + 1] = target[i, 1] - body_pos_w[i, 0, 1]
    out[i, col + 2] = body_lin_vel_w[i, 0, 0]
    out[i, col + 3] = body_lin_vel_w[i, 0, 1]


TERMS = {
    "rewards": {"reach": {"term": "target_distance_exp", "weight": 1.0, "params": {"std_m": 0.5}}},
    "terminations": {"out": {"term": "out_of_bounds"}},
    "observations": {"policy": {"terms": {"target": {"term": "target_and_velocity"}}}},
}


def run(num_envs: int = 256, steps: int = 200, seed: int = 0) -> tuple[float, float]:
    """Drive every mass to its target with a PD law read from the fused observations."""
    rng = np.random.default_rng(seed)
    backend = PointMassBackend(num_envs)
    entity = Entity(backend, ["mass"])
    target = rng.uniform(-2.0, 2.0, (num_envs, 2)).astype(np.float32)
    terms = FusedTerms.build(TERMS, {**entity.state(), "target": target}, dt=0.04)
    controls = np.zeros((num_envs, 2), np.float32)
    entity.update()
    terms()
    rewards = []
    for _ in range(steps):
        obs = terms.buffers.obs["policy"]
        controls[:] = 4.0 * obs[:, 0:2] - 2.0 * obs[:, 2:4]
        backend.set_controls(controls)
        backend.step(4)
        entity.update()
        terms()
        rewards.append(float(terms.buffers.reward.mean()))
    return rewards[0], rewards[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-envs", type=int, default=256)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
    first, last = run(args.num_envs)
    print(f"mean reward per step: first {first:.4f}, last {last:.4f}")


if __name__ == "__main__":
    main()
