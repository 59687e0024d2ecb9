"""Shared set-up of the fuselab-rl tests."""

# OpenMP (shared by torch and Numba) reads its wait policy once, when it loads: fuselab_rl asks
# for sleeping threads on import, and here that import comes before any test module's torch.
import fuselab_rl  # noqa: F401
