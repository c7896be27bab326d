"""A query pass's address-space layout: the same in every pass.

Every pass of a provenance query replays the run and names instructions by counter, so every
pass must execute the same instructions. Programs branch on addresses without meaning to: a
set of objects iterates in the order of their ids, and with address-space randomisation those
ids differ from one process to the next (a Flask + SQLAlchemy request loaded its columns in a
different order from pass to pass, and a trace named the wrong column's read). A replaying
process that answers a query therefore runs with randomisation off (personality(2),
ADDR_NO_RANDOMIZE) when the system lets it: it sets the flag and executes itself again once.
Where it is refused (a seccomp profile that only allows the default personality), the pass
goes on as it is. What a pass itself allocates is kept apart by sealtrace._engine.quiet.
"""

from __future__ import annotations

import os
import sys

__all__ = ["fixed_layout"]

ADDR_NO_RANDOMIZE = 0x0040000


def fixed_layout() -> None:
    """Return with randomisation off, re-executing this process if needed; or as it was."""
    try:
        with open("/proc/self/personality") as f:
            current = int(f.read().strip(), 16)
    except (OSError, ValueError):
        return
    if current & ADDR_NO_RANDOMIZE:
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.personality(current | ADDR_NO_RANDOMIZE) == -1:
        return
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])  # noqa: S606 - this very process
