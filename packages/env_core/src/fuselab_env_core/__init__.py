"""fuselab-env-core: task terms compiled into one fused, parallel Numba kernel per plan.

Write terms with :func:`reward`, :func:`termination`, :func:`observation` and :func:`preamble`,
list them in a :class:`TaskTermsCfg` (or a plain dict), and build them with
:meth:`FusedTerms.build`. :class:`NumpyTerms` runs the same plan with NumPy, as an oracle.
"""

from importlib.metadata import version

from fuselab_env_core.config import (
    ObservationCfg,
    ObservationGroupCfg,
    RewardCfg,
    TaskTermsCfg,
    TermCfg,
    TerminationCfg,
)
from fuselab_env_core.numpy_runtime import NumpyTerms
from fuselab_env_core.plan import BufferSpec, Plan, PlanError, resolve_plan
from fuselab_env_core.plan_key import plan_key
from fuselab_env_core.ranges import (
    Fraction,
    Interval,
    LayerSizes,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    Range,
    Section,
    build_section,
)
from fuselab_env_core.runtime import FusedTerms, TermBuffers, prefer_sleeping_omp_threads
from fuselab_env_core.terms import (
    Bodies,
    Body,
    ContactBodies,
    observation,
    preamble,
    reward,
    termination,
)

# Before any Numba kernel (a backend's, the terms') starts OpenMP's threads: they must sleep,
# not spin, between kernels while the physics threads run (see prefer_sleeping_omp_threads).
prefer_sleeping_omp_threads()

__version__ = version("fuselab-env-core")

__all__ = [
    "Bodies",
    "Body",
    "BufferSpec",
    "ContactBodies",
    "Fraction",
    "FusedTerms",
    "Interval",
    "LayerSizes",
    "NonNegativeFloat",
    "NumpyTerms",
    "ObservationCfg",
    "ObservationGroupCfg",
    "Plan",
    "PlanError",
    "PositiveFloat",
    "PositiveInt",
    "Range",
    "RewardCfg",
    "Section",
    "TaskTermsCfg",
    "TermBuffers",
    "TermCfg",
    "TerminationCfg",
    "build_section",
    "observation",
    "plan_key",
    "preamble",
    "resolve_plan",
    "reward",
    "termination",
]
