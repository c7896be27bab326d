"""The runner's memory limit on everything it started: the sandbox's stand-in for a cgroup.

Rootless Podman gets no cgroup memory controller on these hosts, and RLIMIT_AS bounds one
process at a time (a fork bomb of large processes would pass it). So the runner watches its
descendants (in a container: every other process) and kills all of them when together they
hold more than the session's limit. The sum is of resident memory; only when that is over
the limit is it recounted proportionally (PSS), since fork checkpoints share most of their
pages and each one's RSS counts the shared pages in full. A process whose PSS cannot be read
counts with its RSS.

The watch is sampled (every `interval` seconds), so memory can overshoot by what a process
allocates in one interval; RLIMIT_AS still caps each process outright.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterable

__all__ = ["MemoryWatch", "descendants"]

_PAGE = os.sysconf("SC_PAGE_SIZE")


def descendants(root: int) -> list[int]:
    """Every live process below `root`, from /proc's parent links."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] not in (b"Z", b"X"):  # the dead hold no memory and need no signal
            parents[int(entry)] = int(fields[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found.extend(frontier)
    return found


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
            for line in handle:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return _rss(pid)


class MemoryWatch:
    def __init__(self, limit: int, interval: float = 0.05) -> None:
        self.limit = limit
        self.interval = interval
        self.fired = False
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)

    def start(self) -> MemoryWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def used(self, pids: Iterable[int]) -> int:
        """What `pids` hold together: RSS, or PSS once RSS says over the limit."""
        pids = list(pids)
        total = sum(_rss(pid) for pid in pids)
        if total > self.limit:
            total = sum(_pss(pid) for pid in pids)
        return total

    def check(self) -> bool:
        """One look; kills every descendant and returns True when over the limit."""
        pids = descendants(os.getpid())
        used = self.used([os.getpid(), *pids])
        self.peak = max(self.peak, used)
        if used <= self.limit:
            return False
        self.fired = True
        # Kill until nothing is left: a process may fork while the others die.
        for _ in range(100):
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            pids = descendants(os.getpid())
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self.check():
                return
