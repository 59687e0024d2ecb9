"""One thread budget for physics, the fused kernel and torch.

Training alternates three thread pools on the same cores: the physics backend's rollout threads,
Numba's threads running the fused kernel, and torch's intra-op pool (policy inference while
collecting, the update while learning). In PPO they take turns, so each may use the whole
budget; what must not happen is a pool larger than the cores, or idle threads that spin while
another pool works. ``threads`` is the one setting: every pool gets it, and OpenMP threads are
asked to sleep between parallel regions
(:func:`fuselab_env_core.runtime.prefer_sleeping_omp_threads`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ThreadBudget:
    """Threads each pool may use. ``total`` is the budget the user set (or every core)."""

    total: int
    physics: int  # the backend's rollout threads (MuJoCo CPU)
    kernel: int  # Numba threads of the fused kernel
    torch: int  # torch's intra-op threads

    @classmethod
    def resolve(cls, threads: int | None, processes: int = 1) -> ThreadBudget:
        """The budget of ``threads`` (None: this process's share of the cores when
        ``processes`` ranks share the machine)."""
        cores = available_cores()
        if processes > cores:
            raise ValueError(
                f"torchrun: {processes} ranks on a machine with {cores} cores; give "
                f"--nproc-per-node at most {cores}"
            )
        share = cores // processes
        if threads is None:
            threads = share
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= share:
            raise ValueError(
                f"threads: expected null (every core this process may use) or an int in "
                f"1..{share}, got {threads!r}"
            )
        return cls(total=threads, physics=threads, kernel=threads, torch=threads)

    def split(self, device_type: str, collector: int | None) -> tuple[int, int]:
        """(collector, learner) threads when a collector process and the learner run at once
        (async FastSAC): a CUDA learner needs one thread to feed the GPU, a CPU learner gets
        half; ``collector`` (``algo.collector.threads``) sets the collector's."""
        total = self.total
        if collector is not None:
            if not 1 <= collector <= total:
                raise ValueError(
                    f"algo.collector.threads: expected null or an int in 1..{total} (the thread "
                    f"budget), got {collector!r}"
                )
            return collector, max(1, total - collector)
        if total <= 1:
            return 1, 1
        return (total - 1, 1) if device_type == "cuda" else (total // 2, total - total // 2)

    def apply_torch(self) -> None:
        """Set torch's intra-op pool (process-wide); the env takes physics and kernel threads
        from the config's ``num_threads``."""
        import torch

        torch.set_num_threads(self.torch)

    def describe(self) -> str:
        return (
            f"{self.total} threads: physics {self.physics}, fused kernel {self.kernel}, "
            f"torch {self.torch} (pools take turns; OMP_WAIT_POLICY="
            f"{os.environ.get('OMP_WAIT_POLICY', 'unset')})"
        )


def available_cores() -> int:
    """Cores this process may run on (the affinity mask, not the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
