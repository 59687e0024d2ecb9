"""Export a trained policy (actor + its observation normalizer) to ONNX, and check it.

The file takes ``obs`` (batch, actor_obs_dim) float32 and returns ``actions`` (batch, action_dim):
the deterministic policy a robot runs. It is written with torch's exporter (``dynamo=True``, a
single self-contained file) and compared against torch with onnxruntime on random observations
before it replaces the previous export.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fuselab_rl.checkpoint import write_atomic_with

log = logging.getLogger(__name__)

INPUT_NAME, OUTPUT_NAME = "obs", "actions"
QUIET_LOGGERS = ("torch.onnx", "onnxscript", "onnx_ir")


def export_onnx(policy: nn.Module, obs_dim: int, path: Path, check: bool = True) -> Path:
    """Write ``policy`` to ``path`` atomically; with ``check``, compare it with onnxruntime and
    refuse a file that disagrees with torch by more than 1e-4."""
    started = time.perf_counter()
    policy = policy.eval()
    example = (torch.zeros(1, obs_dim),)

    def write(temp: Path) -> None:
        torch.onnx.export(
            policy,
            example,
            str(temp),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_shapes={INPUT_NAME: {0: torch.export.Dim("batch")}},
            dynamo=True,
            external_data=False,  # one file, weights inside
            verbose=False,
        )
        if check:
            error = onnx_max_error(temp, policy, obs_dim)
            if error > 1e-4:
                raise RuntimeError(f"ONNX export: output differs from torch by {error:.2e}")

    # The exporter's own loggers: torchvision ops it cannot register (a warning on every first
    # export) and an INFO line per optimization pass. Quiet while exporting.
    quiet = {name: logging.getLogger(name) for name in QUIET_LOGGERS}
    levels = {name: logger.level for name, logger in quiet.items()}
    for logger in quiet.values():
        logger.setLevel(logging.ERROR)
    try:
        write_atomic_with(path, write)
    finally:
        for name, logger in quiet.items():
            logger.setLevel(levels[name])
    log.info("export %s: %.1f ms", path.name, (time.perf_counter() - started) * 1e3)
    return path


def onnx_max_error(
    path: Path, policy: nn.Module, obs_dim: int, batch: int = 256, seed: int = 0
) -> float:
    """Largest |onnxruntime - torch| over random observations."""
    import onnxruntime

    obs = np.random.default_rng(seed).normal(0.0, 2.0, (batch, obs_dim)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (actions,) = session.run([OUTPUT_NAME], {INPUT_NAME: obs})
    with torch.no_grad():
        expected = policy(torch.from_numpy(obs)).numpy()
    return float(np.abs(actions - expected).max())
