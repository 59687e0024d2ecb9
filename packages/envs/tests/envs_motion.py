"""What the motion-tracking tests share."""

# Reference state initialization without noise: a reset puts the robot exactly on the clip.
STILL = [
    f"commands.motion.params.reset_{k}=0.0"
    for k in (
        "pos_xy_m",
        "pos_z_m",
        "roll_pitch_rad",
        "yaw_rad",
        "lin_vel_mps",
        "ang_vel_radps",
        "joint_pos_rad",
    )
]

# The clips as they are, without lead frames from and to the standing pose.
NO_LEAD = ["commands.motion.params.lead_in_s=0", "commands.motion.params.lead_out_s=0"]
