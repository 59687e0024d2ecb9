"""Compile a plan into its fused kernels (``score``, ``observe``), through an in-process and
an on-disk cache.

The pipeline, one logged step each: key -> classify (in-process / disk / miss) -> generate
-> compile or load. The disk cache is one directory per plan key under the cache root
(``FUSELAB_CACHE_DIR``, default ``~/.cache/fuselab``) holding the generated module; Numba's own
cache (``cache=True``) sits next to it in ``__pycache__`` or under ``NUMBA_CACHE_DIR``.

A corrupt or stale cached file is removed and rebuilt with a WARNING. Files are written
atomically (temp file + link), so processes building the same plan at once never see a
partial module; Numba writes its cache files atomically too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numba
from numba import types as nbtypes

from fuselab_env_core.codegen import (
    KERNEL_NAMES,
    OBSERVE_KERNEL,
    generate_kernel_source,
    kernel_args,
)
from fuselab_env_core.plan import Plan
from fuselab_env_core.plan_key import plan_key
from fuselab_env_core.timing import elapsed_ms

log = logging.getLogger(__name__)

CacheState = Literal["in-process", "disk", "miss"]


class FusedKernels(NamedTuple):
    """The two entry points of a plan's module (Numba dispatchers), see codegen."""

    score: Any
    observe: Any


_IN_PROCESS: dict[str, FusedKernels] = {}  # plan key -> compiled kernels


@dataclass
class BuildReport:
    """What a build did: which cache served it, whether Numba compiled, and step timings."""

    key: str
    cache: CacheState
    compiled: bool
    source_path: Path
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def total_ms(self) -> float:
        return sum(self.timings_ms.values())


def cache_root() -> Path:
    """Where compiled kernels are kept: ``$FUSELAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/fuselab``
    or ``~/.cache/fuselab`` (created when missing)."""
    configured = os.environ.get("FUSELAB_CACHE_DIR")
    if configured:
        root, name = Path(configured).expanduser(), "FUSELAB_CACHE_DIR"
    else:
        root, name = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"), "the cache"
        root = root / "fuselab"
    if root.exists() and not root.is_dir():
        raise ValueError(
            f"{name}: {str(root)!r} is a file; expected a directory for the kernel cache "
            "(created when missing)"
        )
    return root


def kernel_signature(plan: Plan, kernel: str) -> tuple:
    """Numba argument types of one of the plan's kernels, known before any buffer exists
    (``observe`` takes the env rows to observe first)."""
    shared = tuple(
        nbtypes.Array(numba.from_dtype(arg.dtype), arg.ndim, "C") for arg in kernel_args(plan)
    )
    return (nbtypes.Array(nbtypes.intp, 1, "C"), *shared) if kernel == OBSERVE_KERNEL else shared


def compile_plan(plan: Plan, timings: dict[str, float] | None = None):
    """Return the plan's compiled :class:`FusedKernels` and a :class:`BuildReport`."""
    timings = {} if timings is None else timings
    started = time.perf_counter()
    key = plan_key(plan)
    timings["key"] = elapsed_ms(started)
    directory = cache_root() / "kernels" / key
    source_path = directory / f"fused_{key}.py"

    if key in _IN_PROCESS:
        log.info("plan %s: in-process cache hit (key %.1f ms)", key, timings["key"])
        return _IN_PROCESS[key], BuildReport(key, "in-process", False, source_path, timings)

    started = time.perf_counter()
    source = generate_kernel_source(plan, key)
    timings["generate"] = elapsed_ms(started)
    log.info("generate: %.1f ms (%d lines)", timings["generate"], source.count("\n"))

    started = time.perf_counter()
    kernels, cache = _classify(source_path, source)
    timings["classify"] = elapsed_ms(started)
    if cache == "disk":
        log.info("plan %s: disk cache (%s), classify %.1f ms", key, directory, timings["classify"])
    else:
        log.info(
            "plan %s: cache miss, compiling a fused kernel of %d terms; the first compile "
            "takes a while (tens of seconds on few cores)",
            key,
            len(plan.terms()),
        )

    kernels, compiled = _compile_or_load(plan, kernels, source_path, source, cache, timings)
    if cache == "disk" and compiled:
        log.warning("plan %s: Numba's disk cache was stale; kernels recompiled", key)
        cache = "miss"
    _IN_PROCESS[key] = kernels
    return kernels, BuildReport(key, cache, compiled, source_path, timings)


# -- disk cache -----------------------------------------------------------------------------


def _classify(source_path: Path, source: str) -> tuple[FusedKernels, CacheState]:
    """Make sure the generated module on disk is ``source``; say whether Numba's cache of both
    kernels exists."""
    if source_path.exists():
        try:
            on_disk = source_path.read_text()
        except (OSError, UnicodeDecodeError):
            on_disk = None
        if on_disk != source:
            log.warning("corrupt or stale generated kernel %s: removed, rebuilding", source_path)
            _remove_kernel_files(source_path)
    _write_atomically(source_path, source)
    kernels = _import_kernels(source_path)
    indexed = all(any(_numba_cache_files(k, source_path, "*.nbi")) for k in kernels)
    return kernels, "disk" if indexed else "miss"


def _compile_or_load(
    plan: Plan, kernels: FusedKernels, source_path: Path, source: str, cache, timings
) -> tuple[FusedKernels, bool]:
    step = "load" if cache == "disk" else "compile"
    started = time.perf_counter()
    try:
        _compile(plan, kernels)
    except Exception as error:  # noqa: BLE001 - a broken cache must never crash a build
        if cache != "disk":
            raise
        log.warning(
            "corrupt Numba cache for %s (%s: %s): removed, recompiling",
            source_path.name,
            type(error).__name__,
            error,
        )
        _remove_kernel_files(source_path, kernels)
        _write_atomically(source_path, source)
        kernels = _import_kernels(source_path)
        step = "compile"
        _compile(plan, kernels)
    compiled = any(sum(k.stats.cache_misses.values()) > 0 for k in kernels)
    step = "compile" if compiled else step
    timings[step] = elapsed_ms(started)
    log.info("%s: %.1f ms", step, timings[step])
    return kernels, compiled


def _compile(plan: Plan, kernels: FusedKernels) -> None:
    for name, kernel in zip(KERNEL_NAMES, kernels, strict=True):
        kernel.compile(kernel_signature(plan, name))


def _import_kernels(source_path: Path) -> FusedKernels:
    name = f"fuselab_kernel_{source_path.stem}"
    spec = importlib.util.spec_from_file_location(name, source_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return FusedKernels(*(getattr(module, kernel) for kernel in KERNEL_NAMES))


def _numba_cache_files(kernel, source_path: Path, pattern: str):
    cache_dir = Path(kernel.stats.cache_path)
    return cache_dir.glob(f"{source_path.stem}.{kernel.py_func.__name__}-{pattern}")


def _remove_kernel_files(source_path: Path, kernels: FusedKernels | None = None) -> None:
    for kernel in kernels or ():
        for path in _numba_cache_files(kernel, source_path, "*"):
            path.unlink(missing_ok=True)
    source_path.unlink(missing_ok=True)


def _write_atomically(path: Path, text: str) -> None:
    """Create ``path`` with ``text`` unless it exists; readers never see a partial file."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):  # a concurrent winner's file stays
            os.link(tmp, path)  # atomic create-if-absent
    finally:
        os.unlink(tmp)
