"""Observation noise drawn inside the fused ``observe`` kernel by a counter-based generator.

A noise value is a pure function of (stream key, draw, env row, column): SplitMix64's output
function (the mixer of Java's SplittableRandom; Steele, Lea and Flood, OOPSLA 2014) applied to
nested Weyl sequences: the draw's key from the stream key, the row's key from the draw's, the
value from the row's key and the column. So an env's noise never depends on which thread computes
it, on what other rows do, or on how many envs there are; the terminal and the regular
observation of a row in one step see the same noise; and no noise array is drawn or stored.

The noise is uniform (mjlab's and Isaac Lab's ``Unoise``) with the std a term configures: values
in [-sqrt(3) std, sqrt(3) std]. :func:`uniform_noise` is the NumPy twin, for the oracle runtime
and the tests; it computes the same values.
"""

from __future__ import annotations

import math

import numba
import numpy as np

GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's Weyl increment
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_SHIFTS = (np.uint64(30), np.uint64(27), np.uint64(31))
_BITS = np.uint64(40)  # a value keeps the top 24 bits of its 64 (float32's mantissa holds them)
_SCALE = 2.0 / 2.0**24
UNIFORM_STD_TO_HALF_WIDTH = math.sqrt(3.0)  # U(-a, a) has std a / sqrt(3)


def stream_key(seed: int) -> np.uint64:
    """The stream key of an env seeded with ``seed`` (its noise is independent of other seeds')."""
    return np.random.SeedSequence(seed).generate_state(1, np.uint64)[0]


@numba.njit(inline="always")
def mix64(z):
    z = (z ^ (z >> _SHIFTS[0])) * _MIX_1
    z = (z ^ (z >> _SHIFTS[1])) * _MIX_2
    return z ^ (z >> _SHIFTS[2])


@numba.njit(inline="always")
def draw_key(noise_key):
    """The key of the current draw; ``noise_key`` is (stream key, draw). The same for every
    row: a kernel computes it once, before its loop over rows."""
    return mix64(noise_key[0] + noise_key[1] * GOLDEN_GAMMA)


@numba.njit(inline="always")
def row_key(draw, row):
    """The key of env ``row``'s noise in the draw whose key is ``draw``."""
    return mix64(draw + np.uint64(row) * GOLDEN_GAMMA)


@numba.njit(inline="always")
def uniform_pm1(key, column):
    """Uniform in (-1, 1), symmetric about 0: value ``column`` of a row's stream."""
    bits = mix64(key + np.uint64(column) * GOLDEN_GAMMA) >> _BITS
    return (float(bits) + 0.5) * _SCALE - 1.0


def uniform_noise(noise_key: np.ndarray, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """NumPy twin of ``uniform_pm1(row_key(draw_key(noise_key), row), column)``: (rows,
    columns) float64, from the kernel's own mixer run on arrays (uint64 array arithmetic wraps
    silently, as the kernel's does)."""
    mix = mix64.py_func
    key = np.asarray(noise_key, np.uint64)
    draw = mix(key[:1] + key[1:2] * GOLDEN_GAMMA)
    keys = mix(draw + np.asarray(rows, np.uint64) * GOLDEN_GAMMA)
    bits = mix(keys[:, None] + np.asarray(columns, np.uint64)[None, :] * GOLDEN_GAMMA) >> _BITS
    return (bits.astype(np.float64) + 0.5) * _SCALE - 1.0
