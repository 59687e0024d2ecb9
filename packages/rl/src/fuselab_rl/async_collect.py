"""Collection for FastSAC: where the trainer's env steps come from.

The trainer talks to one :class:`Collector` interface. Every env step (of every env) reaches it
as a transition record (:func:`transition_layout`), in order and numbered from 0; the two
implementations differ in who steps the env and when:

- :class:`InProcessCollector` (``algo.mode=sync``): the env in the learner's process, stepped
  when the trainer waits for a record, acting with the learner's own policy on its device.
- :class:`AsyncCollector` (``algo.mode=async``): a collector process (:func:`collector_main`)
  stepping the env while the learner learns.

Two shared-memory channels link the processes of async mode (both live in ``/dev/shm`` under
names that start with :data:`SHM_PREFIX`, the learner's pid and a random token):

- :class:`TransitionRing`: a single-producer single-consumer ring of fixed-size slots, each
  holding one record of a fixed layout (here: one env step of every env). The producer fills
  the slot at ``head % slots`` and then advances ``head``; the consumer reads the slot at
  ``tail % slots`` and then advances ``tail``. ``head - tail`` is the fill level; each index is
  written by one side only. **Full ring policy: the collector blocks** (nothing is dropped),
  polling with sleeps from 0.1 ms growing to 2 ms, and checking ten times a second that the
  learner is alive and has not asked it to stop.
- :class:`WeightChannel`: the learner publishes the acting policy (actor weights and
  observation-normalizer statistics, as one float32 vector) into three rotating buffers,
  each under a seqlock: a buffer's sequence counter is odd while it is being written; a
  reader copies the newest buffer between two reads of its counter and keeps the copy only
  if both reads are the same even value. Rotating buffers leave a reader two whole publishes
  to finish its copy, so a busy writer does not starve it. The collector looks for a newer
  version once per env step and never waits for the writer: when a copy was overlapped it
  keeps acting with the weights it has and tries again on the next step.

Both rely on aligned 8-byte loads and stores being atomic and on stores becoming visible in
program order, which holds on x86-64 (TSO); each index or counter has one writer.

:class:`AsyncCollector` is the learner's handle: it spawns :func:`collector_main` (``spawn``
context), receives the env's :class:`EnvSpec`, creates and owns the shared memory, and turns
a dead collector into :class:`CollectorFailed` naming its exit code or exception. The
collector stops by itself when the learner process disappears (and then unlinks the shared
memory it would otherwise leave behind).
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing as mp
import os
import re
import secrets
import signal
import sys
import time
import traceback
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from typing import Any, Protocol

import numpy as np
import torch

from fuselab_rl.stopping import STOP_SIGNALS, PartnerFailed

log = logging.getLogger(__name__)

SHM_PREFIX = "fuselab_fastsac"
_ALIGN = 64  # bytes: records and fields start on cache lines
_POLL_S = (0.0001, 0.002)  # sleep between polls of a full or empty ring: doubles up to the max
_LIVENESS_S = 0.1  # how often a waiting side checks the other process


class CollectorFailed(PartnerFailed):
    """The collector process died or raised; the message says which and why."""


class LearnerGone(RuntimeError):
    """(In the collector) the learner process is gone or asked the collector to stop."""


# -- shared memory ---------------------------------------------------------------------------------


def shm_name(kind: str) -> str:
    """A segment name of ours: the prefix, this process's pid, a random token and the kind."""
    return f"{SHM_PREFIX}_{os.getpid()}_{secrets.token_hex(4)}_{kind}"


