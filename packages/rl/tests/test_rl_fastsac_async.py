"""FastSAC's asynchronous machinery: the transport's ring and weights buffer under contention
between two processes, a dead collector or learner ending the run cleanly (and releasing the
shared memory), and learning cartpole with the collector in its own process."""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from multiprocessing import shared_memory

import numpy as np
import pytest
import test_rl_fastsac_helpers as helpers  # first: see its docstring
import torch

from fuselab_rl.fastsac import FastSACTrainer
from fuselab_rl.fastsac_collector import AsyncCollector, CollectorFailed
from fuselab_rl.transport import (
    SHM_PREFIX,
    Links,
    SharedWeights,
    SlotRing,
    remove_orphaned_segments,
    shm_name,
)

SPAWN = mp.get_context("spawn")

# -- transport under contention ------------------------------------------------------------------
# numpy and multiprocessing only: a test of the ordering the primitives give, on any CPU

STRESS_RECORD = np.dtype(
    [
        ("seq", np.int64),
        ("wide", np.float32, (3000,)),  # several cache lines and pages: a copy takes a while
        ("small", np.int32, (3, 5)),
        ("flag", np.float64, (7,)),
    ],
    align=True,
)
RECORDS = 20_000


def _produce(links, count, full_hits, names):
    ring = SlotRing(STRESS_RECORD, 8, links)  # the producer creates the ring
    names.put(ring.name)
    try:
        for i in range(count):
            record = ring.claim()
            if record is None:
                full_hits.value += 1
                while record is None:
                    record = ring.claim(timeout_s=1.0)
            for name in ("wide", "small", "flag"):  # field by field, then the sequence number
                record[name] = i
            record["seq"] = i
            ring.commit()
    finally:
        ring.close()


def test_ring_never_loses_duplicates_or_tears_a_record_across_processes():
    links, full_hits, names = Links(SPAWN), SPAWN.Value("q", 0), SPAWN.Queue()
    producer = SPAWN.Process(target=_produce, args=(links, RECORDS, full_hits, names))
    producer.start()
    ring = SlotRing(STRESS_RECORD, 8, links, name=names.get(timeout=60))
    rng = np.random.default_rng(0)
    empty_hits = 0
    try:
        for i in range(RECORDS):
            deadline = time.perf_counter() + 60
            while ring.ready() == 0:
                empty_hits += 1
                assert producer.is_alive() or ring.ready(), "producer died"
                assert time.perf_counter() < deadline, f"no record {i} within 60 s"
                ring.ready(timeout_s=0.001)
            record = ring.record(0)
            assert int(record["seq"]) == i, f"record {i}: sequence {int(record['seq'])}"
            for name in ("wide", "small", "flag"):
                values = record[name]
                assert (values == i).all(), f"record {i}: torn field {name} {np.unique(values)}"
            ring.release(1)
            if rng.random() < 0.001:  # now and then a slow consumer, so the ring fills up
                time.sleep(0.01)
        producer.join(10)
        assert producer.exitcode == 0
        assert ring.ready() == 0
        assert full_hits.value > 0 and empty_hits > 0, (full_hits.value, empty_hits)
    finally:
        producer.kill()
        ring.close()
        ring.unlink()


def test_the_transport_is_numpy_and_multiprocessing_only():
    imports = "import sys, fuselab_rl.transport; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", imports], check=True, timeout=120)


PAYLOAD = 1_000_000  # floats: a copy takes about a millisecond, so reads and writes overlap


def _publish(name, links, seconds):
    weights = SharedWeights(PAYLOAD, links, name=name)
    values = np.empty(PAYLOAD, np.float32)
    try:
        started, version = time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            version += 1
            values.fill(version)  # version v is the payload full of v
            while not weights.publish(values, tag=10 * version, timeout_s=1.0):
                pass
    finally:
        weights.close()


def test_weights_are_never_read_as_a_mix_of_two_versions():
    links = Links(SPAWN)
    weights = SharedWeights(PAYLOAD, links)  # the reader creates it
    writer = SPAWN.Process(target=_publish, args=(weights.name, links, 3.0))
    writer.start()
    out = np.empty(PAYLOAD, np.float32)
    last, reads = 0, 0
    try:
        deadline = time.perf_counter() + 60
        while True:
            assert time.perf_counter() < deadline
            running = writer.is_alive()  # once it is not, the next read is the last version
            newer = weights.read_if_newer(last, out)
            if newer is not None:
                version, tag = newer
                assert version > last, f"version went from {last} to {version}"
                assert out[0] == version and (out == out[0]).all(), (
                    f"version {version}: mixed payload {np.unique(out)[:5]}"
                )
                assert tag == 10 * version
                last, reads = version, reads + 1
            elif not running:
                break
        writer.join(10)
        assert writer.exitcode == 0
        assert reads > 20, f"only {reads} reads of {last} versions"
        with links.weights_lock:  # a reader holding the lock: the writer gives up in time
            assert not weights.publish(out, tag=0, timeout_s=0.05)
    finally:
        writer.kill()
        weights.close()
        weights.unlink()


# -- failures --------------------------------------------------------------------------------------


def _async_cfg(*algo):
    return helpers.compose(
        "cartpole", algo=("mode=async", "learning_starts=4", "steps_per_iteration=4", *algo)
    )


