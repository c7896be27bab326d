"""Process hygiene for the processes that hold keys (the agent, the server): no core dump and
no other process of the same user reading their memory (ptrace, /proc/PID/mem) unless it holds
CAP_SYS_PTRACE. Called before any key is made or unwrapped."""

from __future__ import annotations

import ctypes
import resource
import sys

__all__ = ["harden_process"]

_PR_SET_DUMPABLE = 4


def harden_process() -> None:
    """Disable core dumps and mark this process non-dumpable (Linux); elsewhere only the core
    limit. Raises OSError if the kernel refuses: a key holder must not run without it."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, "prctl(PR_SET_DUMPABLE, 0) failed")
