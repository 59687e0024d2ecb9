"""Partial stub for ``mujoco``, read by pyright only (``stubPath`` in the root pyproject.toml).

MuJoCo's bindings (MjModel, MjData, MjSpec, mj_* functions, mjt* enums, ...) are re-exported by
``mujoco/__init__.py`` with ``import *`` from compiled modules that ship no type information, so
pyright sees none of them. The module-level ``__getattr__`` marks this stub incomplete (PEP 484):
every attribute of ``mujoco`` is ``Any``, and only for this one module. Submodules with Python
sources (``mujoco.viewer``, ``mujoco.rollout``, ...) still resolve to those sources.
Delete this folder once mujoco ships type stubs.
"""

from typing import Any

def __getattr__(name: str) -> Any: ...
