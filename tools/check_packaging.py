"""Build every distribution's wheel and sdist, install each wheel alone and smoke-check it.

For each distribution of the workspace, in layer order:

1. ``uv build --package NAME --out-dir DIST`` (uv builds the sdist, then the wheel from it);
   check the sdist holds pyproject.toml, README.md and every source and data file under
   ``src/``, and the wheel holds exactly those files (nothing missing, no tests or strays).
2. A fresh venv (``uv venv``) and ``uv pip install --python VENV WHEEL --find-links DIST``: the
   other fuselab distributions come from the wheels just built, everything else from the
   registry. The venv must then hold exactly the fuselab distributions the wheel depends on,
   at the built versions, and none of the packages it must not pull in (env_core: no
   simulator, no torch, no hydra).
3. A smoke check in that venv (this same file, run with ``--smoke NAME``, isolated from the
   checkout): import the package from the venv, ``__version__`` equals the wheel's version, and
   one real use of the package (a fused plan, a physics step, the G1 model and task configs).

fuselab-sim-backends is checked twice in its one venv: alone, then with ``[mjwarp,motrix]``.
Prints a table; exits 1 naming each distribution that failed and why.

    python tools/check_packaging.py [--keep] [--only fuselab-envs ...]
"""

from __future__ import annotations

import argparse
import email.parser
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("check_packaging")

ROOT = Path(__file__).resolve().parents[1]
WALKER_XML = ROOT / "packages/sim_backends/tests/walker.xml"  # a small model every backend steps
SMOKE_TERMS = Path(__file__).with_name("packaging_smoke_terms.py")  # env_core's smoke plan
SIMULATORS = ("mujoco", "mujoco-warp", "warp-lang", "motrixsim")
HEAVY = ("torch", "hydra-core", "omegaconf")


@dataclass(frozen=True)
class Distribution:
    name: str
    directory: str  # under packages/
    module: str
    requires: tuple[str, ...] = ()  # the fuselab distributions it installs with (itself too)
    data: tuple[str, ...] = ()  # files under src/ that must ship, whatever else changes
    forbidden: tuple[str, ...] = ()  # packages its install must not pull in
    extras: str = ""  # checked after the plain install, in the same venv


DISTRIBUTIONS = (
    Distribution(
        "fuselab-env-core",
        "env_core",
        "fuselab_env_core",
        requires=("fuselab-env-core",),
        forbidden=SIMULATORS + HEAVY,
    ),
    Distribution(
        "fuselab-sim-backends",
        "sim_backends",
        "fuselab_sim_backends",
        requires=("fuselab-env-core", "fuselab-sim-backends"),
        forbidden=("mujoco-warp", "warp-lang", "motrixsim", *HEAVY),
        extras="mjwarp,motrix",
    ),
    Distribution(
        "fuselab-envs",
        "envs",
        "fuselab_envs",
        requires=("fuselab-env-core", "fuselab-sim-backends", "fuselab-envs"),
        data=("fuselab_envs/g1/g1.xml", "fuselab_envs/configs/config.yaml"),
    ),
    Distribution(
        "fuselab-rl",
        "rl",
        "fuselab_rl",
        requires=("fuselab-env-core", "fuselab-sim-backends", "fuselab-envs", "fuselab-rl"),
    ),
)


class CheckFailed(Exception):
    pass


@dataclass
class Result:
    dist: Distribution
    wheel: Path | None = None
    sdist: Path | None = None
    version: str = ""
    sizes: dict[str, int] = field(default_factory=dict)  # bytes of "wheel" and "sdist"
    seconds: dict[str, float] = field(default_factory=dict)
    installed: int = 0  # distributions in the venv after the last install
    notes: list[str] = field(default_factory=list)
    failure: str = ""


