"""Sign-in attempts, limited in memory so that passwords cannot be guessed at speed.

Failed sign-ins are counted over a sliding window, per (address, tenant/user) and per
address: past `per_account` failures for one account from one address, or `per_address`
failures from one address whatever the accounts, further attempts are refused (429) until
the oldest failure leaves the window. A success clears its account's count for that address.
The key always holds the address, so failures never lock a user out from elsewhere; a
guesser spread over many addresses is not stopped here (that needs a shared store, not
built). The count lives in one server process's memory, like the relay.

It must never raise, and never grow without bound: names it counts are attacker-chosen.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ["LoginLimiter"]

_MAX_KEYS = 100_000  # past this, keys with no failure in the window are dropped


class LoginLimiter:
    def __init__(
        self,
        *,
        per_account: int,
        per_address: int,
        window: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_account = per_account
        self.per_address = per_address
        self.window = window
        self.clock = clock
        self._failures: dict[tuple[str, ...], deque[float]] = {}
        self._lock = threading.Lock()

    def _keys(self, address: str, account: str) -> tuple[tuple[tuple[str, ...], int], ...]:
        return ((("account", address, account), self.per_account),
                (("address", address), self.per_address))  # fmt: skip

    def retry_after(self, address: str, account: str) -> float | None:
        """Seconds until `account` may be tried again from `address`; None if it may now."""
        now = self.clock()
        wait = 0.0
        with self._lock:
            for key, limit in self._keys(address, account):
                stamps = self._fresh(key, now)
                if len(stamps) >= limit:
                    wait = max(wait, stamps[len(stamps) - limit] + self.window - now)
        return wait if wait > 0 else None

    def failed(self, address: str, account: str) -> None:
        now = self.clock()
        with self._lock:
            if len(self._failures) >= _MAX_KEYS:
                self._prune(now)
            for key, limit in self._keys(address, account):
                stamps = self._failures.setdefault(key, deque())
                stamps.append(now)
                while len(stamps) > limit:  # older ones no longer decide anything
                    stamps.popleft()

    def succeeded(self, address: str, account: str) -> None:
        with self._lock:
            self._failures.pop(("account", address, account), None)

    def _fresh(self, key: tuple[str, ...], now: float) -> deque[float]:
        stamps = self._failures.get(key, deque())
        while stamps and stamps[0] <= now - self.window:
            stamps.popleft()
        return stamps

    def _prune(self, now: float) -> None:
        for key in [k for k, s in self._failures.items() if not s or s[-1] <= now - self.window]:
            del self._failures[key]
