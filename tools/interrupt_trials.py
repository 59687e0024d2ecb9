"""Stop real fuselab-train runs the ways users and machines do, many times, and count losses.

    uv run python tools/interrupt_trials.py --trials 20 --json /tmp/trials.json

Each trial starts ``fuselab-train task=cartpole`` (PPO or async FastSAC) in its own process
group, saving every 2 iterations, lets it run a random number of iterations, then either
- ``double-sigint``: SIGINT to the group (a terminal's Ctrl-C), and a second one 0-300 ms later
  (``uv run`` forwards another copy; a user presses again), or
- ``sigkill``: SIGKILL to the learner process at a random moment (the OOM killer).

A trial is lost when any checkpoint in the run directory does not load, policy.onnx does not
load in onnxruntime, a double-SIGINT run does not exit 130 with the newest checkpoint named in
its last line, its output holds a traceback, or the learner's /dev/shm segments outlive it by
5 s. Prints one line per trial and the counts per (algorithm, kind).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fuselab_rl.checkpoint import CHECKPOINT_PATTERN, load_checkpoint

SCRIPTS = Path(sys.executable).parent
COMMON = [
    "task=cartpole",
    "num_envs=16",
    "progress=false",
    "plot=false",
    "threads=2",
    "save_interval=2",
    "max_iterations=100000",
]
ALGOS = {
    "ppo": ["algo.num_steps_per_env=8"],
    "fastsac": [
        "algo=fastsac",
        "algo.learning_starts=4",
        "algo.steps_per_iteration=4",
        "algo.batch_size=64",
        "algo.actor_hidden_dims=[32]",
        "algo.critic_hidden_dims=[32]",
    ],
}
KINDS = ("double-sigint", "sigkill")


def run_trial(algo: str, kind: str, workdir: Path, rng: random.Random) -> list[str]:
    """One trial; returns what was lost (empty: nothing)."""
    run_dir, log = workdir / "run", workdir / "stderr.txt"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [SCRIPTS / "fuselab-train", *COMMON, *ALGOS[algo], f"run_dir={run_dir}"],
            stdout=sink,
            stderr=sink,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            process_group=0,
        )
    try:
        target = rng.randint(2, 9)
        deadline = time.monotonic() + 180
        while not re.search(rf"it {target}/", log.read_text()):
            if process.poll() is not None or time.monotonic() > deadline:
                return [f"never reached iteration {target} (exit {process.poll()})"]
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.5))  # anywhere in the iteration or its save
        if kind == "double-sigint":
            os.killpg(process.pid, signal.SIGINT)
            time.sleep(rng.uniform(0.0, 0.3))
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.kill()
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return check_run(run_dir, log.read_text(), kind, code, process.pid)


def check_run(run_dir: Path, text: str, kind: str, code: int, pid: int) -> list[str]:
    import onnxruntime

    lost = []
    checkpoints = [p for p in run_dir.iterdir() if CHECKPOINT_PATTERN.match(p.name)]
    for path in checkpoints:
        try:
            load_checkpoint(path)
        except ValueError as error:
            lost.append(f"torn checkpoint {path.name}: {error}")
    if not checkpoints:
        lost.append("no checkpoint")
    onnx = run_dir / "policy.onnx"
    if onnx.exists():
        try:
            session = onnxruntime.InferenceSession(str(onnx))
            dim = session.get_inputs()[0].shape[1]
            session.run(None, {"obs": np.zeros((1, dim), np.float32)})
        except Exception as error:  # any failure to load or run is a loss
            lost.append(f"torn policy.onnx: {error}")
    elif kind == "double-sigint":
        lost.append("no policy.onnx")
    if kind == "double-sigint":
        if code != 128 + signal.SIGINT:
            lost.append(f"exit {code}, expected {128 + signal.SIGINT}")
        said = re.search(r"stopped by SIGINT: checkpoint of iteration (\d+) saved: (\S+)", text)
        newest = max(checkpoints, default=None, key=lambda p: int(p.stem.split("_")[1]))
        if said is None or newest is None or Path(said.group(2)) != newest:
            lost.append(f"the last line does not name the newest checkpoint {newest}")
        if "Traceback" in text:
            lost.append("a traceback")
    deadline = time.monotonic() + 5.0
    while segments := [n for n in os.listdir("/dev/shm") if f"_{pid}_" in n]:
        if time.monotonic() > deadline:
            lost.append(f"shared memory left: {segments}")
            break
        time.sleep(0.1)
    return lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="per algorithm and kind")
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=list(ALGOS))
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the per-trial results here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    results = []
    for algo in args.algos:
        for kind in args.kinds:
            for trial in range(args.trials):
                with tempfile.TemporaryDirectory(prefix="fuselab_trial_") as workdir:
                    started = time.perf_counter()
                    lost = run_trial(algo, kind, Path(workdir), rng)
                seconds = time.perf_counter() - started
                results.append({"algo": algo, "kind": kind, "trial": trial, "lost": lost})
                verdict = "ok" if not lost else "LOST: " + "; ".join(lost)
                print(f"{algo:8} {kind:14} {trial + 1:3}/{args.trials} {seconds:5.1f} s  {verdict}")
    print("\nruns with anything lost (per algorithm and kind):")
    for algo in args.algos:
        for kind in args.kinds:
            rows = [r for r in results if r["algo"] == algo and r["kind"] == kind]
            print(f"  {algo:8} {kind:14} {sum(bool(r['lost']) for r in rows)} of {len(rows)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
