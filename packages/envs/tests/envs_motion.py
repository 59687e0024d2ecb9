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
