"""sealtrace.proxy.boundary: the recording boundary, as replay sees it.

The public seam onto the recorder's boundary modules for the sandbox and the agent: the
declarative boundary table (BUILTIN_LIBRARIES, Library, Entry, register, libraries, install),
the runtime helpers replay checks calls with (is_own_code, path_under, args_digest) and runs
threads with (THREAD_SHIFT, ThreadBody, WouldBlock, outside_the_program), the
launch of the recorded target (Target, run_target), the package manifest a recording
carries (installed_manifest) and the recorder's replay switch (replay_hooks). Every name here
is a re-export of the private module that defines it; adapter spec strings such as
"sealtrace.proxy._core_boundary:install_datetime" are recorded and keep naming those modules.

It must never define boundary behaviour of its own, never install anything when imported,
and never import the recorder (sealtrace.proxy._recorder, which loads the adapters) until
installed_manifest or replay_hooks is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._boundary import BUILTIN_LIBRARIES, Entry, Library, install, libraries, register
from .._launch import Target, run_target
from .._runtime import THREAD_SHIFT, ThreadBody, WouldBlock, args_digest, is_own_code, path_under
from .._thread_boundary import outside_the_program

if TYPE_CHECKING:
    from .._recorder import installed_manifest, replay_hooks

__all__ = [
    "BUILTIN_LIBRARIES",
    "THREAD_SHIFT",
    "Entry",
    "Library",
    "Target",
    "ThreadBody",
    "WouldBlock",
    "args_digest",
    "install",
    "installed_manifest",
    "is_own_code",
    "libraries",
    "outside_the_program",
    "path_under",
    "register",
    "replay_hooks",
    "run_target",
]

_FROM_RECORDER = frozenset({"installed_manifest", "replay_hooks"})


def __getattr__(name: str) -> Any:
    if name in _FROM_RECORDER:
        from .. import _recorder

        return getattr(_recorder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