def test_a_killed_collector_ends_the_run_with_an_error_naming_it_and_frees_shared_memory(
    tmp_path,
):
    trainer = FastSACTrainer(_async_cfg(), torch.device("cpu"), helpers.threads(2), tmp_path)
    collector = trainer.collector
    assert isinstance(collector, AsyncCollector)
    names = [collector.ring.name, collector.weights.name]
    try:
        assert all(os.path.exists(f"/dev/shm/{name}") for name in names)
        trainer.iterate()
        assert collector.process.pid is not None
        os.kill(collector.process.pid, signal.SIGKILL)
        started = time.perf_counter()
        with pytest.raises(
            CollectorFailed, match=r"collector process \(pid \d+\) failed: killed by SIGKILL"
        ):
            for _ in range(100):
                trainer.iterate()
        assert time.perf_counter() - started < 5.0
        assert not any(os.path.exists(f"/dev/shm/{name}") for name in names)
        with pytest.raises(CollectorFailed, match="SIGKILL"):  # and it stays failed
            trainer.iterate()
    finally:
        trainer.close()
        trainer.close()  # idempotent
    assert not any(os.path.exists(f"/dev/shm/{name}") for name in names)


def test_a_collector_start_up_error_is_raised_in_the_learner_with_its_text(tmp_path):
    before = set(helpers.our_segments())
    cfg = _async_cfg()
    cfg.env.decimation = 0  # FusedEnv rejects it, in the collector process
    with pytest.raises(
        CollectorFailed,
        match=r"exit code 1: ValueError: env.decimation: expected >= 1, got 0",
    ):
        FastSACTrainer(cfg, torch.device("cpu"), helpers.threads(2), tmp_path)
    assert set(helpers.our_segments()) == before


def _learner(cfg, tmp_path, queue):
    trainer = FastSACTrainer(cfg, torch.device("cpu"), helpers.threads(2), tmp_path)
    collector = trainer.collector
    assert isinstance(collector, AsyncCollector)
    trainer.iterate()
    queue.put((collector.process.pid, collector.ring.name, collector.weights.name))
    while True:
        trainer.iterate()


def test_a_killed_learner_stops_the_collector_which_frees_shared_memory(tmp_path):
    queue = SPAWN.Queue()
    # a tiny ring: the collector is blocked on a full ring when the learner dies
    learner = SPAWN.Process(
        target=_learner, args=(_async_cfg("collector.ring_slots=2"), tmp_path, queue)
    )
    learner.start()
    try:
        collector_pid, *names = queue.get(timeout=120)
        assert all(os.path.exists(f"/dev/shm/{name}") for name in names)
        assert learner.pid is not None
        os.kill(learner.pid, signal.SIGKILL)
        learner.join(5)
        deadline = time.perf_counter() + 5.0
        while not helpers.process_gone(collector_pid):
            assert time.perf_counter() < deadline, "the collector outlived its learner by 5 s"
            time.sleep(0.05)
        deadline = time.perf_counter() + 2.0
        while any(os.path.exists(f"/dev/shm/{name}") for name in names):
            assert time.perf_counter() < deadline, f"leaked: {names}"
            time.sleep(0.05)
    finally:
        learner.kill()


# -- learning --------------------------------------------------------------------------------------

THRESHOLD = 4.0  # cartpole's return; random actions get about 0.9 (see test_rl_fastsac.py)


def test_async_fastsac_learns_cartpole_with_collector_and_learner_in_parallel(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="fuselab_rl")
    trainer = FastSACTrainer(
        helpers.compose("cartpole"), torch.device("cpu"), helpers.threads(2), tmp_path
    )
    assert isinstance(trainer.collector, AsyncCollector)
    best, iterations, metrics = -math.inf, 0, {}
    started = time.perf_counter()
    try:
        while time.perf_counter() - started < 75.0 and best < THRESHOLD:
            metrics = trainer.iterate()
            iterations += 1
            best = max(best, metrics.get("Episode/return", -math.inf))
        elapsed = time.perf_counter() - started
        # loading a state (as a resume does) republishes the policy and training goes on
        trainer.load_state_dict(copy.deepcopy(trainer.state_dict()))
        assert trainer.iterate()["Perf/updates"] > 0
    finally:
        trainer.close()
    assert best >= THRESHOLD, f"return {best:.2f} after {iterations} iterations ({elapsed:.0f} s)"
    # both ran at once: the collector delivered more env steps than the learner's ratio
    # (updates_per_step = 2) would have asked for in sync mode
    assert trainer.env_steps * trainer.cfg.updates_per_step > trainer.learner.updates, (
        trainer.env_steps,
        trainer.learner.updates,
    )
    assert metrics["Perf/collect_steps_per_s"] > 0 and metrics["Perf/policy_lag_updates"] >= 0
    assert metrics["Perf/learn_wait_s"] >= 0 and 0 <= metrics["Perf/ring_fill"] <= 1
    # the collector process logs through the learner's loggers, its pid in each message
    pid = trainer.collector.process.pid
    said = [r.getMessage() for r in caplog.records if f"[collector {pid}]" in r.getMessage()]
    assert any("env cartpole" in m for m in said) and any("the learner asked" in m for m in said)


def test_segments_of_a_killed_learner_are_removed_by_the_next_run_and_live_ones_kept():
    """Learner and collector killed together (SIGKILL to the process group) leave their
    segments; the next async run unlinks those of dead learners only."""
    exited = subprocess.Popen(["true"])
    exited.wait()  # its pid names a learner that is gone
    orphan = shared_memory.SharedMemory(
        name=f"{SHM_PREFIX}_{exited.pid}_test{os.getpid()}_ring", create=True, size=64
    )
    live = shared_memory.SharedMemory(name=shm_name("test"), create=True, size=64)
    try:
        assert orphan.name in remove_orphaned_segments()
        assert not os.path.exists(f"/dev/shm/{orphan.name}")
        assert os.path.exists(f"/dev/shm/{live.name}")
    finally:
        for segment in (orphan, live):
            segment.close()
            with contextlib.suppress(FileNotFoundError):
                segment.unlink()
