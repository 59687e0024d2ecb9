"""fuselab-rl: the runner, PPO, checkpoints and the fuselab-train / fuselab-play / fuselab-list
command line (see the package README)."""

from importlib.metadata import version

from fuselab_env_core.runtime import prefer_sleeping_omp_threads

# Before torch loads OpenMP: its threads must sleep, not spin, while the physics threads run.
prefer_sleeping_omp_threads()

__version__ = version("fuselab-rl")
