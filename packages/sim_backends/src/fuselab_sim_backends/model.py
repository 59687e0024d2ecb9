"""Loading a MuJoCo-format model (MJCF path or XML string) and describing it as ModelFacts."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import mujoco
import numpy as np

from fuselab_env_core.backend import ModelFacts, check_positive_float
from fuselab_env_core.timing import elapsed_ms

log = logging.getLogger(__name__)

ONE_DOF_JOINTS = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))


def load_spec(mjcf: str | Path, physics_dt: float | None = None) -> mujoco.MjSpec:
    """An MjSpec from a file path or an XML string, with an error that names what failed;
    ``physics_dt`` (seconds per physics step) replaces the model's own option timestep."""
    if physics_dt is not None:
        accepted = "a finite time step > 0 in seconds (or None: the MJCF's)"
        check_positive_float("physics_dt", physics_dt, accepted)
    started = time.perf_counter()
    text = str(mjcf)
    is_xml = isinstance(mjcf, str) and text.lstrip().startswith("<")
    if not is_xml:
        path = Path(mjcf).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"mjcf: no MJCF file at {str(path)!r}")
    try:
        spec = mujoco.MjSpec.from_string(text) if is_xml else mujoco.MjSpec.from_file(str(path))
    except ValueError as error:
        where = "the MJCF string" if is_xml else repr(str(path))
        raise ValueError(f"mjcf: MuJoCo could not parse {where}: {error}") from None
    if physics_dt is not None:
        spec.option.timestep = physics_dt
    log.info("load MJCF: %.1f ms", elapsed_ms(started))
    return spec


def model_facts(model: mujoco.MjModel) -> ModelFacts:
    def names(kind: mujoco.mjtObj, count: int) -> tuple[str, ...]:
        return tuple(mujoco.mj_id2name(model, kind, k) or f"{kind.name}_{k}" for k in range(count))

    joints = [j for j in range(model.njnt) if model.jnt_type[j] in ONE_DOF_JOINTS]
    ranges = np.where(
        model.jnt_limited[joints, None].astype(bool),
        model.jnt_range[joints],
        np.array([-np.inf, np.inf]),
    ).astype(np.float32)
    all_joints = names(mujoco.mjtObj.mjOBJ_JOINT, model.njnt)
    joint_index = {j: k for k, j in enumerate(joints)}
    driven = [  # the joint each actuator drives (index into joint_names), -1 for none
        joint_index.get(int(model.actuator_trnid[a, 0]), -1)
        if model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT
        else -1
        for a in range(model.nu)
    ]
    return ModelFacts(
        body_names=names(mujoco.mjtObj.mjOBJ_BODY, model.nbody),
        joint_names=tuple(all_joints[j] for j in joints),
        actuator_names=names(mujoco.mjtObj.mjOBJ_ACTUATOR, model.nu),
        joint_ranges=ranges.reshape(len(joints), 2),
        joint_qpos_adr=model.jnt_qposadr[joints].astype(np.int32),
        joint_qvel_adr=model.jnt_dofadr[joints].astype(np.int32),
        nq=model.nq,
        nv=model.nv,
        nu=model.nu,
        physics_dt=float(model.opt.timestep),
        geom_names=names(mujoco.mjtObj.mjOBJ_GEOM, model.ngeom),
        actuator_joint=np.array(driven, np.int32),
    )


def check_position_actuators(model: mujoco.MjModel, ids: np.ndarray, name: str) -> None:
    """kp and kd are those of position actuators (gain kp, affine bias -kp * q - kd * qdot)."""
    affine = int(mujoco.mjtBias.mjBIAS_AFFINE)
    for a in ids.tolist():
        gain, bias = model.actuator_gainprm[a], model.actuator_biasprm[a]
        if model.actuator_biastype[a] != affine or not np.isclose(bias[1], -gain[0]):
            actuator = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, a)
            raise ValueError(f"{name}: actuator {actuator!r} is not a position actuator")
