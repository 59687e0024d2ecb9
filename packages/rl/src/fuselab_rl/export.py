"""Export a trained policy (actor + its observation normalizer) to ONNX, and check it.

The file takes ``obs`` (batch, actor_obs_dim) float32 and returns ``actions`` (batch, action_dim):
the deterministic policy a robot runs; a motion-tracking export also takes ``time_step`` and
returns its clip's reference at that frame (:mod:`fuselab_rl.deploy`). Its metadata holds the
deploy document. It is written with torch's exporter (``dynamo=True``, a single self-contained
file) and compared against torch with onnxruntime on random observations before it replaces
the previous export.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fuselab_env_core.timing import elapsed_ms
from fuselab_rl.checkpoint import write_atomic_with
from fuselab_rl.deploy import REFERENCE_OUTPUTS, TIME_STEP_INPUT, TrackingPolicy, write_metadata

log = logging.getLogger(__name__)

INPUT_NAME, OUTPUT_NAME = "obs", "actions"
QUIET_LOGGERS = ("torch.onnx", "onnxscript", "onnx_ir")


def export_onnx(
    policy: nn.Module,
    obs_dim: int,
    path: Path,
    check: bool = True,
    metadata: dict[str, Any] | None = None,
    clip: dict[str, np.ndarray] | None = None,
) -> Path:
    """Write ``policy`` to ``path`` atomically, with the deploy document ``metadata`` (and a
    tracking task's ``clip`` in the graph); with ``check``, compare it with onnxruntime and
    refuse a file that disagrees with torch by more than 1e-4."""
    started = time.perf_counter()
    policy = policy.eval()
    module = policy if clip is None else TrackingPolicy(policy, clip).eval()
    batch = torch.export.Dim("batch")
    example: tuple[torch.Tensor, ...] = (torch.zeros(2, obs_dim),)
    inputs, outputs = [INPUT_NAME], [OUTPUT_NAME]
    shapes: dict[str, Any] = {INPUT_NAME: {0: batch}}
    if clip is not None:
        example = (*example, torch.zeros(2, dtype=torch.int64))
        inputs.append(TIME_STEP_INPUT)
        outputs += list(REFERENCE_OUTPUTS)
        shapes[TIME_STEP_INPUT] = {0: batch}

    def write(temp: Path) -> None:
        torch.onnx.export(
            module,
            example,
            str(temp),
            input_names=inputs,
            output_names=outputs,
            dynamic_shapes=shapes,
            dynamo=True,
            external_data=False,  # one file, weights inside
            verbose=False,
        )
        if metadata is not None:
            write_metadata(temp, metadata)
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
    log.info("export %s: %.1f ms", path.name, elapsed_ms(started))
    return path


def onnx_max_error(
    path: Path, policy: nn.Module, obs_dim: int, batch: int = 256, seed: int = 0
) -> float:
    """Largest |onnxruntime - torch| over random observations."""
    import onnxruntime

    obs = np.random.default_rng(seed).normal(0.0, 2.0, (batch, obs_dim)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {INPUT_NAME: obs}
    if TIME_STEP_INPUT in {i.name for i in session.get_inputs()}:
        feeds[TIME_STEP_INPUT] = np.zeros(batch, np.int64)
    (actions,) = session.run([OUTPUT_NAME], feeds)
    with torch.no_grad():
        expected = policy(torch.from_numpy(obs)).numpy()
    return float(np.abs(actions - expected).max())
