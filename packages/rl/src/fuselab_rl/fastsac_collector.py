"""FastSAC's collector: where the learner's env steps come from.

Every env step (of every env) is one transition record (:func:`record_dtype`), numbered from 0
and written by :meth:`EnvStepper.step`, which both collectors call: :class:`Collector`
(``algo.mode=sync``) in the learner's process whenever the trainer waits for an env step, with
the learner's own policy; :class:`AsyncCollector` (``algo.mode=async``) in a collector process
while the learner learns, into the slots of a shared-memory ring (:mod:`fuselab_rl.transport`),
with the policy the learner last published. The actions are uniform in [-1, 1] for the first
``random_steps`` env steps while the acting policy has had no update.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from logging.handlers import QueueHandler, QueueListener
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fuselab_env_core.timing import elapsed_ms
from fuselab_rl.episode_stats import EpisodeStats
from fuselab_rl.stopping import STOP_SIGNALS, PartnerFailed
from fuselab_rl.transport import Links, SharedWeights, SlotRing, remove_orphaned_segments

if TYPE_CHECKING:
    from fuselab_rl.fastsac import FastSAC
    from fuselab_rl.fastsac_networks import ActorPolicy

log = logging.getLogger(__name__)

LIVENESS_S = 0.1  # how often a waiting side checks the other process
START_TIMEOUT_S = 300.0  # for the collector process to build the env (and compile its kernel)


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
    action_reach: tuple[float, ...]  # per action, where its joint's limits are reached
    curricula: tuple[str, ...] = ()

    @classmethod
    def of(cls, env: Any) -> EnvSpec:
        plan, obs = env.terms.plan, env.terms.buffers.obs
        dims = {group: int(o.shape[1]) for group, o in obs.items()}
        terms = tuple(c.entry for c in plan.rewards), tuple(c.entry for c in plan.terminations)
        reach = tuple(float(r) for r in env.action.reach)
        curricula = tuple(getattr(env, "curricula", {}))
        return cls(int(env.num_envs), dims, int(env.action_dim), *terms, reach, curricula)


def record_dtype(spec: EnvSpec) -> np.dtype:
    """One env step of every env, each field on cache lines of its own; "episodes": (count,
    return sum, length sum) of those that ended, "timing": (busy, env.step, blocked s, commit)."""
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
        "curriculum": (np.float64, (len(spec.curricula),)),  # the levels
        "timing": (np.float64, (4,)),
        "policy_updates": (np.int64, ()),  # the update count of the policy that acted
    }
    ends = np.cumsum([-(-np.dtype(f).itemsize // 64) * 64 for f in fields.values()]).tolist()
    return np.dtype({"names": [*fields], "formats": [*fields.values()], "offsets": [0, *ends[:-1]]})


class EnvStepper:
    """The env and what stepping it carries from one step to the next."""

    def __init__(self, env: Any, policy: ActorPolicy, seed: int, random_steps: int):
        self.env, self.policy, self.device = env, policy, next(policy.parameters()).device
        self.obs: Mapping[str, np.ndarray] = env.reset_all()
        self.rng = np.random.default_rng(seed)
        self.uniform = np.empty((env.num_envs, env.action_dim), np.float64)
        self.bound = policy.actor.bound.cpu().numpy().astype(np.float64)
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
            self.uniform *= self.bound  # over the policy's whole range
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
        record["curriculum"] = list(info.get("curriculum", {}).values())
        record["seq"], record["policy_updates"] = self.steps, policy_updates
        record["timing"] = time.perf_counter() - started, env_s, blocked_s, time.monotonic()
        self.obs, self.steps = result.obs, self.steps + 1


class Collector:
    """``algo.mode=sync``: the env in this process, stepped into one record whenever the trainer
    waits for an env step, with the learner's own policy (so there is never a copy to publish)."""

    free_running = False  # steps on its own (its own process), not only when waited for
    learner: FastSAC

    def __init__(self, cfg: Any, *, seed: int, random_steps: int):
        from fuselab_envs.registry import make_env

        self.env, self.seed, self.random_steps = make_env(cfg), seed, random_steps
        self._reset_stats(EnvSpec.of(self.env))
        self.record = np.zeros((), record_dtype(self.spec))

    def start(self, learner: FastSAC) -> None:
        self.learner = learner
        self.stepper = EnvStepper(self.env, learner.policy, self.seed, self.random_steps)

    def publish(self) -> None:
        """The learner's policy changed (updates, a loaded state): act with it from now on."""

    def check(self) -> None:
        """Raise :class:`CollectorFailed` if collection failed."""

    def feed(self, wait: bool) -> int:
        """Hand the env steps held to the learner, in order; with ``wait`` at least one (here: the
        env steps). Returns how many."""
        if not wait:
            return 0
        self.stepper.step(self.record, self.learner.updates, blocked_s=0.0)
        return self._hand_over([self.record])

    def close(self) -> None:
        self.env.close()  # the backend's threads

    def _reset_stats(self, spec: EnvSpec) -> None:
        self.spec, self.episodes = spec, EpisodeStats(spec.num_envs)
        self.sums = np.zeros(4)  # busy s, env.step s, blocked s, policy lag (updates)
        self.steps, self.last_commit = 0, 0.0
        self.since: float | None = None  # the last commit before these steps, or their start

    def _hand_over(self, records: list[np.ndarray]) -> int:
        """Records into the learner's replay and the metrics; returns how many."""
        for record in records:
            finished, return_sum, length_sum = record["episodes"].tolist()
            self.episodes.add_step(
                dict(zip(self.spec.reward_terms, record["reward_terms"].tolist(), strict=True)),
                dict(zip(self.spec.terminations, record["terminations"].tolist(), strict=True)),
                int(finished),
                episode_return=return_sum / max(finished, 1.0),
                episode_length=length_sum / max(finished, 1.0),
                curriculum=dict(
                    zip(self.spec.curricula, record["curriculum"].tolist(), strict=True)
                ),
            )
            busy_s, env_s, blocked_s, commit = record["timing"].tolist()
            lag = self.learner.updates - int(record["policy_updates"])
            self.sums += busy_s, env_s, blocked_s, lag
            if self.since is None:
                self.since = commit - busy_s - blocked_s
            self.steps, self.last_commit = self.steps + 1, commit
        self.learner.observe(records)
        return len(records)

    def metrics(self) -> dict[str, float]:
        """Since the last call: episodes and terms, timing, policy lag and the collection rate (of
        a ``free_running`` collector over wall-clock time, else over busy time, as in PPO)."""
        out = self.episodes.metrics()
        if self.steps and self.since is not None:
            busy_s, env_s, blocked_s, lag = self.sums.tolist()
            env_steps = self.steps * self.spec.num_envs
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
    """A module's floating-point parameters and buffers as one float32 vector and back."""

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


