"""Left-right symmetry: how observations and actions change when the robot is mirrored.

Mirroring is a reflection through the robot's sagittal (x-z) plane: y flips, left and right
swap. Each observation term declares how its values transform (``@observation(...,
mirror=...)``), one of :data:`MIRRORS`; the robot gives its joint mirror (each joint's mirror
image and sign). A group's mirror is then a column permutation and a sign per column,
``mirrored = sign * obs[:, perm]``, which a learner applies to whole batches (PPO's symmetry
augmentation).

* ``polar``: a vector, (x, y, z) -> (x, -y, z) (velocities, gravity, positions);
* ``axial``: an angular velocity, (x, y, z) -> (-x, y, -z);
* ``velocity_command``: (vx, vy, wz) -> (vx, -vy, -wz);
* ``joints``: blocks of one value per joint (positions, velocities, actions, a reference's
  joints), each permuted and signed by the joint mirror;
* ``rotation_columns``: the first two columns of a rotation matrix R, of M R M (M = diag(1,
  -1, 1));
* ``contact_pairs``: one value per body of the term's ``foot_contacts``, left and right
  swapped;
* ``left_right_halves``: the left side's values, then the right side's, the halves swapped;
* ``invariant``: unchanged.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from fuselab_env_core.plan import Const, ObservationGroup, TermCall

MIRRORS = (
    "polar",
    "axial",
    "velocity_command",
    "joints",
    "rotation_columns",
    "contact_pairs",
    "left_right_halves",
    "invariant",
)
Mirror = tuple[np.ndarray, np.ndarray]  # (permutation, sign) of columns


def mirror_names(names: Sequence[str]) -> np.ndarray:
    """The index of each name's mirror image: ``left_x`` <-> ``right_x``, others themselves."""
    index = {name: k for k, name in enumerate(names)}

    def image(name: str) -> str:
        for a, b in (("left_", "right_"), ("right_", "left_")):
            if name.startswith(a):
                return b + name[len(a) :]
        return name

    missing = [image(n) for n in names if image(n) not in index]
    if missing:
        raise ValueError(f"symmetry: no mirror image of {missing} among {list(names)}")
    return np.array([index[image(n)] for n in names], np.int64)


def joint_mirror_by_name(joint_names: Sequence[str]) -> Mirror:
    """The joint mirror of a humanoid named by the usual convention: ``left_*`` <-> ``right_*``,
    and a joint about x (``*roll*``) or z (``*yaw*``) turns the other way in the mirror image."""
    perm = mirror_names(joint_names)
    sign = np.array([-1.0 if ("roll" in n or "yaw" in n) else 1.0 for n in joint_names], np.float32)
    return perm, sign


def group_mirror(
    group: ObservationGroup,
    joints: Mirror,
    names: Mapping[str, Sequence[str]],
) -> Mirror:
    """The mirror of a group's output columns (history frames included), from each term's
    declared rule; ``joints`` is the robot's joint mirror, ``names`` the entity's name tables
    (``contact_body_names``) that body parameters resolve against."""
    perm, sign = [], []
    starts = group.output_columns()
    for call in group.terms:
        local_perm, local_sign = _term_mirror(call, joints, names)
        for frame in range(call.history):
            offset = starts[call.entry] + frame * call.size
            perm.append(offset + local_perm)
            sign.append(local_sign)
    return np.concatenate(perm).astype(np.int64), np.concatenate(sign).astype(np.float32)


def _term_mirror(call: TermCall, joints: Mirror, names: Mapping[str, Sequence[str]]) -> Mirror:
    rule, size = call.term.mirror, call.size
    if rule is None or rule not in MIRRORS:
        raise ValueError(
            f"{call.label}: term {call.term.name!r} declares no mirror (symmetry needs one of "
            f"{', '.join(MIRRORS)} on every observation term); got {rule!r}"
        )
    rules: dict[str, Callable[[], Mirror]] = {
        "polar": lambda: (np.arange(3), np.array([1.0, -1.0, 1.0])),
        "axial": lambda: (np.arange(3), np.array([-1.0, 1.0, -1.0])),
        "velocity_command": lambda: (np.arange(3), np.array([1.0, -1.0, -1.0])),
        "rotation_columns": lambda: (np.arange(6), np.array([1.0, -1.0, 1.0, -1.0, 1.0, -1.0])),
        "invariant": lambda: (np.arange(size), np.ones(size)),
        "joints": lambda: _blocks(joints, size, call.label),
        "contact_pairs": lambda: _contact_pairs(call, names),
        "left_right_halves": lambda: _halves(size, call.label),
    }
    perm, sign = rules[rule]()
    if len(perm) != size:
        raise ValueError(f"{call.label}: mirror {rule!r} covers {len(perm)} of {size} values")
    return np.asarray(perm, np.int64), np.asarray(sign, np.float32)


def _blocks(joints: Mirror, size: int, label: str) -> Mirror:
    perm, sign = joints
    count = len(perm)
    if size % count:
        raise ValueError(f"{label}: {size} values are not blocks of the robot's {count} joints")
    blocks = size // count
    return (
        np.concatenate([b * count + perm for b in range(blocks)]),
        np.tile(sign, blocks),
    )


def _halves(size: int, label: str) -> Mirror:
    if size % 2:
        raise ValueError(f"{label}: {size} values do not split into a left and a right half")
    half = size // 2
    return np.concatenate([np.arange(half, size), np.arange(half)]), np.ones(size)


def _contact_pairs(call: TermCall, names: Mapping[str, Sequence[str]]) -> Mirror:
    arguments = list(inspect.signature(call.term.py_func).parameters)[1:]  # after i
    index = arguments.index("foot_contacts") if "foot_contacts" in arguments else -1
    binding = call.args[index] if index >= 0 else None
    if not isinstance(binding, Const) or not isinstance(binding.value, tuple):
        raise ValueError(f"{call.label}: contact_pairs needs a foot_contacts parameter")
    table = names["contact_body_names"]
    feet = [table[row] for row in binding.value]
    return mirror_names(feet), np.ones(len(feet))
