"""The local stack (infra/local/stack.py), the platform `make up` and `make demo` run, loaded
for the end-to-end tests: they build their platform with the same `Stack`."""

from __future__ import annotations

import importlib.util

from ..conftest import REPO

_spec = importlib.util.spec_from_file_location(
    "sealtrace_stack", REPO / "infra" / "local" / "stack.py"
)
assert _spec is not None and _spec.loader is not None
stack = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stack)
Platform = stack.Stack

__all__ = ["Platform", "stack"]
