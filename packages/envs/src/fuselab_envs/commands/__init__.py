"""The command generators tasks name in their ``commands:`` table (registered on import)."""

from fuselab_envs.commands.gait import GaitClock
from fuselab_envs.commands.motion import MotionCommand
from fuselab_envs.commands.velocity import UniformVelocityCommand

__all__ = ["GaitClock", "MotionCommand", "UniformVelocityCommand"]
