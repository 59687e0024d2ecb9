"""Per-env model parameters through the SimBackend contract: a parameter set for one env
reaches that env's physics and no other's, on every backend that sets them; the others refuse
by name; an impossible value is refused before anything is written."""

import numpy as np
import pytest

from fuselab_env_core.backend import MODEL_PARAMS
from fuselab_sim_backends.mjwarp import MjWarpBackend
from fuselab_sim_backends.motrix import MotrixBackend
from fuselab_sim_backends.mujoco_cpu import MujocoBackend

# A cart sliding on the floor (its box rubs on it) under a position actuator, and a pole on a
# hinge with a position actuator of its own: every contract parameter changes how it moves.
CART_XML = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="cart" pos="0 0 0.095">  <!-- pressed 5 mm into the floor: friction acts -->
      <joint name="slider" type="slide" axis="1 0 0" frictionloss="0.1" damping="0.5"/>
      <geom name="cart_box" type="box" size="0.2 0.1 0.1" mass="2"/>
      <body name="pole" pos="0 0 0.1">
        <joint name="hinge" type="hinge" axis="0 1 0" damping="0.1" armature="0.01"/>
        <geom name="pole_rod" type="capsule" fromto="0 0 0 0 0 0.6" size="0.03" mass="0.5"
              contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position name="slide" joint="slider" kp="50" kv="5"/>
    <position name="swing" joint="hinge" kp="20" kv="1"/>
  </actuator>
</mujoco>
"""
N = 3  # env 1 gets the new value; envs 0 and 2 stay nominal
CHANGED = {  # parameter -> (element name, kind of element, new value)
    "geom_friction": ("cart_box", "geom", [3.0, 0.005, 0.0001]),  # above the floor's 1
    "body_mass": ("cart", "body", 4.0),
    "body_ipos": ("pole", "body", [0.05, 0.0, 0.2]),
    "body_inertia": ("pole", "body", [0.05, 0.05, 0.01]),
    "actuator_kp": ("swing", "actuator", 60.0),
    "actuator_kd": ("swing", "actuator", 4.0),
    "dof_damping": ("hinge", "dof", 1.5),
    "dof_armature": ("hinge", "dof", 0.2),
    "dof_frictionloss": ("hinge", "dof", 0.5),
}
SETTERS = [MujocoBackend, MjWarpBackend]
# What the untouched envs may move by: nothing on MuJoCo (their model is not touched); on MuJoCo
# Warp set_const recomputes the derived constants of every world in float32 (masses, inertia,
# armature), which moves the last bits.
UNTOUCHED_ATOL = {MujocoBackend: 0.0, MjWarpBackend: 1e-6}


def element_id(sim, name: str, kind: str) -> int:
    facts = sim.model
    if kind == "dof":
        return int(facts.joint_qvel_adr[facts.joint_names.index(name)])
    table = {"geom": facts.geom_names, "body": facts.body_names, "actuator": facts.actuator_names}
    return table[kind].index(name)


def run(sim, steps: int = 40) -> np.ndarray:
    """The same start and controls in every env; the states after ``steps`` substeps."""
    qpos = np.tile(np.array([0.0, 0.3], np.float32), (N, 1))
    qvel = np.zeros((N, 2), np.float32)
    sim.reset_envs(np.arange(N), qpos, qvel)
    sim.set_controls(np.tile(np.array([0.5, 0.0], np.float32), (N, 1)))
    sim.step(steps)
    out_qpos, out_qvel = np.zeros((N, 2), np.float32), np.zeros((N, 2), np.float32)
    sim.copy_qpos_qvel(out_qpos, out_qvel)
    return np.concatenate([out_qpos, out_qvel], axis=1)


@pytest.fixture(scope="module", params=SETTERS, ids=lambda cls: cls.__name__)
def backend_cls(request):
    return request.param


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_a_parameter_set_for_one_env_changes_that_env_alone(backend_cls, name):
    sim = backend_cls(CART_XML, N)
    try:
        before = run(sim)
        np.testing.assert_array_equal(before[0], before[1])  # same physics everywhere first
        element, kind, value = CHANGED[name]
        ids = np.array([element_id(sim, element, kind)])
        nominal = sim.model_param(name)
        values = np.asarray(value, np.float64).reshape(1, 1, *MODEL_PARAMS[name].shape)
        sim.set_model_param(name, np.array([1]), ids, values)
        after = run(sim)
        atol = UNTOUCHED_ATOL[backend_cls]
        np.testing.assert_allclose(after[[0, 2]], before[[0, 2]], rtol=0, atol=atol)  # untouched
        assert np.abs(after[1] - before[1]).max() > 1e-4, f"{name} did not reach env 1"
        np.testing.assert_array_equal(sim.model_param(name), nominal)  # nominal kept
    finally:
        sim.close()


def test_impossible_values_and_unknown_parameters_are_refused():
    sim = MujocoBackend(CART_XML, N)
    try:
        one = np.array([0])
        body = np.array([sim.model.body_names.index("cart")])
        with pytest.raises(ValueError, match=r"body_mass: expected values > 0, got \[-1.0\]"):
            sim.set_model_param("body_mass", one, body, np.full((1, 1), -1.0))
        with pytest.raises(ValueError, match=r"geom_friction: expected values >= 0"):
            sim.set_model_param("geom_friction", one, np.array([1]), np.full((1, 1, 3), -0.5))
        with pytest.raises(ValueError, match=r"model parameter 'mass': accepted \["):
            sim.set_model_param("mass", one, body, np.ones((1, 1)))
        with pytest.raises(ValueError, match=r"expected values of shape \(1, 1\)"):
            sim.set_model_param("body_mass", one, body, np.ones((2, 1)))
        with pytest.raises(ValueError, match=r"element_ids: expected ids in 0\.\.2, got \[9\]"):
            sim.set_model_param("body_mass", one, np.array([9]), np.ones((1, 1)))
        assert run(sim)[0].tolist() == run(sim)[1].tolist()  # nothing was written
    finally:
        sim.close()


def test_only_envs_given_parameters_hold_a_model_of_their_own():
    sim = MujocoBackend(CART_XML, N)
    try:
        assert sim.per_env_model_bytes() == 0
        body = np.array([sim.model.body_names.index("cart")])
        sim.set_model_param("body_mass", np.array([0, 2]), body, np.full((2, 1), 2.0))
        two = sim.per_env_model_bytes()
        sim.set_model_param("body_mass", np.array([2]), body, np.full((1, 1), 3.0))
        assert two > 0 and sim.per_env_model_bytes() == two  # env 2 already had its copy
        sim.set_model_param("body_mass", np.array([1]), body, np.full((1, 1), 3.0))
        assert sim.per_env_model_bytes() == 3 * two // 2
    finally:
        sim.close()


def test_kp_of_a_motor_is_refused_by_name():
    motor_xml = CART_XML.replace(
        '<position name="swing" joint="hinge" kp="20" kv="1"/>',
        '<motor name="swing" joint="hinge"/>',
    )
    sim = MujocoBackend(motor_xml, N)
    try:
        with pytest.raises(ValueError, match=r"actuator_kp: actuator 'swing' is not a position"):
            sim.set_model_param("actuator_kp", np.array([0]), np.array([1]), np.ones((1, 1)))
    finally:
        sim.close()


def test_motrix_refuses_per_env_parameters_naming_them():
    sim = MotrixBackend(CART_XML, N)
    try:
        with pytest.raises(ValueError, match=r"body_mass: MotrixBackend does not set model"):
            sim.set_model_param("body_mass", np.array([0]), np.array([1]), np.ones((1, 1)))
    finally:
        sim.close()
