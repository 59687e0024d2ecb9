"""plan_key: a stable hash of everything that changes the generated kernel, and nothing else.

In the key: the schema version, the Python and Numba versions, the code generator's source
(with its prefetch intrinsic and noise generator), the source of every term function and of the
helpers and global constants it uses, the plan's structure, its compile-time constants, and the
layouts and dtypes of its buffers. Not in the key: float parameter values (noise stds too),
reward weights, ``dt``, ``num_envs``, and the values and lengths of data arrays (a kernel reads
a data array by its dtype and number of dimensions: another motion clip is another table of
the same kind) -- those are runtime values, so tuning them never recompiles.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import sys
import types
from typing import Any

import numba
import numpy as np

from fuselab_env_core import codegen, noise, prefetch
from fuselab_env_core.plan import Const, Data, Input, Plan, Slot, TermCall
from fuselab_env_core.terms import ERROR_MODEL, FASTMATH, Term

SCHEMA_VERSION = 3  # 2: score and observe, task arrays, body names; 3: noise in the kernel
KEY_LENGTH = 24


def plan_key(plan: Plan) -> str:
    description = {
        "schema": SCHEMA_VERSION,
        "python": list(sys.version_info[:2]),
        "numba": numba.__version__,
        "codegen": _digest(
            inspect.getsource(codegen) + inspect.getsource(prefetch) + inspect.getsource(noise)
        ),
        "jit_options": [sorted(FASTMATH), ERROR_MODEL],
        # Lists, not dicts: the order of buffers is the order of the kernel's arguments.
        "state": [[n, list(s.shape), s.dtype.str] for n, s in plan.state.items()],
        "workspace": [[n, list(s.shape), s.dtype.str] for n, s in plan.workspace.items()],
        "slots": plan.slot_names,
        "data": [
            [name, a.dtype.str, a.ndim] for name, a in zip(plan.data_names, plan.data, strict=True)
        ],
        "terms": [_describe_call(call) for call in plan.terms()],
        "groups": [
            [g.name, g.width, g.noise, [t.entry for t in g.noisy_terms()]]
            for g in plan.observations.values()
        ],
    }
    return _digest(json.dumps(description, sort_keys=True))[:KEY_LENGTH]


def _describe_call(call: TermCall) -> dict[str, Any]:
    return {
        "label": call.label,
        "term": [call.term.name, call.term.kind, call.term.module, call.term.qualname],
        "source": source_digest(call.term.py_func),
        "args": [_describe_binding(b) for b in call.args],
        "weight_slot": call.weight_slot,
        "time_out": call.time_out,
        "reset": sorted(call.term.reset.items()),
        "layout": [call.group, call.col, call.size],
    }


def _describe_binding(binding) -> list[Any]:
    if isinstance(binding, Input):
        return ["input", binding.source, binding.name]
    if isinstance(binding, Slot):
        return ["slot", binding.index]
    if isinstance(binding, Const):
        return ["const", type(binding.value).__name__, repr(binding.value)]
    if isinstance(binding, Data):
        return ["data", binding.index]
    raise TypeError(f"unknown binding {binding!r}")


@functools.cache
def source_digest(fn: types.FunctionType) -> str:
    """Digest of ``fn``'s source plus every helper function and constant it reaches."""
    parts: list[str] = []
    _collect(fn, parts, seen=set())
    return _digest("\n".join(parts))


def _collect(fn: types.FunctionType, parts: list[str], seen: set[int]) -> None:
    if id(fn) in seen:
        return
    seen.add(id(fn))
    try:
        parts.append(inspect.getsource(fn))
    except (OSError, TypeError):
        parts.append(f"<no source: {fn.__module__}.{fn.__qualname__}>")
    namespace = dict(fn.__globals__)
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        namespace[name] = cell.cell_contents
    names = _referenced_names(fn.__code__)
    for name in sorted(names):
        if name not in namespace:
            continue
        value = namespace[name]
        if isinstance(value, types.ModuleType):  # helpers called as module.function
            for attribute in sorted(names):
                if hasattr(value, attribute):
                    member = getattr(value, attribute)
                    _collect_value(f"{name}.{attribute}", member, parts, seen, deep=False)
        else:
            _collect_value(name, value, parts, seen, deep=True)


def _collect_value(name: str, value: Any, parts: list[str], seen: set[int], deep: bool) -> None:
    function = _python_function(value)
    if function is not None:
        _collect(function, parts, seen)
    elif deep and isinstance(value, (bool, int, float, str, tuple, np.number)):
        parts.append(f"{name} = {value!r}")
    elif deep and isinstance(value, np.ndarray):
        parts.append(f"{name} = array {value.dtype.str} {value.shape} {_digest(value.tobytes())}")


def _python_function(value: Any) -> types.FunctionType | None:
    if isinstance(value, Term):
        return value.py_func
    py_func = getattr(value, "py_func", None)  # a Numba dispatcher
    if isinstance(py_func, types.FunctionType):
        return py_func
    return value if isinstance(value, types.FunctionType) else None


def _referenced_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names) | set(code.co_freevars)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _referenced_names(const)
    return names


def _digest(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(data).hexdigest()
