"""Unitree G1 29-DoF (rev 1.0): the numbers behind the project's MuJoCo model.

Every quantity is in SI units (m, kg, kg*m^2, rad, N*m, rad/s); quaternions are (w, x, y, z).

Where the facts come from (public material, read and re-entered here as numbers):

* Kinematics (body offsets and orientations in the parent frame), joint axes and ranges, link
  masses, centres of mass, principal inertias with their frames, effort limits and the IMU sites:
  Unitree's own description of the robot, ``unitreerobotics/unitree_ros``,
  ``robots/g1_description/g1_29dof_rev_1_0.xml`` (``actuatorfrcrange`` is the effort limit).
* Motor rotor inertias, gear stages, velocity limits and the motor type of every joint (the
  ankles and the waist roll/pitch are 4-bar linkages driven by two 5020 motors each): the G1
  constants of ``mujocolab/mjlab`` (``src/mjlab/asset_zoo/robots/unitree_g1/g1_constants.py``),
  consistent with BeyondMimic (``whole_body_tracking/robots/g1.py``), whose published armature
  values ``PUBLISHED_ARMATURE`` the reflected inertias below reproduce.

The collision and visual shapes (``GEOMS``) are the project's own: primitives sized by eye from
the link offsets above; they carry no mass (inertias are explicit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]

IDENTITY_QUAT: Quat = (1.0, 0.0, 0.0, 0.0)


# ---------------------------------------------------------------------------------------------
# Table types
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BodyRow:
    """One rigid link: its frame in the parent frame and its inertial properties."""

    name: str
    parent: str  # "world" for the floating base
    pos: Vec3  # body frame origin in the parent frame
    mass: float
    com: Vec3  # centre of mass in the body frame
    inertia: Vec3  # principal moments of inertia about the centre of mass
    quat: Quat = IDENTITY_QUAT  # body frame orientation in the parent frame
    inertia_quat: Quat = IDENTITY_QUAT  # principal axes orientation in the body frame


@dataclass(frozen=True)
class MotorType:
    """A Unitree joint motor with its two-stage planetary gearbox.

    ``rotor_inertias`` are the inertias of (rotor, first-stage planet carrier, second stage) and
    ``gear_stages`` their ratios (1, stage 1, stage 2). The inertia reflected to the output
    (MuJoCo's joint ``armature``) is ``I0 * (g1 * g2)**2 + I1 * g2**2 + I2``.
    """

    name: str
    rotor_inertias: Vec3
    gear_stages: Vec3
    effort_limit: float  # N*m at the output
    velocity_limit: float  # rad/s at the output

    @property
    def gear_ratio(self) -> float:
        return self.gear_stages[0] * self.gear_stages[1] * self.gear_stages[2]

    @property
    def reflected_inertia(self) -> float:
        i0, i1, i2 = self.rotor_inertias
        _, g1, g2 = self.gear_stages
        return i0 * (g1 * g2) ** 2 + i1 * g2**2 + i2


@dataclass(frozen=True)
class JointRow:
    """One actuated hinge joint (located at the origin of its child body)."""

    name: str
    body: str  # the child body the hinge moves
    axis: Vec3  # in the body frame
    range: tuple[float, float]  # rad
    motor: str  # MotorType name
    n_motors: int  # motors driving the joint (2 for the ankle/waist linkages)
    armature: float  # reflected inertia, kg*m^2
    effort_limit: float  # N*m
    velocity_limit: float  # rad/s


@dataclass(frozen=True)
class GeomRow:
    """A primitive shape (project-chosen). ``kind``: capsule (with ``fromto``), box or sphere."""

    body: str
    kind: str
    size: tuple[float, ...]  # capsule: (radius,); sphere: (radius,); box: half sizes
    pos: tuple[float, ...] = (0.0, 0.0, 0.0)
    fromto: tuple[float, ...] | None = None  # capsule end points (x0, y0, z0, x1, y1, z1)
    collision: bool = False  # collides with the floor (never with the robot itself)
    name: str = ""


@dataclass(frozen=True)
class SiteRow:
    name: str
    body: str
    pos: Vec3


# ---------------------------------------------------------------------------------------------
# Motors: reflected inertia (armature) and the PD gains derived from it
# ---------------------------------------------------------------------------------------------

MOTORS: dict[str, MotorType] = {
    m.name: m
    for m in (
        MotorType(
            "5020",
            rotor_inertias=(0.139e-4, 0.017e-4, 0.169e-4),
            gear_stages=(1.0, 1.0 + 46 / 18, 1.0 + 56 / 16),
            effort_limit=25.0,
            velocity_limit=37.0,
        ),
        MotorType(
            "7520-14",
            rotor_inertias=(0.489e-4, 0.098e-4, 0.533e-4),
            gear_stages=(1.0, 4.5, 1.0 + 48 / 22),
            effort_limit=88.0,
            velocity_limit=32.0,
        ),
        MotorType(
            "7520-22",
            rotor_inertias=(0.489e-4, 0.109e-4, 0.738e-4),
            gear_stages=(1.0, 4.5, 5.0),
            effort_limit=139.0,
            velocity_limit=20.0,
        ),
        MotorType(
            "4010",
            rotor_inertias=(0.068e-4, 0.0, 0.0),
            gear_stages=(1.0, 5.0, 5.0),
            effort_limit=5.0,
            velocity_limit=22.0,
        ),
    )
}

# Armature values as published (BeyondMimic / mjlab), for cross-checking ``reflected_inertia``.
PUBLISHED_ARMATURE: dict[str, float] = {
    "5020": 0.003609725,
    "7520-14": 0.010177520,
    "7520-22": 0.025101925,
    "4010": 0.00425,
}

PD_NATURAL_FREQUENCY_HZ = 10.0
PD_DAMPING_RATIO = 2.0
ACTION_SCALE_EFFORT_FRACTION = 0.25


def pd_gains(armature: float) -> tuple[float, float]:
    """(kp, kd) that give a joint of inertia ``armature`` the natural frequency and damping."""
    omega = 2.0 * math.pi * PD_NATURAL_FREQUENCY_HZ
    return armature * omega**2, 2.0 * PD_DAMPING_RATIO * armature * omega


# ---------------------------------------------------------------------------------------------
# Bodies, in MuJoCo's depth-first order
# ---------------------------------------------------------------------------------------------

BODIES: tuple[BodyRow, ...] = (
    # The free-floating base. ``pos`` puts the soles of the straight-legged robot (all joints at
    # 0) on the floor; Unitree's file starts it at 0.793, 1 mm higher.
    BodyRow("pelvis", "world", pos=(0.0, 0.0, 0.7919),
            mass=3.813, com=(0.0, 0.0, -0.07605), inertia=(0.010549, 0.0093089, 0.0079184),
            inertia_quat=(1.0, 0.0, -0.000399148, 0.0)),
    # Left leg.
    BodyRow("left_hip_pitch_link", "pelvis", pos=(0.0, 0.064452, -0.1027),
            mass=1.35, com=(0.002741, 0.047791, -0.02606),
            inertia=(0.00181517, 0.00153422, 0.00116212),
            inertia_quat=(0.954862, 0.293964, 0.0302556, 0.030122)),
    BodyRow("left_hip_roll_link", "left_hip_pitch_link", pos=(0.0, 0.052, -0.030465),
            quat=(0.996179, 0.0, -0.0873386, 0.0),
            mass=1.52, com=(0.029812, -0.001045, -0.087934),
            inertia=(0.00254986, 0.00241169, 0.00148755),
            inertia_quat=(0.977808, -1.97119e-05, 0.205576, -0.0403793)),
    BodyRow("left_hip_yaw_link", "left_hip_roll_link", pos=(0.025001, 0.0, -0.12412),
            mass=1.702, com=(-0.057709, -0.010981, -0.15078),
            inertia=(0.00776166, 0.00717575, 0.00160139),
            inertia_quat=(0.600598, 0.15832, 0.223482, 0.751181)),
    BodyRow("left_knee_link", "left_hip_yaw_link", pos=(-0.078273, 0.0021489, -0.17734),
            quat=(0.996179, 0.0, 0.0873386, 0.0),
            mass=1.932, com=(0.005457, 0.003964, -0.12074),
            inertia=(0.0113804, 0.0112778, 0.00146458),
            inertia_quat=(0.923418, -0.0327699, 0.0158246, 0.382067)),
    BodyRow("left_ankle_pitch_link", "left_knee_link", pos=(0.0, -9.4445e-05, -0.30001),
            mass=0.074, com=(-0.007269, 0.0, 0.011137), inertia=(1.89e-05, 1.40805e-05, 6.9195e-06),
            inertia_quat=(0.603053, 0.369225, 0.369225, 0.603053)),
    BodyRow("left_ankle_roll_link", "left_ankle_pitch_link", pos=(0.0, 0.0, -0.017558),
            mass=0.608, com=(0.026505, 0.0, -0.016425),
            inertia=(0.00167218, 0.0016161, 0.000217621),
            inertia_quat=(-0.000481092, 0.728482, -0.000618967, 0.685065)),
    # Right leg.
    BodyRow("right_hip_pitch_link", "pelvis", pos=(0.0, -0.064452, -0.1027),
            mass=1.35, com=(0.002741, -0.047791, -0.02606),
            inertia=(0.00181517, 0.00153422, 0.00116212),
            inertia_quat=(0.954862, -0.293964, 0.0302556, -0.030122)),
    BodyRow("right_hip_roll_link", "right_hip_pitch_link", pos=(0.0, -0.052, -0.030465),
            quat=(0.996179, 0.0, -0.0873386, 0.0),
            mass=1.52, com=(0.029812, 0.001045, -0.087934),
            inertia=(0.00254986, 0.00241169, 0.00148755),
            inertia_quat=(0.977808, 1.97119e-05, 0.205576, 0.0403793)),
    BodyRow("right_hip_yaw_link", "right_hip_roll_link", pos=(0.025001, 0.0, -0.12412),
            mass=1.702, com=(-0.057709, 0.010981, -0.15078),
            inertia=(0.00776166, 0.00717575, 0.00160139),
            inertia_quat=(0.751181, 0.223482, 0.15832, 0.600598)),
    BodyRow("right_knee_link", "right_hip_yaw_link", pos=(-0.078273, -0.0021489, -0.17734),
            quat=(0.996179, 0.0, 0.0873386, 0.0),
            mass=1.932, com=(0.005457, -0.003964, -0.12074),
            inertia=(0.011374, 0.0112843, 0.00146452),
            inertia_quat=(0.923439, 0.0345276, 0.0116333, -0.382012)),
    BodyRow("right_ankle_pitch_link", "right_knee_link", pos=(0.0, 9.4445e-05, -0.30001),
            mass=0.074, com=(-0.007269, 0.0, 0.011137), inertia=(1.89e-05, 1.40805e-05, 6.9195e-06),
            inertia_quat=(0.603053, 0.369225, 0.369225, 0.603053)),
    BodyRow("right_ankle_roll_link", "right_ankle_pitch_link", pos=(0.0, 0.0, -0.017558),
            mass=0.608, com=(0.026505, 0.0, -0.016425),
            inertia=(0.00167218, 0.0016161, 0.000217621),
            inertia_quat=(0.000481092, 0.728482, 0.000618967, 0.685065)),
    # Waist and torso.
    BodyRow("waist_yaw_link", "pelvis", pos=(0.0, 0.0, 0.0),
            mass=0.214, com=(0.003494, 0.000233, 0.018034),
            inertia=(0.000163531, 0.000107714, 0.000102205),
            inertia_quat=(0.289697, 0.591001, -0.337795, 0.672821)),
    BodyRow("waist_roll_link", "waist_yaw_link", pos=(-0.0039635, 0.0, 0.044),
            mass=0.086, com=(0.0, 2.3e-05, 0.0), inertia=(8.245e-06, 7.079e-06, 6.339e-06),
            inertia_quat=(0.5, 0.5, -0.5, 0.5)),
    BodyRow("torso_link", "waist_roll_link", pos=(0.0, 0.0, 0.0),
            mass=7.818, com=(0.00203158, 0.000339683, 0.184568),
            inertia=(0.121847, 0.109825, 0.0273735),
            inertia_quat=(0.999803, -6.03319e-05, 0.0198256, 0.00131986)),
    # Left arm.
    BodyRow("left_shoulder_pitch_link", "torso_link", pos=(0.0039563, 0.10022, 0.24778),
            quat=(0.990264, 0.139201, 1.38722e-05, -9.86868e-05),
            mass=0.718, com=(0.0, 0.035892, -0.011628),
            inertia=(0.000465864, 0.000432842, 0.000406394),
            inertia_quat=(0.654152, 0.0130458, -0.326267, 0.68225)),
    BodyRow("left_shoulder_roll_link", "left_shoulder_pitch_link", pos=(0.0, 0.038, -0.013831),
            quat=(0.990268, -0.139172, 0.0, 0.0),
            mass=0.643, com=(-0.000227, 0.00727, -0.063243),
            inertia=(0.000691311, 0.000618011, 0.000388977),
            inertia_quat=(0.701256, -0.0196223, -0.00710317, 0.712604)),
    BodyRow("left_shoulder_yaw_link", "left_shoulder_roll_link", pos=(0.0, 0.00624, -0.1032),
            mass=0.734, com=(0.010773, -0.002949, -0.072009),
            inertia=(0.00106187, 0.00103217, 0.000400661),
            inertia_quat=(0.716879, -0.0964829, -0.0679942, 0.687134)),
    BodyRow("left_elbow_link", "left_shoulder_yaw_link", pos=(0.015783, 0.0, -0.080518),
            mass=0.6, com=(0.064956, 0.004454, -0.010062),
            inertia=(0.000443035, 0.000421612, 0.000259353),
            inertia_quat=(0.541765, 0.636132, 0.388821, 0.388129)),
    BodyRow("left_wrist_roll_link", "left_elbow_link", pos=(0.1, 0.00188791, -0.01),
            mass=0.085445, com=(0.0171394, 0.000537591, 4.8864e-07),
            inertia=(5.48211e-05, 4.96646e-05, 3.57798e-05),
            inertia_quat=(0.575338, 0.411667, -0.574906, 0.411094)),
    BodyRow("left_wrist_pitch_link", "left_wrist_roll_link", pos=(0.038, 0.0, 0.0),
            mass=0.48405, com=(0.0229999, -0.00111685, -0.00111658),
            inertia=(0.000430353, 0.000429873, 0.000164648),
            inertia_quat=(0.249998, 0.661363, 0.293036, 0.643608)),
    BodyRow("left_wrist_yaw_link", "left_wrist_pitch_link", pos=(0.046, 0.0, 0.0),
            mass=0.254576, com=(0.0708244, 0.000191745, 0.00161742),
            inertia=(0.000646113, 0.000559993, 0.000147566),
            inertia_quat=(0.510571, 0.526295, 0.468078, 0.493188)),
    # Right arm.
    BodyRow("right_shoulder_pitch_link", "torso_link", pos=(0.0039563, -0.10021, 0.24778),
            quat=(0.990264, -0.139201, 1.38722e-05, 9.86868e-05),
            mass=0.718, com=(0.0, -0.035892, -0.011628),
            inertia=(0.000465864, 0.000432842, 0.000406394),
            inertia_quat=(0.68225, -0.326267, 0.0130458, 0.654152)),
    BodyRow("right_shoulder_roll_link", "right_shoulder_pitch_link", pos=(0.0, -0.038, -0.013831),
            quat=(0.990268, 0.139172, 0.0, 0.0),
            mass=0.643, com=(-0.000227, -0.00727, -0.063243),
            inertia=(0.000691311, 0.000618011, 0.000388977),
            inertia_quat=(0.712604, -0.00710317, -0.0196223, 0.701256)),
    BodyRow("right_shoulder_yaw_link", "right_shoulder_roll_link", pos=(0.0, -0.00624, -0.1032),
            mass=0.734, com=(0.010773, 0.002949, -0.072009),
            inertia=(0.00106187, 0.00103217, 0.000400661),
            inertia_quat=(0.687134, -0.0679942, -0.0964829, 0.716879)),
    BodyRow("right_elbow_link", "right_shoulder_yaw_link", pos=(0.015783, 0.0, -0.080518),
            mass=0.6, com=(0.064956, -0.004454, -0.010062),
            inertia=(0.000443035, 0.000421612, 0.000259353),
            inertia_quat=(0.388129, 0.388821, 0.636132, 0.541765)),
    BodyRow("right_wrist_roll_link", "right_elbow_link", pos=(0.1, -0.00188791, -0.01),
            mass=0.085445, com=(0.0171394, -0.000537591, 4.8864e-07),
            inertia=(5.48211e-05, 4.96646e-05, 3.57798e-05),
            inertia_quat=(0.411667, 0.575338, -0.411094, 0.574906)),
    BodyRow("right_wrist_pitch_link", "right_wrist_roll_link", pos=(0.038, 0.0, 0.0),
            mass=0.48405, com=(0.0229999, 0.00111685, -0.00111658),
            inertia=(0.000430353, 0.000429873, 0.000164648),
            inertia_quat=(0.643608, 0.293036, 0.661363, 0.249998)),
    BodyRow("right_wrist_yaw_link", "right_wrist_pitch_link", pos=(0.046, 0.0, 0.0),
            mass=0.254576, com=(0.0708244, -0.000191745, 0.00161742),
            inertia=(0.000646113, 0.000559993, 0.000147566),
            inertia_quat=(0.493188, 0.468078, 0.526295, 0.510571)),
)  # fmt: skip

BODY_NAMES: tuple[str, ...] = tuple(b.name for b in BODIES)
BODY_BY_NAME: dict[str, BodyRow] = {b.name: b for b in BODIES}
TOTAL_MASS: float = sum(b.mass for b in BODIES)

FLOATING_BASE_JOINT = "floating_base_joint"
ROOT_BODY = "pelvis"
TORSO_BODY = "torso_link"


# ---------------------------------------------------------------------------------------------
# Joints, in the order of their bodies
# ---------------------------------------------------------------------------------------------

_X: Vec3 = (1.0, 0.0, 0.0)
_Y: Vec3 = (0.0, 1.0, 0.0)
_Z: Vec3 = (0.0, 0.0, 1.0)


def _joint(
    name: str,
    axis: Vec3,
    lo: float,
    hi: float,
    motor: str,
    effort_limit: float,
    n_motors: int = 1,
    body: str | None = None,
) -> JointRow:
    """A hinge at the origin of ``body`` (by default the ``_link`` of the same name)."""
    m = MOTORS[motor]
    return JointRow(
        name=name,
        body=body if body is not None else name.removesuffix("_joint") + "_link",
        axis=axis,
        range=(lo, hi),
        motor=motor,
        n_motors=n_motors,
        armature=n_motors * m.reflected_inertia,
        effort_limit=effort_limit,
        velocity_limit=m.velocity_limit,
    )


JOINTS: tuple[JointRow, ...] = (
    _joint("left_hip_pitch_joint", _Y, -2.5307, 2.8798, "7520-14", 88.0),
    _joint("left_hip_roll_joint", _X, -0.5236, 2.9671, "7520-22", 139.0),
    _joint("left_hip_yaw_joint", _Z, -2.7576, 2.7576, "7520-14", 88.0),
    _joint("left_knee_joint", _Y, -0.087267, 2.8798, "7520-22", 139.0),
    _joint("left_ankle_pitch_joint", _Y, -0.87267, 0.5236, "5020", 50.0, 2),
    _joint("left_ankle_roll_joint", _X, -0.2618, 0.2618, "5020", 50.0, 2),
    _joint("right_hip_pitch_joint", _Y, -2.5307, 2.8798, "7520-14", 88.0),
    _joint("right_hip_roll_joint", _X, -2.9671, 0.5236, "7520-22", 139.0),
    _joint("right_hip_yaw_joint", _Z, -2.7576, 2.7576, "7520-14", 88.0),
    _joint("right_knee_joint", _Y, -0.087267, 2.8798, "7520-22", 139.0),
    _joint("right_ankle_pitch_joint", _Y, -0.87267, 0.5236, "5020", 50.0, 2),
    _joint("right_ankle_roll_joint", _X, -0.2618, 0.2618, "5020", 50.0, 2),
    _joint("waist_yaw_joint", _Z, -2.618, 2.618, "7520-14", 88.0),
    _joint("waist_roll_joint", _X, -0.52, 0.52, "5020", 50.0, 2),
    _joint("waist_pitch_joint", _Y, -0.52, 0.52, "5020", 50.0, 2, body="torso_link"),
    _joint("left_shoulder_pitch_joint", _Y, -3.0892, 2.6704, "5020", 25.0),
    _joint("left_shoulder_roll_joint", _X, -1.5882, 2.2515, "5020", 25.0),
    _joint("left_shoulder_yaw_joint", _Z, -2.618, 2.618, "5020", 25.0),
    _joint("left_elbow_joint", _Y, -1.0472, 2.0944, "5020", 25.0),
    _joint("left_wrist_roll_joint", _X, -1.97222, 1.97222, "5020", 25.0),
    _joint("left_wrist_pitch_joint", _Y, -1.61443, 1.61443, "4010", 5.0),
    _joint("left_wrist_yaw_joint", _Z, -1.61443, 1.61443, "4010", 5.0),
    _joint("right_shoulder_pitch_joint", _Y, -3.0892, 2.6704, "5020", 25.0),
    _joint("right_shoulder_roll_joint", _X, -2.2515, 1.5882, "5020", 25.0),
    _joint("right_shoulder_yaw_joint", _Z, -2.618, 2.618, "5020", 25.0),
    _joint("right_elbow_joint", _Y, -1.0472, 2.0944, "5020", 25.0),
    _joint("right_wrist_roll_joint", _X, -1.97222, 1.97222, "5020", 25.0),
    _joint("right_wrist_pitch_joint", _Y, -1.61443, 1.61443, "4010", 5.0),
    _joint("right_wrist_yaw_joint", _Z, -1.61443, 1.61443, "4010", 5.0),
)  # fmt: skip

JOINT_NAMES: tuple[str, ...] = tuple(j.name for j in JOINTS)
JOINT_BY_NAME: dict[str, JointRow] = {j.name: j for j in JOINTS}


def actuator_name(joint_name: str) -> str:
    """The position actuator of a joint: its name without the ``_joint`` suffix."""
    return joint_name.removesuffix("_joint")


ACTUATOR_NAMES: tuple[str, ...] = tuple(actuator_name(n) for n in JOINT_NAMES)
KP: dict[str, float] = {j.name: pd_gains(j.armature)[0] for j in JOINTS}
KD: dict[str, float] = {j.name: pd_gains(j.armature)[1] for j in JOINTS}
ACTION_SCALE: dict[str, float] = {
    j.name: ACTION_SCALE_EFFORT_FRACTION * j.effort_limit / KP[j.name] for j in JOINTS
}


# ---------------------------------------------------------------------------------------------
# Sites and the standing pose
# ---------------------------------------------------------------------------------------------

SOLE_Z = -0.035  # sole plane in the ankle roll frame (Unitree's contact points: z -0.03, r 0.005)
FOOT_CENTER_X = 0.035  # middle of Unitree's contact points (x from -0.05 to 0.12)

SITES: tuple[SiteRow, ...] = (
    SiteRow("imu_in_pelvis", "pelvis", (0.04525, 0.0, -0.08339)),
    SiteRow("imu_in_torso", "torso_link", (-0.03959, -0.00224, 0.14792)),
    SiteRow("left_foot", "left_ankle_roll_link", (FOOT_CENTER_X, 0.0, SOLE_Z)),
    SiteRow("right_foot", "right_ankle_roll_link", (FOOT_CENTER_X, 0.0, SOLE_Z)),
)

# Knees slightly bent, arms relaxed: the usual G1 standing pose (BeyondMimic, mjlab).
DEFAULT_JOINT_POS: dict[str, float] = {name: 0.0 for name in JOINT_NAMES}
DEFAULT_JOINT_POS.update(
    {
        "left_hip_pitch_joint": -0.312,
        "right_hip_pitch_joint": -0.312,
        "left_knee_joint": 0.669,
        "right_knee_joint": 0.669,
        "left_ankle_pitch_joint": -0.363,
        "right_ankle_pitch_joint": -0.363,
        "left_shoulder_pitch_joint": 0.2,
        "right_shoulder_pitch_joint": 0.2,
        "left_shoulder_roll_joint": 0.2,
        "right_shoulder_roll_joint": -0.2,
        "left_elbow_joint": 0.6,
        "right_elbow_joint": 0.6,
    }
)

# Pelvis height at which the soles of DEFAULT_JOINT_POS touch the floor (forward kinematics of
# this table, 0.75703; the tests check it). The keyframe STANDING_KEYFRAME holds this pose.
STANDING_PELVIS_HEIGHT = 0.757
STANDING_KEYFRAME = "knees_bent"


# ---------------------------------------------------------------------------------------------
# Primitive shapes (project-chosen, massless)
# ---------------------------------------------------------------------------------------------


def _cap(
    body: str, a: Vec3, b: Vec3, r: float, *, collision: bool = False, name: str = ""
) -> GeomRow:
    return GeomRow(body, "capsule", (r,), fromto=(*a, *b), collision=collision, name=name)


def _left_side_geoms(s: str) -> tuple[GeomRow, ...]:
    """Leg and arm shapes of side ``s`` ("left"); mirrored in y for the right side."""
    foot_size, foot_pos = (0.09, 0.035, 0.0125), (FOOT_CENTER_X, 0.0, SOLE_Z + 0.0125)
    return (
        _cap(f"{s}_hip_pitch_link", (0, 0, 0), (0, 0.052, -0.03), 0.04),
        _cap(f"{s}_hip_roll_link", (0.005, 0, -0.01), (0.025, 0, -0.11), 0.045),
        _cap(f"{s}_hip_yaw_link", (0, 0, -0.02), (-0.075, 0.002, -0.17), 0.05),
        _cap(f"{s}_knee_link", (0, 0, -0.02), (0, 0, -0.27), 0.04),
        _cap(f"{s}_knee_link", (0, 0, -0.05), (0, 0, -0.22), 0.035, collision=True,
             name=f"{s}_shin_collision"),
        GeomRow(f"{s}_ankle_pitch_link", "sphere", (0.02,)),
        GeomRow(f"{s}_ankle_roll_link", "box", foot_size, foot_pos),
        GeomRow(f"{s}_ankle_roll_link", "box", foot_size, foot_pos, collision=True,
                name=f"{s}_foot_collision"),
        _cap(f"{s}_shoulder_pitch_link", (0, 0, 0), (0, 0.038, -0.014), 0.035),
        _cap(f"{s}_shoulder_roll_link", (0, 0, -0.02), (0, 0.006, -0.09), 0.035),
        _cap(f"{s}_shoulder_yaw_link", (0, 0, 0), (0.0158, 0, -0.0805), 0.033),
        _cap(f"{s}_elbow_link", (0, 0, 0), (0.1, 0.0019, -0.01), 0.03),
        _cap(f"{s}_wrist_roll_link", (0, 0, 0), (0.038, 0, 0), 0.027),
        _cap(f"{s}_wrist_pitch_link", (0, 0, 0), (0.046, 0, 0), 0.027),
        GeomRow(f"{s}_wrist_yaw_link", "box", (0.045, 0.015, 0.035), pos=(0.08, 0.0, 0.0)),
        _cap(f"{s}_wrist_yaw_link", (0.04, 0, 0), (0.11, 0, 0), 0.03, collision=True,
             name=f"{s}_hand_collision"),
    )  # fmt: skip


def _mirror(g: GeomRow) -> GeomRow:
    def flip(v: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(-x if i % 3 == 1 else x for i, x in enumerate(v))

    return GeomRow(
        body=g.body.replace("left_", "right_", 1),
        kind=g.kind,
        size=g.size,
        pos=flip(g.pos),
        fromto=None if g.fromto is None else flip(g.fromto),
        collision=g.collision,
        name=g.name.replace("left_", "right_", 1),
    )


GEOMS: tuple[GeomRow, ...] = (
    _cap("pelvis", (0, -0.065, -0.09), (0, 0.065, -0.09), 0.06),
    GeomRow("waist_yaw_link", "sphere", (0.04,), pos=(0.0, 0.0, 0.02)),
    GeomRow("waist_roll_link", "sphere", (0.03,)),
    GeomRow("torso_link", "box", (0.07, 0.11, 0.12), pos=(0.0, 0.0, 0.17)),
    GeomRow("torso_link", "sphere", (0.065,), pos=(0.005, 0.0, 0.40)),
    *_left_side_geoms("left"),
    *(_mirror(g) for g in _left_side_geoms("left")),
)
