"""Developer sessions: `uv run nox -s test_all` (the README's test command), per-package tests,
`bench` and `lint`. Each test session installs only what it names, so a missing dependency shows.
`packaging` builds every wheel and installs each one alone (.ci/run runs it after test_all).
"""

from pathlib import Path

import nox

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["test_all"]

ROOT = Path(__file__).parent
# Install order follows the layers: each package depends only on the ones before it.
PACKAGES = ["env_core", "sim_backends", "envs", "rl"]
EXTRAS = {"sim_backends": "[mjwarp,motrix]"}  # every backend is tested
# matplotlib: the bench report the tests check; playwright: the viewer's browser test (it drives
# the system's Chromium, which .ci/run installs: Playwright downloads no browser here)
TEST_TOOLS = ["pytest>=8", "matplotlib>=3.8", "playwright>=1.40"]
# One kernel cache per checkout, shared by every session and test subprocess of a run.
CACHE_ENV = {
    "FUSELAB_CACHE_DIR": str(ROOT / ".cache" / "fuselab"),
    "NUMBA_CACHE_DIR": str(ROOT / ".cache" / "numba"),
}


def install_packages(session: nox.Session, packages: list[str]) -> None:
    session.install(*(f"./packages/{p}{EXTRAS.get(p, '')}" for p in packages), *TEST_TOOLS)


@nox.session(name="test")
@nox.parametrize("package", PACKAGES)
def test_package(session: nox.Session, package: str) -> None:
    """One package's tests with only that package and the packages it depends on."""
    install_packages(session, PACKAGES[: PACKAGES.index(package) + 1])
    session.run("pytest", f"packages/{package}/tests", *session.posargs, env=CACHE_ENV)


@nox.session
def test_all(session: nox.Session) -> None:
    """Every package's tests plus tests_integration/, in one environment."""
    install_packages(session, PACKAGES)
    test_dirs = [f"packages/{p}/tests" for p in PACKAGES] + ["tests_integration"]
    # the slowest tests are listed at the end: where CI's minutes go, in every CI log
    session.run("pytest", *test_dirs, "--durations=15", *session.posargs, env=CACHE_ENV)


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmark suite; pass e.g. `-- core --quick` to choose."""
    install_packages(session, PACKAGES)
    session.install("matplotlib")
    args = session.posargs or ["--json", "bench_results/bench.json", "--report", "bench_results"]
    session.run("python", "tools/bench.py", *args, env=CACHE_ENV)


@nox.session
def lint(session: nox.Session) -> None:
    install_packages(session, PACKAGES)
    session.install("ruff", "pyright")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("pyright")


@nox.session
def packaging(session: nox.Session) -> None:
    """Build every wheel and sdist; install each wheel alone in a fresh venv and smoke-check it.

    The script needs only the standard library and uv (it makes its own venvs), so this session
    installs nothing. Pass e.g. `-- --only fuselab-envs --keep` to choose and to inspect.
    """
    session.run("python", "tools/check_packaging.py", *session.posargs)
