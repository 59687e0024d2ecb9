"""How long a stage took, for the logs: every start-up stage of fuselab logs its milliseconds."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started``, a ``time.perf_counter()`` reading."""
    return (time.perf_counter() - started) * 1e3


@contextmanager
def timed(log: logging.Logger, stage: str, *args: object) -> Iterator[None]:
    """Log ``stage`` (a %-format of ``args``) with the block's milliseconds at INFO once the
    block has run: ``<stage>: 12.3 ms``. A block that raises logs nothing."""
    started = time.perf_counter()
    yield
    log.info(f"{stage}: %.1f ms", *args, elapsed_ms(started))
