"""Shared memory between two processes: a ring of records and a weights buffer. numpy and
multiprocessing only; no assumption about the CPU's memory ordering, as memory changes hands only
through multiprocessing's primitives, which order it on every architecture:

- :class:`SlotRing`: records (a numpy structured dtype) in a shared-memory segment. A slot is
  held by one side at a time and changes hands as its index goes through a pipe (one writer, one
  reader): the producer fills a free slot and sends its index on the *filled* pipe, the consumer
  reads the slot and sends the index back on the *free* one. The kernel orders a pipe's write
  before the read that returns it. A full ring blocks the producer, an empty one the consumer.
- :class:`SharedWeights`: a float32 vector and its version under a ``multiprocessing.Lock`` (a
  POSIX semaphore, which synchronizes memory). The writer takes the lock; the reader only tries
  it, so it never waits: while the writer holds it, the reader keeps what it has.

The pipes and the lock (:class:`Links`) go to the other process as a Process argument. Segments
are named in /dev/shm after :data:`SHM_PREFIX` and an owner's pid.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
from collections import deque
from multiprocessing import shared_memory
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

SHM_PREFIX = "fuselab_fastsac"


def shm_name(kind: str, owner: int | None = None) -> str:
    """A segment name of ours: the prefix, the owner's pid (default: ours), a token, the kind."""
    return f"{SHM_PREFIX}_{owner or os.getpid()}_{secrets.token_hex(4)}_{kind}"


def remove_orphaned_segments() -> list[str]:
    """Unlink the segments of ours whose owner (the pid in the name) is gone (both processes were
    killed together: nobody was left to release them). Returns their names."""
    orphans = []
    for name in sorted(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else []:
        owner = re.match(rf"{SHM_PREFIX}_(\d+)_", name)
        if owner and not os.path.exists(f"/proc/{owner.group(1)}"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{name}")
            orphans.append(name)
    return orphans


def _free_mib() -> float:
    with contextlib.suppress(OSError):
        stat = os.statvfs("/dev/shm")
        return stat.f_bavail * stat.f_frsize / 2**20
    return float("nan")


class Links:
    """The pipes of a :class:`SlotRing` and the lock of a :class:`SharedWeights`."""

    def __init__(self, context: Any):
        self.filled_reader, self.filled_writer = context.Pipe(duplex=False)
        self.free_reader, self.free_writer = context.Pipe(duplex=False)
        self.weights_lock = context.Lock()


class _Shared:
    """A shared-memory segment, attached to by ``name`` or created (``kind`` of ``owner``)."""

    def __init__(self, name: str | None, kind: str, owner: int | None, nbytes: int):
        if name is not None:
            self.segment = shared_memory.SharedMemory(name)
            return
        name = shm_name(kind, owner)
        try:
            self.segment = shared_memory.SharedMemory(name, create=True, size=max(nbytes, 1))
        except OSError as error:
            raise OSError(
                f"shared memory {name!r}: could not create {nbytes / 2**20:.1f} MiB "
                f"({_free_mib():.0f} MiB free in /dev/shm): {error}; lower "
                "algo.collector.ring_slots or num_envs"
            ) from error

    @property
    def name(self) -> str:
        return self.segment.name

    def view(self, shape: Any, dtype: Any, offset: int = 0) -> np.ndarray:
        return np.ndarray(shape, dtype, buffer=self.segment.buf, offset=offset)

    def close(self) -> None:
        """Unmap the segment. The views into it must go first: so does every attribute."""
        self.__dict__ = {"segment": self.segment}
        with contextlib.suppress(BufferError):  # a view lives on: the process's end unmaps it
            self.segment.close()

    def unlink(self) -> None:
        with contextlib.suppress(FileNotFoundError):  # the other process released it already
            self.segment.unlink()


class SlotRing(_Shared):
    """Records handed over by slot index. Created, the producer's side, holding all ``slots`` (fewer
    if they would fill half of /dev/shm's free space); attached to by ``name``, the consumer's."""

    def __init__(
        self, record: np.dtype, slots: int, links: Links, *, owner: int = 0, name: str | None = None
    ):
        free_mib, mib = _free_mib(), record.itemsize / 2**20
        if name is None and slots * mib > free_mib / 2:  # never for nan
            fitted = max(2, int(free_mib / 2 // mib))
            message = "algo.collector.ring_slots: %d slots of %.1f MiB exceed half of /dev/shm's"
            log.warning(message + " %.0f MiB free; using %d", slots, mib, free_mib, fitted)
            slots = fitted
        super().__init__(name, "ring", owner, slots * record.itemsize)
        self.slots, self.links = slots, links
        records = self.view((slots,), record)
        self.records = [records[slot, ...] for slot in range(slots)]  # 0-d views, built once
        self.held: deque[int] = deque(range(slots) if name is None else [])  # free, or filled

    def claim(self, timeout_s: float = 0.0) -> np.ndarray | None:
        """(Producer) a free slot's record, waiting up to ``timeout_s``; None if none is."""
        if not self.held and self.links.free_reader.poll(timeout_s):
            self.held.append(self.links.free_reader.recv())
        return self.records[self.held[0]] if self.held else None

    def commit(self) -> None:
        """(Producer) hand the claimed slot, every field written, to the consumer."""
        self.links.filled_writer.send(self.held.popleft())

    def ready(self, timeout_s: float = 0.0) -> int:
        """(Consumer) filled records held, waiting up to ``timeout_s`` for one while none is."""
        reader = self.links.filled_reader
        if self.held or reader.poll(timeout_s):
            while reader.poll():
                self.held.append(reader.recv())
        return len(self.held)

    def record(self, index: int) -> np.ndarray:
        """(Consumer) the ``index``-th oldest filled record held; valid until released."""
        return self.records[self.held[index]]

    def release(self, count: int) -> None:
        """(Consumer) give the ``count`` oldest records back to the producer."""
        for _ in range(count):
            self.links.free_writer.send(self.held.popleft())


class SharedWeights(_Shared):
    """A float32 vector the writer publishes (with a version, 0 for none yet, and a tag) and the
    reader, which creates it, copies; the writer attaches to it by ``name``."""

    def __init__(self, numel: int, links: Links, *, owner: int = 0, name: str | None = None):
        super().__init__(name, "weights", owner, 16 + 4 * numel)
        self.lock = links.weights_lock
        self.header = self.view((2,), np.int64)  # version, tag; a new segment holds zeros
        self.values = self.view((numel,), np.float32, offset=16)

    def publish(self, values: np.ndarray, tag: int, timeout_s: float) -> bool:
        """Write ``values`` as the next version, tagged; False if the reader held the lock for
        ``timeout_s`` (one that died holding it holds it for ever: check it, then try again)."""
        if not self.lock.acquire(timeout=timeout_s):
            return False
        try:
            np.copyto(self.values, values, casting="same_kind")
            self.header[:] = self.header[0] + 1, tag
        finally:
            self.lock.release()
        return True

    def read_if_newer(self, version: int, out: np.ndarray) -> tuple[int, int] | None:
        """Copy the values into ``out`` if their version is above ``version`` and return
        (version, tag); None when there is nothing newer or the writer holds the lock."""
        if not self.lock.acquire(block=False):
            return None
        try:
            newest, tag = self.header.tolist()
            if newest <= version:
                return None
            np.copyto(out, self.values)
            return newest, tag
        finally:
            self.lock.release()
