"""Contact terms of legged tasks, on the net contact forces of the robot's contact bodies.

The task's Entity lists its contact bodies feet first (``contact_force_w`` rows 0..num_feet-1),
then the bodies that should never touch the ground; the robot bodies of ``body_pos_w`` hold the
feet at rows ``first_foot_body``.. in the same order.
"""

from __future__ import annotations

import math

from fuselab_env_core.terms import observation, preamble, reward


@reward()
def feet_slip(
    i,
    contact_force_w,
    body_lin_vel_w,
    num_feet: int = 2,
    first_foot_body: int = 2,
    force_threshold_n: float = 1.0,
):
    """Squared horizontal speed of each foot that touches the ground (m^2/s^2, summed)."""
    total = 0.0
    for f in range(num_feet):
        if contact_force_w[i, f, 2] > force_threshold_n:
            b = first_foot_body + f
            total += body_lin_vel_w[i, b, 0] ** 2 + body_lin_vel_w[i, b, 1] ** 2
    return total


@reward()
def foot_clearance(
    i,
    body_pos_w,
    body_lin_vel_w,
    num_feet: int = 2,
    first_foot_body: int = 2,
    target_height_m: float = 0.1,
):
    """Swing feet should reach ``target_height_m``: height error weighted by horizontal speed."""
    total = 0.0
    for f in range(num_feet):
        b = first_foot_body + f
        speed = math.sqrt(body_lin_vel_w[i, b, 0] ** 2 + body_lin_vel_w[i, b, 1] ** 2)
        error = body_pos_w[i, b, 2] - target_height_m
        total += error * error * math.tanh(2.0 * speed)
    return total


@reward()
def undesired_contacts(i, contact_force_w, num_feet: int = 2, force_threshold_n: float = 1.0):
    """How many non-foot contact bodies touch something (knees, hands, ...)."""
    count = 0.0
    for c in range(num_feet, contact_force_w.shape[1]):
        squared = 0.0
        for k in range(3):
            squared += contact_force_w[i, c, k] ** 2
        if squared > force_threshold_n * force_threshold_n:
            count += 1.0
    return count


@observation(size=lambda shapes, params: params["num_feet"])
def feet_contact(i, out, col, contact_force_w, num_feet: int = 2, force_threshold_n: float = 1.0):
    """1.0 for each foot pressing on the ground, else 0.0."""
    for f in range(num_feet):
        out[i, col + f] = 1.0 if contact_force_w[i, f, 2] > force_threshold_n else 0.0


@preamble(
    outputs={
        "feet_air_time": lambda shapes, params: (params["num_feet"],),
        "feet_last_air_time": lambda shapes, params: (params["num_feet"],),
        "feet_first_contact": lambda shapes, params: (params["num_feet"],),
    }
)
def feet_air_timer(
    i,
    contact_force_w,
    dt,
    feet_air_time,
    feet_last_air_time,
    feet_first_contact,
    num_feet: int = 2,
    force_threshold_n: float = 1.0,
):
    """Per-foot timers that persist across steps (the workspace keeps them): time in the air,
    the length of the last flight, and whether the foot touched down this step. The env zeroes
    them on reset; its observation refresh after resets runs with dt = 0, so they tick once."""
    for f in range(num_feet):
        touching = contact_force_w[i, f, 2] > force_threshold_n
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
    threshold_s: float = 0.4,
    min_command: float = 0.1,
):
    """At each touchdown, how much longer than ``threshold_s`` the flight was; zero when the
    command asks to stand (legged_gym's air-time reward)."""
    if command[i, 0] * command[i, 0] + command[i, 1] * command[i, 1] < min_command * min_command:
        return 0.0
    total = 0.0
    for f in range(feet_first_contact.shape[1]):
        total += (feet_last_air_time[i, f] - threshold_s) * feet_first_contact[i, f]
    return total
