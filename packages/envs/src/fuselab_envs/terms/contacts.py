"""Contact terms of legged tasks, on the net contact forces of the robot's contact bodies.

Bodies are named in configuration: ``ContactBodies`` parameters are rows of ``contact_force_w``
(the entity's contact bodies), ``Bodies`` parameters rows of ``body_*_w`` (its bodies).
"""

from __future__ import annotations

import math

from fuselab_env_core.ranges import NonNegativeFloat
from fuselab_env_core.terms import (
    Bodies,
    ContactBodies,
    observation,
    preamble,
    reward,
)
from fuselab_envs.terms.velocity import command_speed


@reward()
def feet_slip(
    i,
    contact_force_w,
    body_lin_vel_w,
    foot_contacts: ContactBodies,
    foot_bodies: Bodies,
    force_threshold_n: NonNegativeFloat = 1.0,
):
    """Squared horizontal speed of each foot that touches the ground (m^2/s^2, summed); the
    feet named in the same order in ``foot_contacts`` and ``foot_bodies``."""
    total = 0.0
    for f in range(len(foot_contacts)):
        if contact_force_w[i, foot_contacts[f], 2] > force_threshold_n:
            b = foot_bodies[f]
            total += body_lin_vel_w[i, b, 0] ** 2 + body_lin_vel_w[i, b, 1] ** 2
    return total


@reward()
def foot_clearance(
    i, body_pos_w, body_lin_vel_w, foot_bodies: Bodies, target_height_m: NonNegativeFloat = 0.1
):
    """Swing feet should reach ``target_height_m``: height error weighted by horizontal speed."""
    total = 0.0
    for b in foot_bodies:
        speed = math.sqrt(body_lin_vel_w[i, b, 0] ** 2 + body_lin_vel_w[i, b, 1] ** 2)
        error = body_pos_w[i, b, 2] - target_height_m
        total += error * error * math.tanh(2.0 * speed)
    return total


@reward()
def undesired_contacts(
    i, contact_force_w, bodies: ContactBodies, force_threshold_n: NonNegativeFloat = 1.0
):
    """How many of ``bodies`` (knees, hands, ...) touch something."""
    count = 0.0
    for c in bodies:
        squared = 0.0
        for k in range(3):
            squared += contact_force_w[i, c, k] ** 2
        if squared > force_threshold_n * force_threshold_n:
            count += 1.0
    return count


@observation(size=lambda shapes, params: len(params["foot_contacts"]), mirror="contact_pairs")
def feet_contact(
    i,
    out,
    col,
    contact_force_w,
    foot_contacts: ContactBodies,
    force_threshold_n: NonNegativeFloat = 1.0,
):
    """1.0 for each foot pressing on the ground, else 0.0."""
    for f in range(len(foot_contacts)):
        pressing = contact_force_w[i, foot_contacts[f], 2] > force_threshold_n
        out[i, col + f] = 1.0 if pressing else 0.0


def _per_foot(shapes, params):
    return (len(params["foot_contacts"]),)


@preamble(
    outputs={
        "feet_air_time": _per_foot,
        "feet_last_air_time": _per_foot,
        "feet_first_contact": _per_foot,
    },
    reset={"feet_air_time": 0.0, "feet_last_air_time": 0.0, "feet_first_contact": 0.0},
)
def feet_air_timer(
    i,
    contact_force_w,
    dt,
    feet_air_time,
    feet_last_air_time,
    feet_first_contact,
    foot_contacts: ContactBodies,
    force_threshold_n: NonNegativeFloat = 1.0,
):
    """Per-foot timers that persist across steps (the workspace keeps them; a new episode
    starts them at 0): time in the air, the length of the last flight, and whether the foot
    touched down this step."""
    for f in range(len(foot_contacts)):
        touching = contact_force_w[i, foot_contacts[f], 2] > force_threshold_n
        air = feet_air_time[i, f]
        landed = touching and air > 0.0
        feet_first_contact[i, f] = 1.0 if landed else 0.0
        if landed:
            feet_last_air_time[i, f] = air + dt
        feet_air_time[i, f] = 0.0 if touching else air + dt


@reward()
def feet_air_time(
    i,
    feet_first_contact,
    feet_last_air_time,
    command,
    threshold_s: NonNegativeFloat = 0.4,
    min_command: NonNegativeFloat = 0.1,
    yaw_rate_weight: NonNegativeFloat = 0.0,
):
    """At each touchdown, how much longer than ``threshold_s`` the flight was; zero when the
    command asks to stand: its speed |v_xy| + ``yaw_rate_weight`` x |wz| is below
    ``min_command`` (0: legged_gym's air-time reward, a turn in place is standing; 1: mjlab's
    gate, a turn in place asks for steps too)."""
    if command_speed(command, i, yaw_rate_weight) < min_command:
        return 0.0
    total = 0.0
    for f in range(feet_first_contact.shape[1]):
        total += (feet_last_air_time[i, f] - threshold_s) * feet_first_contact[i, f]
    return total
