"""FastSAC's collector: where the learner's env steps come from.

Every env step (of every env) is one transition record (:func:`record_dtype`), numbered from 0
and written by :meth:`EnvStepper.step`, which both collectors call:

- :class:`Collector` (``algo.mode=sync``): in the learner's process, whenever the trainer waits
  for an env step, acting with the learner's own policy on its device.
- :class:`AsyncCollector` (``algo.mode=async``): in a collector process (:func:`collector_main`)
  while the learner learns, each record written straight into a slot of a shared-memory ring
  (:mod:`fuselab_rl.transport`), acting with the policy the learner last published. A full ring
  blocks it; ten times a second it checks that the learner lives and has not asked it to stop,
  and once the learner is gone it unlinks the shared memory and exits. Its log records go to the
  learner's loggers.

The actions are uniform in [-1, 1] for the first ``random_steps`` env steps while the acting
policy has had no update (a resumed run's policy acts from the first step).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from logging.handlers import QueueHandler, QueueListener
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fuselab_rl.episode_stats import EpisodeStats
from fuselab_rl.stopping import STOP_SIGNALS, PartnerFailed
from fuselab_rl.transport import (
    Links,
    RingSpec,
    SharedWeights,
    SlotRing,
    WeightsSpec,
    remove_orphaned_segments,
)

if TYPE_CHECKING:
    from fuselab_rl.fastsac import FastSAC

log = logging.getLogger(__name__)

LIVENESS_S = 0.1  # how often a waiting side checks the other process


class CollectorFailed(PartnerFailed):
    """The collector process died or raised; the message says which and why."""


class LearnerGone(RuntimeError):
    """(In the collector process) the learner is gone or asked the collector to stop."""


@dataclass(frozen=True)
class EnvSpec:
    num_envs: int
    obs_dims: dict[str, int]  # observation group -> width
    action_dim: int
    reward_terms: tuple[str, ...]
    terminations: tuple[str, ...]

    @classmethod
    def of(cls, env: Any) -> EnvSpec:
        plan = env.terms.plan
        return cls(
            num_envs=int(env.num_envs),
            obs_dims={g: int(o.shape[1]) for g, o in env.terms.buffers.obs.items()},
            action_dim=int(env.backend.model.nu),
            reward_terms=tuple(c.entry for c in plan.rewards),
            terminations=tuple(c.entry for c in plan.terminations),
        )


def record_dtype(spec: EnvSpec) -> np.dtype:
    """One env step of every env, each field on a cache line of its own. Besides the transition:
    "episodes", (count, return sum, length sum) of those that ended; "timing", (busy s, env.step
    s, blocked s, monotonic commit time), busy being policy, env.step and copies; the acting
    policy's update count."""
    n, groups = spec.num_envs, spec.obs_dims.items()
    fields = {"seq": (np.int64, ())}
    fields |= {f"{k}.{g}": (np.float32, (n, d)) for k in ("obs", "next_obs") for g, d in groups}
    fields |= {
        "actions": (np.float32, (n, spec.action_dim)),
        "reward": (np.float32, (n,)),
        "terminated": (np.bool_, (n,)),
        "truncated": (np.bool_, (n,)),
        "episodes": (np.float64, (3,)),
        "reward_terms": (np.float64, (len(spec.reward_terms),)),
        "terminations": (np.float64, (len(spec.terminations),)),
        "timing": (np.float64, (4,)),
        "policy_updates": (np.int64, ()),
    }
    sizes = [-(-np.dtype(field).itemsize // 64) * 64 for field in fields.values()]
    offsets = np.cumsum([0, *sizes]).tolist()
    return np.dtype(
        {
            "names": list(fields),
            "formats": list(fields.values()),
            "offsets": offsets[:-1],
            "itemsize": offsets[-1],
        }
    )


class EnvStepper:
    """The env and what stepping it carries from one step to the next."""

    def __init__(self, env: Any, policy: torch.nn.Module, seed: int, random_steps: int):
        self.env, self.policy, self.device = env, policy, next(policy.parameters()).device
        self.obs: Mapping[str, np.ndarray] = env.reset_all()
        self.rng = np.random.default_rng(seed)
        self.uniform = np.empty((env.num_envs, env.backend.model.nu), np.float64)
        self.random_steps, self.steps = random_steps, 0

    def step(self, record: np.ndarray, policy_updates: int, blocked_s: float) -> None:
        """Step every env once and write the transition into ``record``."""
        started = time.perf_counter()
        for group, obs in self.obs.items():  # the env's buffers change on step: the record copies
            record[f"obs.{group}"] = obs
        if self.steps < self.random_steps and policy_updates == 0:
            self.rng.random(out=self.uniform)  # rng.uniform(-1, 1)'s numbers, without allocating
            self.uniform *= 2.0
            self.uniform -= 1.0
            record["actions"] = self.uniform
        else:
            with torch.inference_mode():
                obs = torch.from_numpy(record["obs.actor"]).to(self.device)
                torch.from_numpy(record["actions"]).copy_(self.policy.explore(obs))
        env_started = time.perf_counter()
        result = self.env.step(record["actions"])
        env_s = time.perf_counter() - env_started
        info, ended = result.info, result.info["reset_envs"]
        for group, obs in result.obs.items():
            next_obs = record[f"next_obs.{group}"]
            next_obs[...] = obs
            if ended.size:  # a reset row's next observation is the one its episode ended with
                next_obs[ended] = info["terminal_obs"][group][ended]
        record["reward"], record["terminated"] = result.reward, result.terminated
        record["truncated"] = result.truncated
        n = ended.size  # the env reports the mean return and length of the episodes that ended
        record["episodes"] = (n, info["episode_return"] * n, info["episode_length"] * n) if n else 0
        record["reward_terms"] = list(info["reward_terms"].values())
        record["terminations"] = list(info["terminations"].values())
        record["seq"], record["policy_updates"] = self.steps, policy_updates
        record["timing"] = time.perf_counter() - started, env_s, blocked_s, time.monotonic()
        self.obs, self.steps = result.obs, self.steps + 1


class Collector:
    """The collector of ``algo.mode=sync``: the env in this process, stepped into one record
    whenever the trainer waits for an env step, with the learner's own policy (so there is never
    a copy to publish). Both collectors sum up the records they hand over (:meth:`metrics`)."""

    free_running = False  # steps on its own (its own process), not only when waited for
    learner: FastSAC

    def __init__(self, cfg: Any, *, seed: int):
        from fuselab_envs.registry import make_env

        started = time.perf_counter()
        self.env, self.seed = make_env(cfg), seed
        self._reset_stats(EnvSpec.of(self.env))
        self.record = np.zeros((), record_dtype(self.spec))
        log.info(
            "in-process collector: env %s with %d envs (%.1f ms)",
            *(cfg.task_name, self.spec.num_envs, (time.perf_counter() - started) * 1e3),
        )

    def start(self, learner: FastSAC, random_steps: int) -> None:
        """Collect with the learner's policy, at random for ``random_steps`` while it is new."""
        self.learner = learner
        self.stepper = EnvStepper(self.env, learner.policy, self.seed, random_steps)

    def publish(self) -> None:
        """The learner's policy changed (updates, a loaded state): act with it from now on."""

    def check(self) -> None:
        """Raise :class:`CollectorFailed` if collection failed."""

    def feed(self, wait: bool, limit: int | None = None) -> int:
        """Hand the env steps held (at most ``limit``) to the learner's replay, in order; with
        ``wait`` at least one, waited for (here: the env steps). Returns how many."""
        if not wait:
            return 0
        self.stepper.step(self.record, self.learner.updates, blocked_s=0.0)
        self._count(self.record)
        self.learner.observe([self.record])
        return 1

    def close(self) -> None:
        """Stop the env's backend threads."""
        if hasattr(self.env.backend, "close"):
            self.env.backend.close()

    def _reset_stats(self, spec: EnvSpec) -> None:
        self.spec, self.episodes = spec, EpisodeStats(spec.num_envs)
        self.sums = np.zeros(4)  # busy s, env.step s, blocked s, policy lag (updates)
        self.steps, self.last_commit = 0, 0.0
        self.since: float | None = None  # the last commit before these steps, or their start

    def _count(self, record: np.ndarray) -> None:
        finished, return_sum, length_sum = record["episodes"].tolist()
        self.episodes.add_step(
            dict(zip(self.spec.reward_terms, record["reward_terms"].tolist(), strict=True)),
            dict(zip(self.spec.terminations, record["terminations"].tolist(), strict=True)),
            int(finished),
            episode_return=return_sum / max(finished, 1.0),
            episode_length=length_sum / max(finished, 1.0),
        )
        busy_s, env_s, blocked_s, commit = record["timing"].tolist()
        self.sums += busy_s, env_s, blocked_s, self.learner.updates - int(record["policy_updates"])
        if self.since is None:
            self.since = commit - busy_s - blocked_s
        self.steps, self.last_commit = self.steps + 1, commit

    def metrics(self) -> dict[str, float]:
        """Since the last call: episodes and terms (the runner's :class:`EpisodeStats`), the
        collection rate (a ``free_running`` collector's over wall-clock time, waits on a full
        ring included, else over busy time, as in PPO), timing and policy lag."""
        out = self.episodes.metrics()
        if self.steps:
            busy_s, env_s, blocked_s, lag = self.sums.tolist()
            env_steps = self.steps * self.spec.num_envs
            assert self.since is not None
            collect_s = self.last_commit - self.since if self.free_running else busy_s
            out |= {
                "Perf/collect_steps_per_s": env_steps / max(collect_s, 1e-9),
                "Perf/collect_s": busy_s,
                "Perf/env_s": env_s,
                "Perf/env_steps_per_s": env_steps / max(env_s, 1e-9),
                "Perf/collect_blocked_s": blocked_s,
                "Perf/policy_lag_updates": lag / self.steps,
            }
            self.sums[:], self.steps, self.since = 0.0, 0, self.last_commit
        return out


class PolicyPacker:
    """A module's floating-point parameters and buffers (``state_dict`` order) as one float32
    vector and back."""

    def __init__(self, module: torch.nn.Module):
        self.tensors = [t for t in module.state_dict().values() if t.is_floating_point()]
        self.numel = sum(t.numel() for t in self.tensors)

    @torch.no_grad()
    def pack(self) -> np.ndarray:
        return torch.cat([t.reshape(-1).float() for t in self.tensors]).cpu().numpy()

    @torch.no_grad()
    def unpack(self, vector: np.ndarray) -> None:
        flat = torch.from_numpy(vector).split([t.numel() for t in self.tensors])
        for tensor, values in zip(self.tensors, flat, strict=True):
            tensor.copy_(values.view_as(tensor))


@dataclass(frozen=True)
class CollectorPlan:
    """What the learner sends the collector process once the shared memory exists."""

    ring: RingSpec
    weights: WeightsSpec
    policy_builder: Callable[[], torch.nn.Module]
    random_steps: int


class AsyncCollector(Collector):
    """The collector of ``algo.mode=async``: spawns, feeds and supervises the collector process
    and owns the shared memory. ``ring_slots``: env steps in flight (fewer if /dev/shm is short).
    """

    free_running = True

    def __init__(self, cfg: dict, *, num_threads: int, seed: int, ring_slots: int = 64):
        started = time.perf_counter()
        context = mp.get_context("spawn")
        self.conn, child_conn = context.Pipe()  # messages: spec, plan, stop, error
        self.links, self.ring_slots, self.wait_s = Links(context), ring_slots, 0.0
        self.segments: list[SlotRing | SharedWeights] = []  # released with the process
        self.taken, self.error, self.child_error = 0, "", ""
        log_queue = context.Queue()
        self.logs = _ChildLogs(log_queue)
        self.logs.start()
        level = logging.getLogger("fuselab_rl").getEffectiveLevel()
        args = (child_conn, self.links, log_queue, level, cfg, num_threads, seed, time.monotonic())
        self.process = context.Process(target=collector_main, args=args, daemon=True)
        # With the stop signals blocked the child cannot die of a Ctrl-C before collector_main
        # ignores them (it inherits the mask); the learner handles them.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self.process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        child_conn.close()
        self.release_all = weakref.finalize(
            self, _release, self.process, self.conn, self.segments, self.logs
        )
        log.info(
            "collector process %d spawned (%.1f ms)",
            *(self.process.pid, (time.perf_counter() - started) * 1e3),
        )
        self._reset_stats(self._wait_for_spec(timeout_s=300.0))

    def _wait_for_spec(self, timeout_s: float) -> EnvSpec:
        started = time.perf_counter()
        while time.perf_counter() - started < timeout_s:
            self.check()  # raises once it died, with the error it reported
            if self.conn.poll(LIVENESS_S):
                with contextlib.suppress(EOFError):  # it died: check() says how
                    kind, value = self.conn.recv()
                    if kind == "spec":
                        log.info(
                            "collector env ready: %s (%.1f ms after spawn)",
                            *(value, (time.perf_counter() - started) * 1e3),
                        )
                        return value
                    self.child_error = value.strip()  # an error: the collector exits next
                self.check(wait_s=10.0)
        self.close()
        raise CollectorFailed(
            f"collector process (pid {self.process.pid}) did not report its env within "
            f"{timeout_s:.0f} s"
        )

    def start(self, learner: FastSAC, random_steps: int) -> None:
        """Create the ring and the weights buffer, let the collector run and publish the
        learner's policy as the first version."""
        started = time.perf_counter()
        orphans = remove_orphaned_segments()
        if orphans:
            log.warning("/dev/shm: removed %s (left by killed FastSAC runs)", orphans)
        self.learner, self.packer = learner, PolicyPacker(learner.policy)
        self.ring = SlotRing.create(record_dtype(self.spec), self.ring_slots, self.links)
        self.segments.append(self.ring)
        self.weights = SharedWeights.create(self.packer.numel, self.links)
        self.segments.append(self.weights)
        plan = CollectorPlan(
            self.ring.spec, self.weights.spec, learner.policy_builder, random_steps
        )
        try:
            self.conn.send(("plan", plan))
        except OSError:  # the collector is gone: say why
            self.check(wait_s=5.0)
            raise
        log.info(
            "shared memory: ring %s (%d slots x %.2f MiB), weights %s (%.2f MiB) (%.1f ms)",
            *(self.ring.spec.name, self.ring.slots, self.ring.spec.record.itemsize / 2**20),
            *(self.weights.spec.name, 4 * self.packer.numel / 2**20),
            (time.perf_counter() - started) * 1e3,
        )
        self.publish()

    def publish(self) -> None:
        """Copy the learner's policy into the weights buffer, tagged with its update count."""
        values = self.packer.pack()
        while not self.weights.publish(values, self.learner.updates, timeout_s=LIVENESS_S):
            self.check()

    def feed(self, wait: bool, limit: int | None = None) -> int:
        ready = self.ring.ready()
        if wait and not ready:
            started = time.perf_counter()
            while not (ready := self.ring.ready(timeout_s=LIVENESS_S)):
                self.check()
            self.wait_s += time.perf_counter() - started
        count = ready if limit is None else min(ready, max(limit, int(wait)))
        records = [self.ring.record(k) for k in range(count)]
        for record in records:
            if int(record["seq"]) != self.taken:
                raise RuntimeError(
                    f"transition ring: expected record {self.taken}, got {int(record['seq'])} "
                    "(a lost or repeated env step)"
                )
            self.taken += 1
            self._count(record)
        self.learner.observe(records)
        self.ring.release(count)
        return count

    def metrics(self) -> dict[str, float]:
        """Besides the records': the learner's waits for records and how full the ring is."""
        out = super().metrics() | {
            "Perf/learn_wait_s": self.wait_s,
            "Perf/ring_fill": self.ring.ready() / self.ring.slots,
        }
        self.wait_s = 0.0
        return out

    def check(self, wait_s: float = 0.0) -> None:
        """Raise :class:`CollectorFailed` (after releasing everything) if the collector died."""
        if not self.error:
            self.process.join(wait_s)
            if self.process.is_alive():
                return
            code = self.process.exitcode
            reason = f"exit code {code}"
            if code is not None and code < 0:
                reason = f"killed by {signal.Signals(-code).name} (exit code {code})"
            with contextlib.suppress(EOFError, OSError):
                while not self.child_error and self.conn.poll():
                    kind, value = self.conn.recv()
                    self.child_error = value.strip() if kind == "error" else ""
            reason += f": {self.child_error}" if self.child_error else ""
            self.error = f"collector process (pid {self.process.pid}) failed: {reason}"
            log.error("%s", self.error)
            self.close()
        raise CollectorFailed(self.error)

    def close(self) -> None:
        """Stop the collector (asking first, then killing) and release the shared memory."""
        if self.release_all.alive:
            self.release_all()
            log.info(
                "collector process %d stopped (exit code %s)",
                *(self.process.pid, self.process.exitcode),
            )


def _release(process: Any, conn: Connection, segments: list, logs: QueueListener) -> None:
    if process.is_alive():
        with contextlib.suppress(OSError, ValueError):
            conn.send(("stop", None))
        process.join(5.0)
    if process.is_alive():  # it ignores SIGTERM (see collector_main)
        log.warning("collector process %d did not stop in 5 s; killing", process.pid)
        process.kill()
        process.join(2.0)
    conn.close()
    for segment in segments:
        segment.close()
        segment.unlink()
    logs.stop()


class _ChildLogs(QueueListener):
    """Hands the collector's log records to this process's loggers (the logging cookbook's
    recipe for several processes). Stopping puts nothing into the queue, whose lock a killed
    collector may hold: the listener ends once the queue stays empty."""

    def __init__(self, log_queue: Any):
        super().__init__(log_queue, _ToLoggers())
        self.stopping = threading.Event()

    def enqueue_sentinel(self) -> None:
        self.stopping.set()

    def dequeue(self, block: bool) -> Any:
        while True:
            try:
                return self.queue.get(timeout=LIVENESS_S / 2)
            except queue.Empty:
                if self.stopping.is_set():
                    return self._sentinel


class _ToLoggers(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger(record.name).handle(record)


def collector_main(
    conn: Connection,
    links: Links,
    log_queue: Any,
    log_level: int,
    cfg: dict,
    num_threads: int,
    seed: int,
    spawned_at: float,
) -> None:
    """The collector process: build the env, report its spec, then step it, one record per env
    step into the ring, until the learner asks it to stop or vanishes."""
    # Ctrl-C and a scheduler's SIGTERM reach the whole process group: the learner handles them
    # (saves, then stops us)
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked while it was spawned
    to_learner = QueueHandler(log_queue)
    to_learner.setFormatter(logging.Formatter(f"[collector {os.getpid()}] %(message)s"))
    logging.basicConfig(level=log_level, handlers=[to_learner], force=True)
    log.info(
        "up %.0f ms after spawn (interpreter and imports)", (time.monotonic() - spawned_at) * 1e3
    )
    parent = mp.parent_process()
    alive = parent.is_alive if parent is not None else (lambda: True)
    segments: list[SlotRing | SharedWeights] = []
    try:
        _collect(conn, links, cfg, num_threads, seed, alive, segments)
    except LearnerGone as reason:
        if not alive():
            log.error("the learner process is gone (%s); stopping", reason)
            for segment in segments:  # nobody else is left to release them
                segment.unlink()
            sys.exit(3)
        log.info("stopped by the learner")
    except BaseException as error:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        log.error("failed:\n%s", text)
        with contextlib.suppress(OSError, ValueError):  # the learner may be gone already
            conn.send(("error", f"{type(error).__name__}: {error}\n{text}"))
        sys.exit(1)
    finally:
        for segment in segments:
            segment.close()
        conn.close()


def _collect(
    conn: Connection,
    links: Links,
    cfg: dict,
    num_threads: int,
    seed: int,
    alive: Callable[[], bool],
    segments: list,
) -> None:
    from omegaconf import OmegaConf

    from fuselab_envs.registry import make_env

    def check_learner() -> None:
        if not alive():
            raise LearnerGone("it vanished")
        if conn.poll():  # after the plan, the learner sends only a stop
            raise LearnerGone("stop requested")

    started = time.perf_counter()
    torch.set_num_threads(num_threads)
    torch.manual_seed(seed)
    env = make_env(OmegaConf.merge(cfg, {"num_threads": num_threads}))
    conn.send(("spec", EnvSpec.of(env)))
    log.info(
        "env %s on %s, %d envs, %d threads (%.1f ms)",
        *(cfg["task_name"], cfg["backend"], env.num_envs, num_threads),
        (time.perf_counter() - started) * 1e3,
    )
    while not conn.poll(LIVENESS_S):
        check_learner()
    kind, plan = conn.recv()
    if kind != "plan":
        raise LearnerGone("stopped before sending the plan")
    segments.append(ring := SlotRing.attach(plan.ring, links))
    segments.append(weights := SharedWeights.attach(plan.weights, links))
    policy = plan.policy_builder().eval()
    packer, stepper = PolicyPacker(policy), EnvStepper(env, policy, seed, plan.random_steps)
    vector = np.empty(packer.numel, np.float32)
    log.info("attached ring (%d slots, %.1f MiB) and weights", ring.slots, ring.nbytes / 2**20)
    version, policy_updates, checked = 0, 0, time.perf_counter()
    while True:
        started = time.perf_counter()
        record = ring.claim()
        while record is None:  # the ring is full: wait for the learner
            check_learner()
            record = ring.claim(timeout_s=LIVENESS_S)
        blocked_s = time.perf_counter() - started
        if started - checked > LIVENESS_S:
            checked = started
            check_learner()
        newer = weights.read_if_newer(version, vector)
        if newer is not None:
            packer.unpack(vector)
            version, policy_updates = newer
        stepper.step(record, policy_updates, blocked_s)
        ring.commit()
