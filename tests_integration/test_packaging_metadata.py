"""Each distribution's pyproject.toml, read without building: the metadata a registry needs and
dependencies that point down the layers only. `nox -s packaging` builds and installs them."""

from __future__ import annotations

import ast
import importlib.metadata
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).parents[1]
# Bottom to top: a distribution may depend only on those before it.
LAYERS = ["fuselab-env-core", "fuselab-sim-backends", "fuselab-envs", "fuselab-rl"]
DIRECTORIES = {name: name.removeprefix("fuselab-").replace("-", "_") for name in LAYERS}
NOT_IN_ENV_CORE = {"mujoco", "mujoco-warp", "warp-lang", "motrixsim", "torch", "hydra-core"}


def pyproject(directory: str) -> dict:
    return tomllib.loads((ROOT / "packages" / directory / "pyproject.toml").read_text())


def requirements(project: dict) -> list[Requirement]:
    return [Requirement(r) for r in project.get("dependencies", [])]


def test_every_package_directory_is_a_known_layer():
    on_disk = sorted(p.parent.name for p in (ROOT / "packages").glob("*/pyproject.toml"))
    assert on_disk == sorted(DIRECTORIES.values())


@pytest.mark.parametrize("name", LAYERS)
def test_project_table_has_what_a_registry_needs(name):
    directory = DIRECTORIES[name]
    data = pyproject(directory)
    project = data["project"]
    assert project["name"] == name
    assert project.get("dynamic", []) == []  # version and dependencies are written down
    assert project["version"].count(".") == 2, project["version"]
    assert len(project["description"]) > 20
    readme = ROOT / "packages" / directory / project["readme"]
    assert readme.is_file() and readme.stat().st_size > 100, readme
    assert SpecifierSet(project["requires-python"]).contains("3.10")
    assert project["license"] == "Apache-2.0"
    assert isinstance(project["dependencies"], list)
    module = name.replace("-", "_")
    assert data["build-system"]["build-backend"] == "hatchling.build"
    assert data["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == [f"src/{module}"]
    assert (ROOT / "packages" / directory / "src" / module / "__init__.py").is_file()


def test_requires_python_and_license_agree_across_distributions():
    projects = [pyproject(d)["project"] for d in DIRECTORIES.values()]
    assert len({p["requires-python"] for p in projects}) == 1
    assert len({p["license"] for p in projects}) == 1


@pytest.mark.parametrize("name", LAYERS)
def test_dependencies_point_down_the_layers(name):
    data = pyproject(DIRECTORIES[name])
    below = LAYERS[: LAYERS.index(name)]
    fuselab = [
        canonicalize_name(r.name) for r in requirements(data["project"]) if "fuselab" in r.name
    ]
    assert all(dep in below for dep in fuselab), f"{name} depends on {fuselab}, may on {below}"
    # Each layer stands on the one right under it (rl -> envs -> sim_backends -> env_core).
    assert set(below[-1:]) <= set(fuselab), f"{name} depends on {fuselab}"
    # ... found in this workspace, not looked up in a registry, while developing.
    sources = data.get("tool", {}).get("uv", {}).get("sources", {})
    for dep in fuselab:
        assert sources.get(dep) == {"workspace": True}, f"{name}: [tool.uv.sources] {dep}"


@pytest.mark.parametrize("name", LAYERS)
def test_dependencies_are_valid_and_bounded_below(name):
    for requirement in requirements(pyproject(DIRECTORIES[name])["project"]):
        if "fuselab" not in requirement.name:  # third-party: a floor that was tested
            assert any(s.operator in (">=", "~=", "==") for s in requirement.specifier), (
                f"{name}: {requirement} has no lower bound"
            )


def test_env_core_needs_no_simulator_torch_or_hydra():
    project = pyproject("env_core")["project"]
    names = {canonicalize_name(r.name) for r in requirements(project)}
    assert names == {"numpy", "numba"}
    assert not names & NOT_IN_ENV_CORE
    assert "optional-dependencies" not in project


def test_sim_backends_extras_name_each_backend():
    extras = pyproject("sim_backends")["project"]["optional-dependencies"]
    named = {
        extra: {canonicalize_name(Requirement(r).name) for r in reqs}
        for extra, reqs in extras.items()
    }
    assert named.get("mjwarp", set()) >= {"mujoco-warp", "warp-lang"}, named
    assert named.get("motrix", set()) >= {"motrixsim"}, named
    base = {canonicalize_name(r.name) for r in requirements(pyproject("sim_backends")["project"])}
    assert "mujoco" in base  # the CPU backend needs no extra
    assert not base & {"mujoco-warp", "warp-lang", "motrixsim"}  # the others stay optional


def test_workspace_dev_group_installs_every_distribution_with_every_extra():
    dev = [Requirement(r) for r in pyproject_root()["dependency-groups"]["dev"]]
    fuselab = {str(canonicalize_name(r.name)): r.extras for r in dev if "fuselab" in r.name}
    assert set(fuselab) == set(LAYERS)
    assert fuselab["fuselab-sim-backends"] == {"mjwarp", "motrix"}


@pytest.mark.parametrize("name", LAYERS)
def test_every_import_is_a_declared_dependency(name):
    """What src/ imports comes from the distribution's own dependencies (extras included), or
    theirs: the cheap form of what `nox -s packaging` checks by installing each wheel alone."""
    directory = DIRECTORIES[name]
    imports = imported_top_level_names(ROOT / "packages" / directory / "src")
    fuselab = {i for i in imports if i.startswith("fuselab_")}
    allowed = {n.replace("-", "_") for n in LAYERS[: LAYERS.index(name) + 1]}
    assert fuselab <= allowed, f"{name} imports {sorted(fuselab - allowed)}: imports point down"
    project = pyproject(directory)["project"]
    declared = requirements(project) + [
        Requirement(r) for reqs in project.get("optional-dependencies", {}).values() for r in reqs
    ]
    closure = dependency_closure(declared)
    providers = importlib.metadata.packages_distributions()
    for module in sorted(imports - fuselab):
        provided_by = {canonicalize_name(d) for d in providers.get(module, [])}
        assert provided_by, f"{name} imports {module}, which no installed distribution provides"
        assert provided_by & closure, (
            f"{name} imports {module} (from {sorted(provided_by)}), not among its dependencies"
        )


def imported_top_level_names(src: Path) -> set[str]:
    """Top-level modules imported anywhere under src/ (lazy imports too), less the stdlib."""
    names = set()
    for path in src.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"__future__"}


def dependency_closure(declared: list[Requirement]) -> set[str]:
    """The declared distributions and, as installed here, everything they require."""
    seen: set[str] = set()
    expanded: set[tuple[str, str]] = set()  # (distribution, extra) whose requirements are queued
    pending = [(r, "") for r in declared]
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        seen.add(name)
        for wanted in {"", *requirement.extras} - {e for n, e in expanded if n == name}:
            expanded.add((name, wanted))
            try:
                requires = importlib.metadata.requires(name) or []
            except importlib.metadata.PackageNotFoundError:
                break  # not installed here: the import check names what is missing
            pending += [(Requirement(r), wanted) for r in requires]
    return seen


def pyproject_root() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())