class AsyncCollector(Collector):
    """``algo.mode=async``: spawns and supervises the collector process, which builds the env,
    the policy (``make_policy(env spec)``) and a ring of ``ring_slots`` env steps."""

    free_running = True

    def __init__(
        self,
        cfg: dict,
        make_policy: Callable[[EnvSpec], ActorPolicy],
        random_steps: int,
        ring_slots: int,
        num_threads: int,
        seed: int,
    ):
        started = time.perf_counter()
        plan = (cfg, make_policy, random_steps, ring_slots, num_threads, seed)
        if orphans := remove_orphaned_segments():
            log.warning("/dev/shm: removed %s (left by killed FastSAC runs)", orphans)
        context = mp.get_context("spawn")
        self.conn, child_conn = context.Pipe()  # messages: ready, error (from it), stop (to it)
        self.links, self.segments = Links(context), []  # the segments go with the process
        self.wait_s, self.error, self.child_error = 0.0, "", ""
        self.logs = QueueListener(context.Queue(), _ToLoggers())
        self.logs.start()
        level = logging.getLogger("fuselab_rl").getEffectiveLevel()
        args = (child_conn, self.links, self.logs.queue, level, (*plan, time.monotonic()))
        self.process = context.Process(target=collector_main, args=args, daemon=True)
        # With the stop signals blocked the child cannot die of a Ctrl-C before collector_main
        # ignores them (it inherits the mask); the learner handles them.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self.process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        child_conn.close()
        owned = self.process, self.conn, self.segments, self.logs  # released together
        self.release = weakref.finalize(self, _release, *owned)
        log.info("collector process %d spawned (%.1f ms)", self.process.pid, elapsed_ms(started))
        while (ready := self._receive(LIVENESS_S)) is None:
            self.check()  # raises once it died, with the error it reported
            if elapsed_ms(started) > START_TIMEOUT_S * 1e3:
                self.close()
                raise CollectorFailed(f"collector process: not ready in {START_TIMEOUT_S:.0f} s")
        spec, ring, slots, weights, numel = ready
        self.ring = SlotRing(record_dtype(spec), slots, self.links, name=ring)
        self.weights = SharedWeights(numel, self.links, name=weights)
        self.segments += [self.ring, self.weights]
        self._reset_stats(spec)
        log.info("collector ready: ring %s, %d slots (%.1f ms)", ring, slots, elapsed_ms(started))

    def start(self, learner: FastSAC) -> None:
        """Publish the learner's policy as the first version: the collector steps from now on."""
        self.learner, self.packer = learner, PolicyPacker(learner.policy)
        assert self.packer.numel == self.weights.values.size, "the collector's policy differs"
        self.publish()

    def publish(self) -> None:
        """Copy the learner's policy into the weights buffer, tagged with its update count."""
        values = self.packer.pack()
        while not self.weights.publish(values, self.learner.updates, timeout_s=LIVENESS_S):
            self.check()

    def feed(self, wait: bool) -> int:
        ready = self.ring.ready()
        if wait and not ready:
            started = time.perf_counter()
            while not (ready := self.ring.ready(timeout_s=LIVENESS_S)):
                self.check()
            self.wait_s += time.perf_counter() - started
        self.ring.release(self._hand_over([self.ring.record(k) for k in range(ready)]))
        return ready

    def metrics(self) -> dict[str, float]:
        """Besides the records': the learner's waits for records and how full the ring is."""
        ring_fill = self.ring.ready() / self.ring.slots
        out = super().metrics() | {"Perf/learn_wait_s": self.wait_s, "Perf/ring_fill": ring_fill}
        self.wait_s = 0.0
        return out

    def _receive(self, timeout_s: float = 0.0) -> list | None:
        """The collector's next message (a list), or None; an error it reports is kept."""
        with contextlib.suppress(EOFError, OSError):  # it is gone, or we closed the pipe
            if self.conn.poll(timeout_s):
                kind, *message = self.conn.recv()
                if kind != "error":
                    return message
                self.child_error = message[0].strip()
        return None

    def check(self) -> None:
        """Raise :class:`CollectorFailed` (after releasing everything) if the collector died."""
        if not self.error:
            if self.process.is_alive():
                return
            self._receive()  # the error it reported last, if any
            code = self.process.exitcode or 0
            reason = f"exit code {code}"
            if code < 0:
                reason = f"killed by {signal.Signals(-code).name} ({reason})"
            reason += f": {self.child_error}" if self.child_error else ""
            self.error = f"collector process (pid {self.process.pid}) failed: {reason}"
            log.error("%s", self.error)
            self.close()
        raise CollectorFailed(self.error)

    def close(self) -> None:
        """Stop the collector (asking first, then killing) and release the shared memory."""
        if self.release.alive:
            self.release()
            pid, code = self.process.pid, self.process.exitcode
            log.info("collector process %d stopped (exit code %s)", pid, code)