def remove_orphaned_segments() -> list[str]:
    """Unlink the segments of ours whose learner (the pid in the name) is gone: when learner
    and collector are killed together (SIGKILL to the process group, the OOM killer), nobody
    was left to release them. Returns their names."""
    pattern = re.compile(rf"^{SHM_PREFIX}_(\d+)_")
    orphans = []
    for name in sorted(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else []:
        match = pattern.match(name)
        if match and not _pid_alive(int(match.group(1))):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{name}")
            orphans.append(name)
    return orphans


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _create_segment(name: str, nbytes: int) -> shared_memory.SharedMemory:
    try:
        return shared_memory.SharedMemory(name=name, create=True, size=max(nbytes, 1))
    except OSError as error:
        free = _shm_free_bytes()
        raise OSError(
            f"shared memory {name!r}: could not create {nbytes / 2**20:.1f} MiB "
            f"({free / 2**20:.0f} MiB free in /dev/shm): {error}; lower algo.collector.ring_slots "
            "or num_envs"
        ) from error


def _shm_free_bytes() -> float:
    try:
        stat = os.statvfs("/dev/shm")
        return stat.f_bavail * stat.f_frsize
    except OSError:
        return float("nan")


def fit_ring_slots(record_nbytes: int, slots: int) -> int:
    """``slots`` ring slots of ``record_nbytes``, fewer if they would take more than half of
    /dev/shm's free space."""
    free = _shm_free_bytes()
    if math.isfinite(free) and slots * record_nbytes > free / 2:
        fitted = max(2, int(free / 2 // record_nbytes))
        log.warning(
            "algo.collector.ring_slots: %d slots of %.1f MiB exceed half of /dev/shm's "
            "%.0f MiB free; using %d",
            slots,
            record_nbytes / 2**20,
            free / 2**20,
            fitted,
        )
        slots = fitted
    return slots


def _unlink(segment: shared_memory.SharedMemory) -> None:
    with contextlib.suppress(FileNotFoundError):  # the other process released it already
        segment.unlink()


def _close(segment: shared_memory.SharedMemory) -> None:
    try:
        segment.close()
    except BufferError:  # a numpy view is still alive somewhere; the mapping goes with the process
        log.debug("shared memory %s: views still exported, mapping left to the process", segment)


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


# -- transition ring -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordLayout:
    """Named fields of fixed shape and dtype; each starts on a cache line."""

    fields: tuple[tuple[str, tuple[int, ...], str], ...]  # (name, shape, numpy dtype string)

    @classmethod
    def of(cls, fields: Mapping[str, tuple[tuple[int, ...], Any]]) -> RecordLayout:
        return cls(tuple((n, tuple(s), np.dtype(d).str) for n, (s, d) in fields.items()))

    def offsets(self) -> dict[str, int]:
        offsets, offset = {}, 0
        for name, shape, dtype in self.fields:
            offsets[name] = offset
            offset = _align(offset + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
        return offsets

    @property
    def nbytes(self) -> int:
        name, shape, dtype = self.fields[-1]
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return _align(self.offsets()[name] + size)


@dataclass(frozen=True)
class RingSpec:
    """What a process needs to attach to a ring (picklable)."""

    name: str
    layout: RecordLayout
    slots: int


# header: int64 words; the producer's and the consumer's words sit on separate cache lines
_HEAD, _TAIL, _STOP = 0, 8, 16
_HEADER_BYTES = 3 * _ALIGN


class TransitionRing:
    """Single-producer single-consumer ring of records in shared memory (see the module doc)."""

    def __init__(self, spec: RingSpec, segment: shared_memory.SharedMemory):
        self.spec, self.slots, self._segment = spec, spec.slots, segment
        self._words = np.ndarray((_HEADER_BYTES // 8,), np.int64, buffer=segment.buf)
        stride = spec.layout.nbytes
        offsets = spec.layout.offsets()
        # views[slot][field]: built once, so the hot path only indexes
        self._views = [
            {
                name: np.ndarray(
                    shape,
                    np.dtype(dtype),
                    buffer=segment.buf,
                    offset=_HEADER_BYTES + slot * stride + offsets[name],
                )
                for name, shape, dtype in spec.layout.fields
            }
            for slot in range(spec.slots)
        ]

    @classmethod
    def create(cls, layout: RecordLayout, slots: int, name: str | None = None) -> TransitionRing:
        if slots < 2:
            raise ValueError(f"ring_slots: expected >= 2, got {slots}")
        spec = RingSpec(name or shm_name("ring"), layout, slots)
        segment = _create_segment(spec.name, _HEADER_BYTES + slots * layout.nbytes)
        ring = cls(spec, segment)
        ring._words[:] = 0
        return ring

    @classmethod
    def attach(cls, spec: RingSpec) -> TransitionRing:
        return cls(spec, shared_memory.SharedMemory(name=spec.name))

    @property
    def nbytes(self) -> int:
        return _HEADER_BYTES + self.slots * self.spec.layout.nbytes

    # producer ---------------------------------------------------------------------------------

    def try_claim(self) -> dict[str, np.ndarray] | None:
        """The next free slot's field views, or None when the ring is full."""
        head = int(self._words[_HEAD])
        if head - int(self._words[_TAIL]) >= self.slots:
            return None
        return self._views[head % self.slots]

    def claim(self, alive: Callable[[], bool]) -> tuple[dict[str, np.ndarray], float]:
        """Block until a slot is free; raise :class:`LearnerGone` if ``alive()`` turns false
        or a stop was requested. Returns the slot and the seconds spent waiting."""
        slot = self.try_claim()
        if slot is not None:
            return slot, 0.0
        started = checked = time.perf_counter()
        pause = _POLL_S[0]
        while slot is None:
            time.sleep(pause)
            pause = min(2 * pause, _POLL_S[1])
            now = time.perf_counter()
            if now - checked > _LIVENESS_S:
                checked = now
                if self.stop_requested:
                    raise LearnerGone("stop requested while the ring was full")
                if not alive():
                    raise LearnerGone("it vanished while the ring was full")
            slot = self.try_claim()
        return slot, time.perf_counter() - started

    def commit(self) -> None:
        """Publish the claimed slot (after every field was written)."""
        self._words[_HEAD] = self._words[_HEAD] + 1

    # consumer ---------------------------------------------------------------------------------

    def available(self) -> int:
        return int(self._words[_HEAD]) - int(self._words[_TAIL])

    def peek(self, offset: int = 0) -> dict[str, np.ndarray]:
        """Views of the record ``offset`` places after the oldest unread one (which must be
        available); valid until released."""
        return self._views[(int(self._words[_TAIL]) + offset) % self.slots]

    def release(self, count: int = 1) -> None:
        self._words[_TAIL] = self._words[_TAIL] + count

    @property
    def head(self) -> int:
        return int(self._words[_HEAD])

    @property
    def tail(self) -> int:
        return int(self._words[_TAIL])

    # control ----------------------------------------------------------------------------------

    def request_stop(self) -> None:
        self._words[_STOP] = 1

    @property
    def stop_requested(self) -> bool:
        return bool(self._words[_STOP])

    def close(self) -> None:
        self._views = []
        self._words = np.zeros(0, np.int64)
        _close(self._segment)

    def unlink(self) -> None:
        _unlink(self._segment)


# -- weight channel --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChannelSpec:
    name: str
    numel: int


_LATEST = 0  # header word: the newest complete version
_SEQ, _VERSION, _TAG = 0, 1, 2  # words of each buffer's own cache line
_BUFFERS = 3  # a reader copying the newest buffer has two whole publishes before it is reused


class WeightChannel:
    """One writer publishes float32 vectors under increasing versions; readers copy the newest
    one without waiting (seqlock over three rotating buffers, see the module doc)."""

    def __init__(self, spec: ChannelSpec, segment: shared_memory.SharedMemory):
        self.spec, self._segment = spec, segment
        words = (1 + _BUFFERS) * _ALIGN // 8
        self._words = np.ndarray((words,), np.int64, buffer=segment.buf)
        self._buffer_words = [
            self._words[(1 + b) * _ALIGN // 8 : (2 + b) * _ALIGN // 8] for b in range(_BUFFERS)
        ]
        stride = _align(4 * spec.numel)
        self._payloads = [
            np.ndarray(
                (spec.numel,),
                np.float32,
                buffer=segment.buf,
                offset=(1 + _BUFFERS) * _ALIGN + b * stride,
            )
            for b in range(_BUFFERS)
        ]

    @classmethod
    def create(cls, numel: int, name: str | None = None) -> WeightChannel:
        spec = ChannelSpec(name or shm_name("weights"), numel)
        nbytes = (1 + _BUFFERS) * _ALIGN + _BUFFERS * _align(4 * numel)
        channel = cls(spec, _create_segment(spec.name, nbytes))
        channel._words[:] = 0
        return channel

    @classmethod
    def attach(cls, spec: ChannelSpec) -> WeightChannel:
        return cls(spec, shared_memory.SharedMemory(name=spec.name))

    @property
    def version(self) -> int:
        """The newest complete version (0: nothing published yet)."""
        return int(self._words[_LATEST])

    def publish(self, values: np.ndarray, tag: int = 0) -> int:
        """Write ``values`` as the next version (``tag``: a number the reader gets with it,
        here the learner's update count). Single writer. Returns the new version."""
        version = int(self._words[_LATEST]) + 1
        words = self._buffer_words[version % _BUFFERS]
        seq = int(words[_SEQ])
        words[_SEQ] = seq + 1  # odd: a write is in progress
        np.copyto(self._payloads[version % _BUFFERS], values, casting="same_kind")
        words[_TAG] = tag
        words[_VERSION] = version
        words[_SEQ] = seq + 2
        self._words[_LATEST] = version
        return version

    def read_if_newer(
        self, last_version: int, out: np.ndarray, attempts: int = 3
    ) -> tuple[int, int] | None:
        """Copy the newest payload into ``out`` if its version is above ``last_version`` and
        return (version, tag); None when there is nothing newer or writes kept overlapping
        the copy (try again later)."""
        for _ in range(attempts):
            latest = int(self._words[_LATEST])
            if latest <= last_version:
                return None
            words = self._buffer_words[latest % _BUFFERS]
            before = int(words[_SEQ])
            if before & 1:  # the writer lapped the buffers and is rewriting this one
                continue
            version, tag = int(words[_VERSION]), int(words[_TAG])
            np.copyto(out, self._payloads[latest % _BUFFERS])
            if int(words[_SEQ]) == before and version > last_version:
                return version, tag
        return None

    def close(self) -> None:
        self._payloads, self._buffer_words = [], []
        self._words = np.zeros(0, np.int64)
        _close(self._segment)

    def unlink(self) -> None:
        _unlink(self._segment)


class PolicyPacker:
    """Flattens a module's floating-point parameters and buffers (in ``state_dict`` order)
    into one float32 vector and back."""

    def __init__(self, module: torch.nn.Module):
        self.tensors = [t for t in module.state_dict().values() if t.is_floating_point()]
        self.numel = sum(t.numel() for t in self.tensors)

    @torch.no_grad()
    def pack(self) -> np.ndarray:
        return torch.cat([t.reshape(-1).float() for t in self.tensors]).cpu().numpy()

    @torch.no_grad()
    def unpack(self, vector: np.ndarray) -> None:
        flat = torch.from_numpy(vector)
        offset = 0
        for tensor in self.tensors:
            tensor.copy_(flat[offset : offset + tensor.numel()].view_as(tensor))
            offset += tensor.numel()


# -- the env's shape and the transition record ---------------------------------------------------


@dataclass(frozen=True)
class EnvSpec:
    num_envs: int
    obs_dims: dict[str, int]  # observation group -> width
    action_dim: int
    reward_terms: tuple[str, ...]
    terminations: tuple[str, ...]
    step_dt: float

    @classmethod
    def of(cls, env: Any) -> EnvSpec:
        plan = env.terms.plan
        return cls(
            num_envs=int(env.num_envs),
            obs_dims={g: int(o.shape[1]) for g, o in env.terms.buffers.obs.items()},
            action_dim=int(env.action_dim),
            reward_terms=tuple(c.entry for c in plan.rewards),
            terminations=tuple(c.entry for c in plan.terminations),
            step_dt=float(env.step_dt),
        )


# record fields besides the observations; "episodes": (count, return sum, length sum) of the
# episodes that ended this step; "timing": (busy s, env.step s, blocked s, monotonic commit
# time), busy being policy + env.step + copies
def transition_layout(spec: EnvSpec) -> RecordLayout:
    n = spec.num_envs
    fields: dict[str, tuple[tuple[int, ...], Any]] = {"seq": ((), np.int64)}
    for group, dim in spec.obs_dims.items():
        fields[f"obs.{group}"] = ((n, dim), np.float32)
        fields[f"next_obs.{group}"] = ((n, dim), np.float32)
    fields |= {
        "actions": ((n, spec.action_dim), np.float32),
        "reward": ((n,), np.float32),
        "terminated": ((n,), np.bool_),
        "truncated": ((n,), np.bool_),
        "episodes": ((3,), np.float64),
        "reward_terms": ((len(spec.reward_terms),), np.float64),
        "terminations": ((len(spec.terminations),), np.float64),
        "timing": ((4,), np.float64),
        "policy_updates": ((), np.int64),
    }
    return RecordLayout.of(fields)


def write_step(record: Mapping[str, np.ndarray], result: Any) -> None:
    """Fill a record's post-step fields from an env StepResult: next observations (the
    terminal observation for rows that reset), reward, done flags and step statistics."""
    info = result.info
    reset = info["reset_envs"]
    for group, obs in result.obs.items():
        out = record[f"next_obs.{group}"]
        np.copyto(out, obs)
        if reset.size:
            out[reset] = info["terminal_obs"][group][reset]
    np.copyto(record["reward"], result.reward)
    np.copyto(record["terminated"], result.terminated)
    np.copyto(record["truncated"], result.truncated)
    episodes = record["episodes"]
    episodes[0] = reset.size
    episodes[1] = info["episode_return"] * reset.size if reset.size else 0.0
    episodes[2] = info["episode_length"] * reset.size if reset.size else 0.0
    record["reward_terms"][:] = list(info["reward_terms"].values())
    record["terminations"][:] = list(info["terminations"].values())


def uniform_actions(rng: np.random.Generator, scratch: np.ndarray, out: np.ndarray) -> None:
    """``out[:] = rng.uniform(-1, 1, out.shape)``, the same numbers, without allocating:
    ``scratch`` is a float64 array of ``out``'s shape."""
    rng.random(out=scratch)
    scratch *= 2.0  # uniform's low + (high - low) * u, in the same float64 steps
    scratch -= 1.0
    np.copyto(out, scratch, casting="same_kind")


# -- the Collector interface -----------------------------------------------------------------------


class ActingLearner(Protocol):
    """What a collector needs of the learner (:class:`fuselab_rl.fastsac.FastSAC`)."""

    @property
    def policy(self) -> torch.nn.Module: ...  # acts with ``explore(obs)``; the learner's device

    @property
    def policy_builder(self) -> Callable[[], torch.nn.Module]: ...  # picklable: a fresh copy

    @property
    def updates(self) -> int: ...  # the update count: the policy version stamped on records


class Collector(Protocol):
    """Where the trainer's env steps come from: transition records, in order, numbered by
    their ``seq`` field from 0; a record stays readable from :meth:`peek` until released."""

    spec: EnvSpec
    free_running: bool  # steps the env on its own (its own process), not only when waited for

    def start(self, learner: ActingLearner, random_steps: int) -> None:
        """Begin collecting with the learner's policy. The first ``random_steps`` env steps
        act uniformly at random while that policy is still the untrained one."""
        ...

    def publish(self) -> None:
        """The learner's policy changed (updates, or a loaded state): act with it from now on."""
        ...

    def check(self) -> None:
        """Raise :class:`CollectorFailed` if collection failed."""
        ...

    def available(self) -> int: ...

    def peek(self, offset: int = 0) -> dict[str, np.ndarray]: ...

    def release(self, count: int = 1) -> None: ...

    def wait_for_records(self, count: int = 1) -> int:
        """Block until ``count`` records are available; returns how many are."""
        ...

    def iteration_limits(
        self, steps_per_iteration: int, updates_per_iteration: int
    ) -> tuple[float, float]:
        """(records, updates) after which a training iteration ends, whichever comes first."""
        ...

    def metrics(self) -> dict[str, float]:
        """Collection metrics since the last call."""
        ...

    def close(self) -> None: ...


class InProcessCollector:
    """The :class:`Collector` of sync mode: the env in the learner's process, stepped when the
    trainer waits for a record (one record, refilled once released), acting with the
    learner's own policy on its device, so there is never a copy to publish."""

    free_running = False

    def __init__(self, cfg: Any, *, seed: int):
        from fuselab_envs.registry import make_env

        started = time.perf_counter()
        self.env = make_env(cfg)
        self.spec = EnvSpec.of(self.env)
        self._rng = np.random.default_rng(seed)
        self._record = {
            name: np.zeros(shape, dtype)
            for name, shape, dtype in transition_layout(self.spec).fields
        }
        self._actions = torch.from_numpy(self._record["actions"])  # the policy writes here
        self._random_actions = np.empty(self._actions.shape, np.float64)
        self._learner: ActingLearner | None = None
        self._policy: Any = None  # the learner's, with explore(obs)
        self._device = torch.device("cpu")
        self._obs: Mapping[str, np.ndarray] = {}
        self._random_steps_left = 0
        self._steps = 0
        self._ready = False  # the record holds a step not yet released
        self._closed = False
        log.info(
            "in-process collector: env %s with %d envs (%.1f ms)",
            cfg.task_name,
            self.spec.num_envs,
            (time.perf_counter() - started) * 1e3,
        )

    def start(self, learner: ActingLearner, random_steps: int) -> None:
        self._learner, self._policy = learner, learner.policy
        self._device = next(learner.policy.parameters()).device
        self._obs = self.env.reset_all()
        self._random_steps_left = random_steps

    def publish(self) -> None:
        """Nothing to copy (the policy is the learner's own); a published policy ends the
        random warm-up, so a loaded one acts from the next step."""
        self._random_steps_left = 0

    def check(self) -> None:
        """Nothing runs between the trainer's calls, so nothing can have failed there."""

    def available(self) -> int:
        return int(self._ready)

    def peek(self, offset: int = 0) -> dict[str, np.ndarray]:
        if not self._ready or offset:
            raise IndexError(f"in-process collector: no record at offset {offset}")
        return self._record

    def release(self, count: int = 1) -> None:
        if count != int(self._ready):
            raise IndexError(f"in-process collector: {count} records to release, holds one")
        self._ready = False

    def wait_for_records(self, count: int = 1) -> int:
        """Step the env (if the record was released): one record, in this process."""
        if count != 1:
            raise ValueError(f"in-process collector: holds one record, asked for {count}")
        if not self._ready:
            self._step()
        return 1

    def iteration_limits(
        self, steps_per_iteration: int, updates_per_iteration: int
    ) -> tuple[float, float]:
        """It steps only when waited for: an iteration is ``steps_per_iteration`` env steps
        and every update they earn."""
        return float(steps_per_iteration), math.inf

    def metrics(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        """Stop the env's backend threads (idempotent)."""
        if self._closed:
            return
        self._closed = True
        backend_close = getattr(self.env.backend, "close", None)
        if backend_close is not None:
            backend_close()

    def _step(self) -> None:
        assert self._learner is not None, "in-process collector: start() first"
        started = time.perf_counter()
        record = self._record
        for group in self.spec.obs_dims:  # the env's buffers change on step: the record is the copy
            np.copyto(record[f"obs.{group}"], self._obs[group])
        if self._random_steps_left > 0:
            self._random_steps_left -= 1
            uniform_actions(self._rng, self._random_actions, record["actions"])
        else:
            with torch.inference_mode():
                obs = torch.from_numpy(record["obs.actor"]).to(self._device)
                self._actions.copy_(self._policy.explore(obs))
        env_started = time.perf_counter()
        result = self.env.step(record["actions"])
        env_s = time.perf_counter() - env_started
        write_step(record, result)
        self._obs = result.obs
        record["seq"][...] = self._steps
        record["policy_updates"][...] = self._learner.updates  # acts with the learner's own
        timing = record["timing"]
        timing[0] = time.perf_counter() - started
        timing[1] = env_s
        timing[2] = 0.0  # never blocked
        timing[3] = time.monotonic()
        self._steps += 1
        self._ready = True


# -- the collector process -------------------------------------------------------------------------


@dataclass(frozen=True)
class CollectorPlan:
    """What the learner sends once the shared memory exists."""

    ring: RingSpec
    weights: ChannelSpec
    policy_builder: Callable[[], torch.nn.Module]  # picklable; module with .explore(obs)
    random_steps: int  # first env steps (of all envs) with uniform random actions, as long
    # as the published policy is untrained (its tag, the learner's update count, is 0)


def collector_main(
    conn: Connection,
    cfg: dict,
    num_threads: int,
    seed: int,
    logs: LogSetup,
    spawned_at: float,
) -> None:
    """The collector process: build the env, report its spec, then step it forever, writing
    one record per env step into the ring, until the learner asks it to stop or vanishes."""
    # Ctrl-C and a scheduler's SIGTERM reach the whole process group: the learner handles
    # them (saves, then stops us)
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked while it was spawned
    logs.apply()
    log.info(
        "collector process %d: up %.0f ms after spawn (interpreter and imports)",
        os.getpid(),
        (time.monotonic() - spawned_at) * 1e3,
    )
    parent = mp.parent_process()
    alive = parent.is_alive if parent is not None else (lambda: True)
    attached: list[TransitionRing | WeightChannel] = []
    try:
        _run_collector(conn, cfg, num_threads, seed, alive, attached)
    except LearnerGone as reason:
        if not alive():
            log.error("collector: the learner process is gone (%s); stopping", reason)
            for channel in attached:  # nobody else is left to release them
                channel.unlink()
            sys.exit(3)
        log.info("collector: stopped by the learner")
    except BaseException as error:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        log.error("collector failed:\n%s", text)
        with contextlib.suppress(OSError, ValueError):  # the learner may be gone already
            conn.send(("error", f"{type(error).__name__}: {error}\n{text}"))
        sys.exit(1)
    finally:
        for channel in attached:
            channel.close()
        conn.close()


def _run_collector(
    conn: Connection,
    cfg: dict,
    num_threads: int,
    seed: int,
    alive: Callable[[], bool],
    attached: list[TransitionRing | WeightChannel],
) -> None:
    from omegaconf import OmegaConf

    from fuselab_envs.registry import make_env

    started = time.perf_counter()
    torch.set_num_threads(num_threads)
    torch.manual_seed(seed)
    env_cfg = OmegaConf.create(cfg)
    env_cfg.num_threads = num_threads
    env = make_env(env_cfg)
    spec = EnvSpec.of(env)
    log.info(
        "collector: env %s on %s, %d envs, %d threads (%.1f ms)",
        env_cfg.task_name,
        env_cfg.backend,
        spec.num_envs,
        num_threads,
        (time.perf_counter() - started) * 1e3,
    )
    conn.send(("spec", spec))
    plan = _receive_plan(conn, alive)
    started = time.perf_counter()
    ring = TransitionRing.attach(plan.ring)
    attached.append(ring)
    weights = WeightChannel.attach(plan.weights)
    attached.append(weights)
    policy = plan.policy_builder()
    policy.eval()
    packer = PolicyPacker(policy)
    vector = np.empty(packer.numel, np.float32)
    log.info(
        "collector: attached ring (%d slots, %.1f MiB) and weights (%d floats) (%.1f ms)",
        ring.slots,
        ring.nbytes / 2**20,
        weights.spec.numel,
        (time.perf_counter() - started) * 1e3,
    )
    _collect(env, spec, ring, weights, policy, packer, vector, plan.random_steps, seed, alive)


def _receive_plan(conn: Connection, alive: Callable[[], bool]) -> CollectorPlan:
    while not conn.poll(_LIVENESS_S):
        if not alive():
            raise LearnerGone("it vanished before sending the plan")
    message = conn.recv()
    if message[0] == "stop":
        raise LearnerGone("learner stopped before sending the plan")
    return message[1]


def _collect(
    env: Any,
    spec: EnvSpec,
    ring: TransitionRing,
    weights: WeightChannel,
    policy: Any,
    packer: PolicyPacker,
    vector: np.ndarray,
    random_steps: int,
    seed: int,
    alive: Callable[[], bool],
) -> None:
    rng = np.random.default_rng(seed)
    random_actions = np.empty((spec.num_envs, spec.action_dim), np.float64)
    obs = env.reset_all()
    version, policy_updates, step = -1, 0, 0
    groups = tuple(spec.obs_dims)
    checked = time.perf_counter()
    while True:
        record, blocked_s = ring.claim(alive)
        started = time.perf_counter()
        if started - checked > _LIVENESS_S:
            checked = started
            if ring.stop_requested or not alive():
                raise LearnerGone("stop requested" if ring.stop_requested else "it vanished")
        newer = weights.read_if_newer(version, vector)
        if newer is not None:
            packer.unpack(vector)
            version, policy_updates = newer
        for group in groups:  # the env's buffers change on step: the record is the copy
            np.copyto(record[f"obs.{group}"], obs[group])
        if step < random_steps and policy_updates == 0:  # an untrained policy: explore widely
            uniform_actions(rng, random_actions, record["actions"])
        else:
            with torch.inference_mode():
                actions = policy.explore(torch.from_numpy(record["obs.actor"])).numpy()
            np.copyto(record["actions"], actions)
        env_started = time.perf_counter()
        result = env.step(record["actions"])
        env_s = time.perf_counter() - env_started
        write_step(record, result)
        obs = result.obs
        record["seq"][...] = step
        record["policy_updates"][...] = policy_updates
        timing = record["timing"]
        timing[0] = time.perf_counter() - started
        timing[1] = env_s
        timing[2] = blocked_s
        timing[3] = time.monotonic()
        ring.commit()
        step += 1


@dataclass(frozen=True)
class LogSetup:
    """The learner's console logging, for the collector to copy (spawned processes start
    without handlers): level, and the format with the collector's pid marked in it."""

    level: int
    format: str = "%(asctime)s.%(msecs)03d %(levelname).1s %(name)s: %(message)s"
    datefmt: str | None = "%H:%M:%S"

    @classmethod
    def of_this_process(cls) -> LogSetup:
        level = logging.getLogger("fuselab_rl").getEffectiveLevel()
        formatter = next((h.formatter for h in logging.getLogger().handlers if h.formatter), None)
        fmt = getattr(formatter, "_fmt", None)  # logging keeps a formatter's format here
        if formatter is None or not isinstance(fmt, str):
            return cls(level)
        return cls(level, fmt, formatter.datefmt)

    def apply(self) -> None:
        marker = "[collector %(process)d] "
        fmt = (
            self.format.replace("%(name)s", marker + "%(name)s", 1)
            if "%(name)s" in self.format
            else marker + self.format
        )
        logging.basicConfig(level=self.level, format=fmt, datefmt=self.datefmt, force=True)


# -- the learner's handle --------------------------------------------------------------------------


class AsyncCollector:
    """The :class:`Collector` of async mode: spawns and supervises the collector process and
    owns the shared memory. ``ring_slots``: env steps in flight (fewer if /dev/shm is short)."""

    free_running = True

    def __init__(
        self,
        cfg: dict,
        *,
        num_threads: int,
        seed: int,
        ring_slots: int = 64,
        start_timeout_s: float = 300.0,
    ):
        started = time.perf_counter()
        context = mp.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self.ring: TransitionRing | None = None
        self.weights: WeightChannel | None = None
        self._ring_slots = ring_slots
        self._learner: ActingLearner | None = None
        self._packer: PolicyPacker | None = None
        self._wait_s = 0.0  # the learner's waits for records since metrics()
        self._closed = False
        self._error: str | None = None  # the failure, once known
        self._child_error: str | None = None  # the exception text the collector sent
        self.process = context.Process(
            target=collector_main,
            args=(
                child_conn,
                cfg,
                num_threads,
                seed,
                LogSetup.of_this_process(),
                time.monotonic(),
            ),
            name="fuselab-collector",
            daemon=True,
        )
        # The child inherits a signal mask: with the stop signals blocked it cannot die of a
        # Ctrl-C before collector_main ignores them (the learner gets its own copy meanwhile).
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self.process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        child_conn.close()
        self._channels: list[TransitionRing | WeightChannel] = []  # released with the process
        self._finalizer = weakref.finalize(self, _release, self.process, self._channels)
        log.info(
            "collector process %d spawned (%.1f ms)",
            self.process.pid,
            (time.perf_counter() - started) * 1e3,
        )
        self.spec = self._wait_for_spec(start_timeout_s)

    def _wait_for_spec(self, timeout_s: float) -> EnvSpec:
        started = time.perf_counter()
        while not self._conn.poll(_LIVENESS_S):
            self.check()
            if time.perf_counter() - started > timeout_s:
                self.close()
                raise CollectorFailed(
                    f"collector process (pid {self.process.pid}) did not report its env within "
                    f"{timeout_s:.0f} s"
                )
        message = self._receive()
        if message is None or message[0] != "spec":
            self.check(wait_s=10.0)
            self.close()
            raise CollectorFailed(f"collector process: unexpected start-up message {message!r}")
        log.info(
            "collector env ready: %s (%.1f ms after spawn)",
            message[1],
            (time.perf_counter() - started) * 1e3,
        )
        return message[1]

    def start(self, learner: ActingLearner, random_steps: int) -> None:
        """Create the ring and the weight channel, let the collector run and publish the
        learner's policy as the first version."""
        started = time.perf_counter()
        orphans = remove_orphaned_segments()
        if orphans:
            log.warning("/dev/shm: removed %s (left by killed FastSAC runs)", orphans)
        self._learner = learner
        self._packer = PolicyPacker(learner.policy)
        weights_numel = self._packer.numel
        layout = transition_layout(self.spec)
        ring_slots = fit_ring_slots(layout.nbytes, self._ring_slots)
        self.ring = TransitionRing.create(layout, ring_slots)
        self._channels.append(self.ring)
        self.weights = WeightChannel.create(weights_numel)
        self._channels.append(self.weights)
        plan = CollectorPlan(
            self.ring.spec, self.weights.spec, learner.policy_builder, random_steps
        )
        try:
            self._conn.send(("plan", plan))
        except OSError:  # the collector is gone: say why
            self.check(wait_s=5.0)
            raise
        log.info(
            "shared memory: ring %s (%d slots x %.2f MiB), weights %s (%.2f MiB) (%.1f ms)",
            self.ring.spec.name,
            ring_slots,
            self.ring.spec.layout.nbytes / 2**20,
            self.weights.spec.name,
            4 * weights_numel / 2**20,
            (time.perf_counter() - started) * 1e3,
        )
        self.publish()

    def publish(self) -> None:
        """Copy the learner's policy into the weight channel, tagged with its update count (the
        collector acts with it from its next env step; tag 0 keeps its random warm-up)."""
        assert self.weights is not None and self._packer and self._learner is not None
        self.weights.publish(self._packer.pack(), tag=self._learner.updates)

    def available(self) -> int:
        assert self.ring is not None
        return self.ring.available()

    def peek(self, offset: int = 0) -> dict[str, np.ndarray]:
        assert self.ring is not None
        return self.ring.peek(offset)

    def release(self, count: int = 1) -> None:
        assert self.ring is not None
        self.ring.release(count)

    def iteration_limits(
        self, steps_per_iteration: int, updates_per_iteration: int
    ) -> tuple[float, float]:
        """It runs on its own: an iteration is ``updates_per_iteration`` updates, on whatever
        it delivered meanwhile."""
        return math.inf, float(updates_per_iteration)

    def metrics(self) -> dict[str, float]:
        """The learner's waits for records since the last call, and how full the ring is."""
        assert self.ring is not None
        out = {
            "Perf/learn_wait_s": self._wait_s,
            "Perf/ring_fill": self.ring.available() / self.ring.slots,
        }
        self._wait_s = 0.0
        return out

    def _receive(self) -> Any:
        """The next message from the collector, or None; an error report is kept for
        :meth:`check` instead of being returned."""
        try:
            message = self._conn.recv() if self._conn.poll() else None
        except (EOFError, OSError):
            return None
        if message is not None and message[0] == "error":
            self._child_error = message[1].strip()
            return None
        return message

    def check(self, wait_s: float = 0.0) -> None:
        """Raise :class:`CollectorFailed` (after releasing everything) if the collector died."""
        if self._error is not None:
            raise CollectorFailed(self._error)
        if wait_s:
            self.process.join(wait_s)
        if self.process.is_alive():
            return
        code = self.process.exitcode
        reason = f"exit code {code}"
        if code is not None and code < 0:
            reason = f"killed by {signal.Signals(-code).name} (exit code {code})"
        self._receive()
        if self._child_error is not None:
            reason += f": {self._child_error}"
        self._error = f"collector process (pid {self.process.pid}) failed: {reason}"
        log.error("%s", self._error)
        self.close()
        raise CollectorFailed(self._error)

    def wait_for_records(self, count: int = 1) -> int:
        """Block until ``count`` records are available (checking that the collector lives)."""
        assert self.ring is not None
        started = checked = time.perf_counter()
        available = self.ring.available()
        pause = _POLL_S[0]
        while available < count:
            time.sleep(pause)
            pause = min(2 * pause, _POLL_S[1])
            now = time.perf_counter()
            if now - checked > _LIVENESS_S:
                checked = now
                self.check()
            available = self.ring.available()
        self._wait_s += time.perf_counter() - started
        return available

    def close(self) -> None:
        """Stop the collector (asking first, then terminating) and release the shared memory."""
        if self._closed:
            return
        self._closed = True
        if self.ring is not None:
            self.ring.request_stop()
        else:
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(("stop", None))
        self._finalizer()  # joins or kills the process, then closes and unlinks the memory
        self._conn.close()
        log.info(
            "collector process %d stopped (exit code %s)", self.process.pid, self.process.exitcode
        )


def _release(process: Any, channels: list[Any], timeout_s: float = 5.0) -> None:
    if process.is_alive():
        for channel in channels:
            if isinstance(channel, TransitionRing):
                channel.request_stop()
        process.join(timeout_s)
    if process.is_alive():  # it ignores SIGTERM (see collector_main)
        log.warning("collector process %d did not stop in %.0f s; killing", process.pid, timeout_s)
        process.kill()
        process.join(2.0)
    for channel in channels:
        channel.close()
        channel.unlink()
