"""fuselab-sim-backends: MuJoCo CPU, MuJoCo Warp and MotrixSim behind the SimBackend contract
(see the package README)."""

from importlib.metadata import version

__version__ = version("fuselab-sim-backends")
