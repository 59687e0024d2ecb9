"""How a run stops without losing work: stop signals wait for the save, a dead partner
process is named.

A terminal's Ctrl-C reaches every process of its group, and ``uv run`` forwards one more: a
run typically gets two SIGINTs a few milliseconds apart. A cluster scheduler sends SIGTERM.
While :class:`StopSignals` is active, the first SIGINT or SIGTERM only asks the run to stop
after the iteration it is in; the runner then saves (checkpoint, then ONNX) and reports. Any
further signal is logged and ignored, so nothing can cut a save short. (SIGKILL cannot be
caught; the atomic writes of :mod:`fuselab_rl.checkpoint` leave the previous files whole.)
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class PartnerFailed(RuntimeError):
    """A process the trainer relies on (FastSAC's collector) died. The trainer's own state is
    intact: the runner saves it, then reports this message (it names the process and how it
    ended)."""


class StopSignals:
    """Within ``with StopSignals() as stop:``, SIGINT and SIGTERM set ``stop.received`` (the
    first one's number) instead of interrupting. Outside the main thread, where Python cannot
    install handlers, it does nothing (signals keep their usual effect)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def _handle(self, number: int, frame: FrameType | None) -> None:
        name = signal.Signals(number).name
        if self.received is None:
            self.received = number
            log.warning("%s: stopping after this iteration, then saving", name)
        else:
            log.warning("%s: already stopping; the save finishes first", name)