def _release(process: Any, conn: Any, segments: list, logs: QueueListener) -> None:
    if process.is_alive():
        with contextlib.suppress(OSError, ValueError):
            conn.send(("stop",))
        process.join(5.0)
    if process.is_alive():  # it ignores SIGTERM (see collector_main)
        log.warning("collector process %d did not stop in 5 s; killing", process.pid)
        process.kill()
        process.join(2.0)
    conn.close()
    for segment in segments:
        segment.close()
        segment.unlink()
    if (process.exitcode or 0) >= 0:  # a killed collector may hold the queue's lock for ever:
        logs.stop()  # then the listener (a daemon thread) goes with this process


class _ToLoggers(logging.Handler):
    """The collector's log records to this process's loggers (the logging cookbook's recipe)."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger(record.name).handle(record)


def collector_main(conn: Any, links: Links, log_queue: Any, log_level: int, plan: tuple) -> None:
    """The collector process: build the env, the policy and the shared memory (named after the
    learner), report them, then step the env into the ring until the learner stops or vanishes."""
    cfg, make_policy, random_steps, ring_slots, num_threads, seed, spawned_at = plan
    # Ctrl-C and a scheduler's SIGTERM reach the whole process group: the learner handles them
    # (saves, then stops us)
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked while it was spawned
    to_learner = QueueHandler(log_queue)
    to_learner.setFormatter(logging.Formatter(f"[collector {os.getpid()}] %(message)s"))
    logging.basicConfig(level=log_level, handlers=[to_learner], force=True)
    log.info("up %.0f ms after spawn", (time.monotonic() - spawned_at) * 1e3)
    learner, segments = mp.parent_process(), []
    assert learner is not None and learner.pid is not None

    def check_learner() -> None:
        if not learner.is_alive():
            raise LearnerGone("the learner process is gone")
        if conn.poll():  # the learner sends only a stop
            raise LearnerGone("the learner asked")

    try:
        from omegaconf import OmegaConf

        from fuselab_envs.registry import make_env

        started = time.perf_counter()
        torch.set_num_threads(num_threads)
        torch.manual_seed(seed)
        env = make_env(OmegaConf.create({**cfg, "num_threads": num_threads}))
        spec = EnvSpec.of(env)
        policy = make_policy(spec).eval()
        packer, stepper = PolicyPacker(policy), EnvStepper(env, policy, seed, random_steps)
        vector = np.empty(packer.numel, np.float32)
        ring = SlotRing(record_dtype(spec), ring_slots, links, owner=learner.pid)
        weights = SharedWeights(packer.numel, links, owner=learner.pid)
        segments += [ring, weights]
        conn.send(("ready", spec, ring.name, ring.slots, weights.name, packer.numel))
        log.info(
            "env %s on %d threads ready (%.1f ms)",
            cfg["task_name"],
            num_threads,
            elapsed_ms(started),
        )
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
    except LearnerGone as reason:
        log.info("stopping: %s", reason)
        if not learner.is_alive():
            sys.exit(3)
    except BaseException as error:
        text = traceback.format_exc()
        log.error("failed:\n%s", text)
        with contextlib.suppress(OSError, ValueError):  # the learner may be gone already
            conn.send(("error", f"{type(error).__name__}: {error}\n{text}"))
        sys.exit(1)
    finally:
        for segment in segments:  # the learner attached them if it lives; if not, nobody did
            segment.close()
            segment.unlink()
        conn.close()
