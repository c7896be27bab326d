"""A query pass's address-space layout: the same in every pass.

Every pass of a provenance query replays the run and names instructions by counter, so every
pass must execute the same instructions. Programs branch on addresses without meaning to: a
set of objects iterates in the order of their ids, and with address-space randomisation those
ids differ from one process to the next (a Flask + SQLAlchemy request loaded its columns in a
different order from pass to pass, and a trace named the wrong column's read). A replaying
process that answers a query therefore starts with randomisation off (personality(2),
ADDR_NO_RANDOMIZE, which fork and exec pass on) when the system lets the process starting it
say so. Where it is refused (the sandbox's seccomp profile allows only the default
personality), the pass starts as it is.

The replaying process itself never asks: whether it could would change what it allocates
before the program runs (ctypes, loaded only where the answer is no), and with it the
addresses of the program's objects, so that the same recording would iterate its sets in
another order in a container than on this host. What a pass itself allocates is kept apart by
sealtrace._engine.quiet.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["unrandomized_children"]

ADDR_NO_RANDOMIZE = 0x0040000
_QUERY = 0xFFFFFFFF  # personality(0xffffffff) answers the current one and changes nothing


@contextlib.contextmanager
def unrandomized_children() -> Iterator[None]:
    """Processes started inside run with randomisation off, where this process may say so."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    # The persona is unsigned: seccomp compares all 64 bits of the argument, and a Python int
    # passed as a C int arrives sign-extended (0xffffffff as 0xffffffffffffffff), which a
    # profile allowing only exact personas refuses.
    libc.personality.argtypes = [ctypes.c_ulong]
    libc.personality.restype = ctypes.c_int
    current = libc.personality(_QUERY)
    if current == -1 or current & ADDR_NO_RANDOMIZE:
        yield
        return
    if libc.personality(current | ADDR_NO_RANDOMIZE) == -1:
        yield
        return
    try:
        yield
    finally:
        libc.personality(current)