# -- the checks, run from this checkout -----------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build, install alone and smoke-check each wheel.")
    parser.add_argument("--keep", action="store_true", help="keep the dist dir and venvs")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="check these distributions")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the venvs")
    parser.add_argument("--smoke", metavar="NAME", help=argparse.SUPPRESS)
    parser.add_argument("--expect-version", help=argparse.SUPPRESS)
    parser.add_argument("--extras", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        return run_smoke(args.smoke, args.expect_version, args.extras)

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        log.error("uv is needed to build and install the distributions (see .ci/run)")
        return 1
    on_disk = sorted(p.parent.name for p in (ROOT / "packages").glob("*/pyproject.toml"))
    covered = sorted(d.directory for d in DISTRIBUTIONS)
    if on_disk != covered:
        log.error(
            "packages/ has %s but this script checks %s: add them to DISTRIBUTIONS",
            on_disk,
            covered,
        )
        return 1
    chosen = [d for d in DISTRIBUTIONS if not args.only or d.name in args.only]
    unknown = sorted(set(args.only or ()) - {d.name for d in DISTRIBUTIONS})
    if unknown:
        log.error("unknown distributions %s; known: %s", unknown, [d.name for d in DISTRIBUTIONS])
        return 1

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="fuselab-packaging-"))
    dist_dir = work / "dist"
    try:
        # Every wheel first: an install finds the workspace packages it needs among them.
        results = [build(uv, d, dist_dir) for d in DISTRIBUTIONS]
        for result in results:
            if result.dist in chosen and not result.failure:
                install_and_smoke(uv, result, dist_dir, work, args.python, results)
    finally:
        if args.keep:
            log.info("kept %s", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    results = [r for r in results if r.dist in chosen]
    print_table(results)
    total = time.perf_counter() - started
    failed = [r for r in results if r.failure]
    for r in failed:
        log.error("%s: %s", r.dist.name, r.failure)
    log.info(
        "%d of %d distributions passed in %.1f s", len(results) - len(failed), len(results), total
    )
    return 1 if failed else 0


def build(uv: str, dist: Distribution, dist_dir: Path) -> Result:
    result = Result(dist)
    with step(result, "build"):
        before = set(dist_dir.glob("*")) if dist_dir.exists() else set()
        run([uv, "build", "--package", dist.name, "--out-dir", str(dist_dir)], cwd=ROOT)
        made = set(dist_dir.glob("*")) - before
        wheels = [p for p in made if p.suffix == ".whl"]
        sdists = [p for p in made if p.name.endswith(".tar.gz")]
        if len(wheels) != 1 or len(sdists) != 1:
            raise CheckFailed(f"expected one wheel and one sdist, uv build made {sorted(made)}")
        result.wheel, result.sdist = wheels[0], sdists[0]
        result.version = result.wheel.name.split("-")[1]
        result.sizes = {"wheel": result.wheel.stat().st_size, "sdist": result.sdist.stat().st_size}
        check_archives(result)
    return result


def check_archives(result: Result) -> None:
    """The sdist has the project files and all of src/; the wheel exactly src/'s contents."""
    dist = result.dist
    assert result.wheel and result.sdist
    sources = source_files(ROOT / "packages" / dist.directory / "src")
    missing_data = sorted(set(dist.data) - sources)
    if missing_data:
        raise CheckFailed(
            f"required files missing from packages/{dist.directory}/src: {missing_data}"
        )
    with tarfile.open(result.sdist) as sdist:
        top = result.sdist.name.removesuffix(".tar.gz")
        in_sdist = {m.name.removeprefix(top + "/") for m in sdist.getmembers() if m.isfile()}
    expected = {"pyproject.toml", "README.md", "PKG-INFO"} | {f"src/{f}" for f in sources}
    missing = sorted(expected - in_sdist)
    if missing:
        raise CheckFailed(f"sdist {result.sdist.name} lacks {missing}")
    with zipfile.ZipFile(result.wheel) as wheel:
        in_wheel = set(wheel.namelist())
    info = f"{dist.module}-{result.version}.dist-info/"
    payload = {f for f in in_wheel if not f.startswith(info)}
    if payload != sources:
        raise CheckFailed(
            f"wheel {result.wheel.name}: missing {sorted(sources - payload)}, "
            f"unexpected {sorted(payload - sources)}"
        )
    if f"{info}METADATA" not in in_wheel:
        raise CheckFailed(f"wheel {result.wheel.name} has no {info}METADATA")
    with zipfile.ZipFile(result.wheel) as wheel:
        metadata = email.parser.HeaderParser().parsestr(wheel.read(f"{info}METADATA").decode())
    if (metadata["Name"], metadata["Version"]) != (dist.name, result.version):
        raise CheckFailed(
            f"wheel {result.wheel.name} METADATA names {metadata['Name']} {metadata['Version']}"
        )
    result.notes.append(f"{len(sources)} files")


def source_files(src: Path) -> set[str]:
    """Files under src/ that the build should ship: what git tracks or would (not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "."],
        cwd=src,
        capture_output=True,
        text=True,
    )
    if listed.returncode == 0 and listed.stdout.strip():
        names = {line for line in listed.stdout.splitlines() if (src / line).is_file()}
    else:  # not a git checkout (an unpacked archive): every file but caches
        names = {
            str(p.relative_to(src))
            for p in src.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
        }
    return {n.replace(os.sep, "/") for n in names}


def install_and_smoke(
    uv: str, result: Result, dist_dir: Path, work: Path, python: str, built: list[Result]
) -> None:
    dist = result.dist
    assert result.wheel
    venv = work / f"venv-{dist.directory}"
    venv_python = venv / "bin" / "python"
    versions = {r.dist.name: r.version for r in built if r.version}
    with step(result, "venv"):
        run([uv, "venv", "--quiet", "--python", python, str(venv)], cwd=work)
    installs = [("", "install", "smoke")]
    if dist.extras:
        installs.append((f"[{dist.extras}]", "install extras", "smoke extras"))
    for extras, install_step, smoke_step in installs:
        if result.failure:
            return
        with step(result, install_step):
            # Fresh metadata for the workspace names: the wheels are new even if versions are not.
            refresh = [f"--refresh-package={r.dist.name}" for r in built]
            wheel = f"{result.wheel}{extras}"
            install = [uv, "pip", "install", "--python", str(venv_python), wheel]
            run([*install, "--find-links", str(dist_dir), *refresh], cwd=work)
            check_installed(uv, result, venv_python, versions, with_extras=bool(extras))
        if result.failure:
            return
        with step(result, smoke_step):
            here = str(Path(__file__).resolve())
            # -I: neither the checkout nor PYTHONPATH nor user site-packages is importable.
            command = [str(venv_python), "-I", here, "--smoke", dist.name]
            command += ["--expect-version", result.version]
            if extras:
                command.append("--extras")
            scratch = work / f"scratch-{dist.directory}"
            scratch.mkdir(exist_ok=True)
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": os.environ.get("HOME", str(scratch)),
                "FUSELAB_CACHE_DIR": str(scratch / "fuselab"),
                "NUMBA_CACHE_DIR": str(scratch / "numba"),
                "TMPDIR": os.environ.get("TMPDIR", tempfile.gettempdir()),
            }
            output = run(command, cwd=scratch, env=env, timeout=300)
            result.notes.append(json.loads(output.strip().splitlines()[-1])["detail"])


def check_installed(
    uv: str, result: Result, venv_python: Path, versions: dict[str, str], with_extras: bool
) -> None:
    """The venv holds the fuselab distributions the wheel needs, as built, and no more."""
    listed = run([uv, "pip", "list", "--python", str(venv_python), "--format", "json"], cwd=ROOT)
    installed = {p["name"]: p["version"] for p in json.loads(listed)}
    result.installed = len(installed)
    fuselab = {n: v for n, v in installed.items() if n.startswith("fuselab")}
    expected = {n: versions.get(n, "?") for n in result.dist.requires}
    if fuselab != expected:
        raise CheckFailed(f"venv holds fuselab distributions {fuselab}, expected {expected}")
    forbidden = [] if with_extras else sorted(set(result.dist.forbidden) & set(installed))
    if forbidden:
        raise CheckFailed(f"installing {result.wheel and result.wheel.name} pulled in {forbidden}")


class step:  # noqa: N801 - used as `with step(result, "build"):`
    """Time one step into result.seconds; turn its failure into result.failure."""

    def __init__(self, result: Result, name: str):
        self.result, self.name = result, name

    def __enter__(self) -> None:
        self.started = time.perf_counter()
        log.info("%s: %s ...", self.result.dist.name, self.name)

    def __exit__(self, kind, error, traceback) -> bool:
        seconds = time.perf_counter() - self.started
        self.result.seconds[self.name] = seconds
        if error is None:
            log.info("%s: %s ok (%.1f s)", self.result.dist.name, self.name, seconds)
            return False
        if not isinstance(error, CheckFailed):
            return False
        self.result.failure = f"{self.name}: {error}"
        first = str(error).splitlines()[0]  # the whole of it is in the summary at the end
        log.error("%s: %s FAILED (%.1f s): %s", self.result.dist.name, self.name, seconds, first)
        return True


def run(command: list[str], cwd: Path, env: dict | None = None, timeout: float = 600) -> str:
    """Run a command; on failure raise CheckFailed with the end of what it printed."""
    try:
        done = subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as error:
        raise CheckFailed(f"{Path(command[0]).name} timed out after {timeout:.0f} s") from error
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
        shown = " ".join(Path(c).name if os.sep in c else c for c in command[:6])
        # The last line first (the exception, uv's verdict): it is what the table shows.
        tail = "\n".join(lines[-25:])
        raise CheckFailed(f"{lines[-1]} (`{shown} ...` exited {done.returncode})\n{tail}")
    return done.stdout


def print_table(results: list[Result]) -> None:
    steps = ("build", "install", "smoke", "install extras", "smoke extras")
    header = [
        "distribution",
        "version",
        "wheel kB",
        "sdist kB",
        *(f"{s} s" for s in steps),
        "venv pkgs",
        "result",
    ]
    rows = []
    for r in results:
        times = [f"{r.seconds[s]:.1f}" if s in r.seconds else "-" for s in steps]
        outcome = f"FAIL ({r.failure.splitlines()[0]})" if r.failure else "ok"
        rows.append(
            [
                r.dist.name,
                r.version or "-",
                _kilobytes(r.sizes.get("wheel")),
                _kilobytes(r.sizes.get("sdist")),
                *times,
                str(r.installed or "-"),
                outcome,
            ]
        )
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for r in results:
        if r.notes:
            print(f"{r.dist.name}: {'; '.join(r.notes)}")


def _kilobytes(size: int | None) -> str:
    return "-" if size is None else f"{size / 1e3:.1f}"


# -- the smoke checks, run inside each fresh venv by --smoke ------------------------------------


def run_smoke(name: str, expected_version: str | None, extras: bool) -> int:
    """Import the installed package, check its version and where it came from, use it once."""
    import importlib
    import importlib.metadata

    dist = next(d for d in DISTRIBUTIONS if d.name == name)
    module = importlib.import_module(dist.module)
    origin = Path(module.__file__ or "").resolve()
    if not origin.is_relative_to(Path(sys.prefix).resolve()):
        raise SystemExit(f"{dist.module} imported from {origin}, not from the venv {sys.prefix}")
    versions = {module.__version__, importlib.metadata.version(name)}
    if versions != {expected_version}:
        raise SystemExit(
            f"{dist.module}.__version__ / metadata {sorted(versions)} != wheel {expected_version}"
        )
    smoke = SMOKES[dist.name + (" extras" if extras else "")]
    detail = smoke()
    print(json.dumps({"detail": detail}))
    return 0


def smoke_env_core() -> str:
    """A tiny plan of three terms, fused and compiled in the venv, against the NumPy oracle."""
    import importlib.util

    import numpy as np

    from fuselab_env_core import FusedTerms, NumpyTerms

    # The cached kernel imports its terms by module and name: the smoke terms live at module
    # level in their own file, registered under a name the kernel can import in this process.
    spec = importlib.util.spec_from_file_location(SMOKE_TERMS.stem, SMOKE_TERMS)
    sys.modules[SMOKE_TERMS.stem] = module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    rng = np.random.default_rng(0)
    state = {"joint_vel": rng.normal(size=(16, 4)).astype(np.float32)}
    cfg = {
        "rewards": {"speed": {"term": "smoke_speed_l2", "weight": -0.1}},
        "terminations": {"too_fast": {"term": "smoke_too_fast"}},
        "observations": {"policy": {"terms": {"joint_vel": {"term": "smoke_joint_vel"}}}},
    }
    fused = FusedTerms.build(cfg, state, dt=0.02)
    oracle = NumpyTerms(fused.plan, state)
    fused()
    oracle()
    np.testing.assert_allclose(fused.buffers.reward, oracle.buffers.reward, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(fused.buffers.terminated, oracle.buffers.terminated)
    np.testing.assert_array_equal(fused.buffers.obs["policy"], state["joint_vel"])
    if fused.report.cache != "miss":
        raise AssertionError(f"a fresh cache should miss, got {fused.report.cache!r}")
    return f"fused plan built ({fused.report.cache}, {fused.report.total_ms:.0f} ms) = oracle"


def _step_walker(backend_class: Callable) -> str:
    import numpy as np

    sim = backend_class(WALKER_XML.read_text(), 2)
    nq, nv, nu = sim.model.nq, sim.model.nv, sim.model.nu
    qpos, qvel = np.zeros((2, nq), np.float32), np.zeros((2, nv), np.float32)
    sim.set_controls(np.zeros((2, nu), np.float32))
    sim.step(1)
    sim.copy_qpos_qvel(qpos, qvel)
    if not (np.all(np.isfinite(qpos)) and np.all(qpos[:, 2] < 0.75) and np.all(qvel[:, 2] < 0)):
        raise AssertionError(f"the walker should start falling: qpos {qpos[:, :3]}")
    return f"{backend_class.__name__} stepped the walker"


def smoke_sim_backends() -> str:
    from fuselab_sim_backends.mujoco_cpu import MujocoBackend

    return _step_walker(MujocoBackend)


def smoke_sim_backends_extras() -> str:
    import warp

    from fuselab_sim_backends.mjwarp import MjWarpBackend
    from fuselab_sim_backends.motrix import MotrixBackend

    # Warp's kernels take minutes to compile on a CPU: import only; MotrixSim steps.
    return (
        f"{_step_walker(MotrixBackend)}, {MjWarpBackend.__name__} imports (warp {warp.__version__})"
    )


def smoke_envs() -> str:
    import fuselab_envs
    from fuselab_envs.g1 import ACTUATOR_NAMES, G1_XML_PATH
    from fuselab_sim_backends.model import load_spec  # mujoco.MjSpec.from_file, checked

    model = load_spec(G1_XML_PATH).compile()
    names = [model.actuator(i).name for i in range(model.nu)]
    if model.nu != 29 or names != list(ACTUATOR_NAMES):
        raise AssertionError(f"G1 from {G1_XML_PATH}: {model.nu} actuators {names}")
    # Each task's Hydra config composes from the YAML files the wheel ships.
    tasks = fuselab_envs.list_tasks()
    for task in tasks:
        fuselab_envs.compose(task)
    # The embedded motion clip ships and loads onto the G1's names.
    from fuselab_envs.cartpole import CARTPOLE_XML_PATH
    from fuselab_envs.motion import DEFAULT_MOTION_PATH, load_motion

    joints = tuple(model.joint(i).name for i in range(1, model.njnt))
    bodies = tuple(model.body(i).name for i in range(model.nbody))
    clip = load_motion(DEFAULT_MOTION_PATH, joint_names=joints, body_names=bodies)
    load_spec(CARTPOLE_XML_PATH).compile()
    return (
        f"G1 loads ({model.nu} actuators, {model.nbody} bodies), configs compose: {tasks}, "
        f"default clip {clip.num_frames} frames, cartpole loads"
    )


def smoke_rl() -> str:
    import fuselab_envs

    return f"imports, over fuselab-envs {fuselab_envs.__version__}"


SMOKES: dict[str, Callable[[], str]] = {
    "fuselab-env-core": smoke_env_core,
    "fuselab-sim-backends": smoke_sim_backends,
    "fuselab-sim-backends extras": smoke_sim_backends_extras,
    "fuselab-envs": smoke_envs,
    "fuselab-rl": smoke_rl,
}

if __name__ == "__main__":
    sys.exit(main())
