"""fuselab-envs: the Unitree G1 model and fuselab's tasks (G1WalkFlat), configured by Hydra."""

from importlib.metadata import version

from fuselab_envs.registry import compose, list_tasks, make, register_task

__version__ = version("fuselab-envs")

__all__ = ["compose", "list_tasks", "make", "register_task"]
