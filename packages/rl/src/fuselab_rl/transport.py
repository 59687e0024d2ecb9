"""Shared memory between two processes: a ring of fixed-layout records and a weights buffer.

numpy and multiprocessing only. Nothing assumes the CPU's memory ordering: memory changes hands
only through multiprocessing's primitives, which order it on every architecture.

- :class:`SlotRing`: records (of a numpy structured dtype) in one shared-memory segment, each
  slot held by one side at a time.
  A slot changes hands as its index travels through a pipe (one writer and one reader each):
  the producer fills a free slot and sends its index on the *filled* pipe; the consumer reads
  the slot and sends the index back on the *free* pipe. The kernel orders a pipe's write before
  the read that returns it, so a slot holds for its reader what its writer wrote. A full ring
  blocks the producer (nothing is dropped), an empty one the consumer.
- :class:`SharedWeights`: a float32 vector and its version under a ``multiprocessing.Lock`` (a
  POSIX semaphore, which synchronizes memory). The writer takes the lock; the reader only tries
  it, so it never waits: while the writer holds it, the reader keeps what it has.

The pipes and the lock (:class:`Links`) exist before the second process starts, which gets them
as a Process argument (the way multiprocessing shares a lock). The segments, made later, are
named in /dev/shm after :data:`SHM_PREFIX` and their creator's pid, so that
:func:`remove_orphaned_segments` can unlink those whose creator is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
from collections import deque
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

SHM_PREFIX = "fuselab_fastsac"


def shm_name(kind: str) -> str:
    """A segment name of ours: the prefix, this process's pid, a random token and the kind."""
    return f"{SHM_PREFIX}_{os.getpid()}_{secrets.token_hex(4)}_{kind}"


def remove_orphaned_segments() -> list[str]:
    """Unlink the segments of ours whose creator (the pid in the name) is gone: when both
    processes are killed together (SIGKILL to the process group, the OOM killer), nobody was
    left to release them. Returns their names."""
    orphans = []
    for name in sorted(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else []:
        creator = re.match(rf"{SHM_PREFIX}_(\d+)_", name)
        if creator and not os.path.exists(f"/proc/{creator.group(1)}"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{name}")
            orphans.append(name)
    return orphans


def _free_bytes() -> float:
    try:
        stat = os.statvfs("/dev/shm")
        return float(stat.f_bavail * stat.f_frsize)
    except OSError:
        return float("nan")


class Links:
    """The pipes of a :class:`SlotRing` and the lock of a :class:`SharedWeights`."""

    def __init__(self, context: Any):
        self.filled_reader, self.filled_writer = context.Pipe(duplex=False)
        self.free_reader, self.free_writer = context.Pipe(duplex=False)
        self.weights_lock = context.Lock()


class _Shared:
    """A named shared-memory segment (created with ``nbytes``, else attached) and views of it."""

    def __init__(self, name: str, nbytes: int | None):
        if nbytes is None:
            self.segment = shared_memory.SharedMemory(name=name)
            return
        try:
            self.segment = shared_memory.SharedMemory(name=name, create=True, size=max(nbytes, 1))
        except OSError as error:
            raise OSError(
                f"shared memory {name!r}: could not create {nbytes / 2**20:.1f} MiB "
                f"({_free_bytes() / 2**20:.0f} MiB free in /dev/shm): {error}; lower "
                "algo.collector.ring_slots or num_envs"
            ) from error

    def view(self, shape: Any, dtype: Any, offset: int) -> np.ndarray:
        return np.ndarray(shape, np.dtype(dtype), buffer=self.segment.buf, offset=offset)

    def drop_views(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Unmap the segment, the views into it first."""
        self.drop_views()
        try:
            self.segment.close()
        except BufferError:  # a view is still alive elsewhere; the mapping goes with the process
            log.debug("shared memory %s: views still exported", self.segment.name)

    def unlink(self) -> None:
        with contextlib.suppress(FileNotFoundError):  # the other process released it already
            self.segment.unlink()


@dataclass(frozen=True)
class RingSpec:
    """What the producer needs to attach to a ring (picklable)."""

    name: str
    record: np.dtype  # a structured dtype
    slots: int


class SlotRing(_Shared):
    """Records handed over by slot index (see the module doc). :meth:`create` makes the
    consumer's side; :meth:`attach` the producer's, which starts holding every slot."""

    def __init__(self, spec: RingSpec, links: Links, create: bool):
        self.nbytes = spec.slots * spec.record.itemsize
        super().__init__(spec.name, self.nbytes if create else None)
        self.spec, self.slots, self.links = spec, spec.slots, links
        records = self.view((spec.slots,), spec.record, 0)
        self.records = [records[slot, ...] for slot in range(spec.slots)]  # 0-d views
        self.held: deque[int] = deque([] if create else range(spec.slots))  # free or filled

    @classmethod
    def create(cls, record: np.dtype, slots: int, links: Links) -> SlotRing:
        """``slots`` records, fewer if they would take more than half of /dev/shm's free space."""
        if slots < 2:
            raise ValueError(f"ring_slots: expected >= 2, got {slots}")
        free = _free_bytes()
        if slots * record.itemsize > free / 2:  # never for nan
            fitted = max(2, int(free / 2 // record.itemsize))
            log.warning(
                "algo.collector.ring_slots: %d slots of %.1f MiB exceed half of /dev/shm's "
                "%.0f MiB free; using %d",
                *(slots, record.itemsize / 2**20, free / 2**20, fitted),
            )
            slots = fitted
        return cls(RingSpec(shm_name("ring"), record, slots), links, create=True)

    @classmethod
    def attach(cls, spec: RingSpec, links: Links) -> SlotRing:
        return cls(spec, links, create=False)

    def drop_views(self) -> None:
        self.records = []

    def claim(self, timeout_s: float = 0.0) -> np.ndarray | None:
        """(Producer) a free slot's record, waiting up to ``timeout_s`` for the consumer to free
        one; None while the ring is full."""
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


@dataclass(frozen=True)
class WeightsSpec:
    name: str
    numel: int


class SharedWeights(_Shared):
    """A float32 vector one process publishes and the other copies (see the module doc), with
    its version (0: none yet) and a tag the writer gives with it."""

    def __init__(self, spec: WeightsSpec, links: Links, create: bool):
        super().__init__(spec.name, 16 + 4 * spec.numel if create else None)
        self.spec, self.lock = spec, links.weights_lock
        self.header = self.view((2,), np.int64, 0)  # version, tag; a new segment holds zeros
        self.values = self.view((spec.numel,), np.float32, 16)

    @classmethod
    def create(cls, numel: int, links: Links) -> SharedWeights:
        return cls(WeightsSpec(shm_name("weights"), numel), links, create=True)

    @classmethod
    def attach(cls, spec: WeightsSpec, links: Links) -> SharedWeights:
        return cls(spec, links, create=False)

    def drop_views(self) -> None:
        self.header, self.values = np.empty(0, np.int64), np.empty(0, np.float32)

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
            newest, tag = (int(x) for x in self.header)
            if newest <= version:
                return None
            np.copyto(out, self.values)
            return newest, tag
        finally:
            self.lock.release()
