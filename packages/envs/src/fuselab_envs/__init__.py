"""fuselab-envs: see the package README; the implementation lands with its issue."""

from importlib.metadata import version

__version__ = version("fuselab-envs")
