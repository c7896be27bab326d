"""Recording through the server: key leases, run registration and the run's end.

`sealtrace record --server URL --store s3://…` (the token in SEALTRACE_TOKEN or on a
descriptor, never on the command line: `_record_token`) takes a run key from a lease pool kept
on this host (`_lease_pool`: public keys and run ids, each MACed under a key only the token
gives), refilling it from the server a batch at a time, so a run rarely waits on the server
and never for long. If the pool is empty and the server does not answer within a few seconds,
the run is not recorded (the program runs anyway, and says so once); the server is not asked
again until a back-off passes. Once the recorder has written the recording's header, the run
is registered with the header's wrapped key; when the program ends, the run is finished as
complete, incomplete (no final chunk: the recording stopped early) or failed (nothing reached
the store). The server's answers never hold anything secret; the token is sent only to the
server, never to the program, and never written to the pool or any other file.

Standard library and `cryptography` only: the recorder is imported into production processes.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._errors import UsageError
from ._keys import Recipient
from ._lease_pool import LeasePool, PooledKey, PoolState, pool_key

__all__ = ["Lease", "PlatformClient", "PlatformError"]

_BACKOFF_FIRST = 15.0
_BACKOFF_MAX = 600.0


class PlatformError(Exception):
    """The server refused or could not be reached."""


@dataclass(frozen=True)
class Lease:
    run_id: str
    recipient: Recipient
    store: str | None = None  # the server's choice of location, if it has one


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_server_url(url: str) -> str:
    """The server's URL, if its leases can be trusted on the way here: https, or plain http
    to this host only. Over plain http anyone on the path could swap a lease's public key
    for their own before the pool's MAC is written, and read every run sealed to it."""
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower()
    loopback = _loopback(host)
    if parts.scheme == "https" and host:
        return url
    if parts.scheme == "http" and loopback:
        return url
    if parts.scheme == "http" and host:
        raise UsageError(f"--server {url}: plain http is allowed only to this host "
                         "(127.0.0.1, ::1, localhost); use https")  # fmt: skip
    raise UsageError(f"--server {url}: not an https:// (or loopback http://) URL")


class PlatformClient:
    def __init__(
        self,
        url: str,
        token: str,
        *,
        batch: int = 8,
        timeout: float = 3.0,
        cache: Path | None = None,
    ) -> None:
        self.url = check_server_url(url).rstrip("/")
        self.token = token
        self.batch = batch
        self.timeout = timeout
        self.why = ""  # why the last lease() gave nothing
        self.notice = ""  # what the last lease() found wrong with the pool, if anything
        # One pool per server and token: never a key leased by another tenant's token.
        name = hashlib.sha256(f"{self.url}\0{token.split('_')[1:2]}".encode()).hexdigest()[:16]
        base = cache or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        # A concurrent recorder holds the lock while it asks the server (`timeout`).
        self.pool = LeasePool(base / "sealtrace" / f"leases-{name}.json",
                              pool_key(token, self.url), lock_timeout=2 * timeout)  # fmt: skip

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(  # noqa: S310 - the configured server's URL
            self.url + path,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise PlatformError(f"the server answered {exc.code} to {method} {path}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise PlatformError(f"the server is unreachable ({exc})") from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise PlatformError(f"the server's answer to {method} {path} is not JSON") from None

    # -- leases ---------------------------------------------------------------------------

    def lease(self) -> Lease | None:
        """A key for one run, or None (the reason in `self.why`)."""
        self.why = self.notice = ""
        with self.pool.locked() as pool:
            self.notice = self._pool_notice(pool)
            if not pool.keys:
                if time.time() < pool.retry_after:
                    self.why = "the server did not answer lately; not asking again yet"
                else:
                    try:
                        # Without a usable pool, no more than this run needs.
                        pool.keys = self._fetch(self.batch if pool.saved else 1)
                        pool.retry_after = pool.backoff = 0.0
                    except PlatformError as exc:
                        pool.backoff = min(max(pool.backoff, _BACKOFF_FIRST / 2) * 2,
                                           _BACKOFF_MAX)  # fmt: skip
                        pool.retry_after = time.time() + pool.backoff
                        self.why = str(exc)
            taken = pool.keys.pop(0) if pool.keys else None
        if taken is None:
            return None
        return Lease(taken.run_id, _recipient(taken.public_key), taken.store)

    def _pool_notice(self, pool: PoolState) -> str:
        """What to say once of the pool as it was found (entries dropped, or unusable)."""
        if pool.dropped:
            return (f"dropped {pool.dropped} entr{'y' if pool.dropped == 1 else 'ies'}"
                    f" of the lease pool {self.pool.path} that did not verify as the"
                    " server's (altered, planted, or written by an older sealtrace);"
                    " no key of theirs is used")  # fmt: skip
        return f"{pool.problem}; leasing without it" if pool.problem else ""

    def give_back(self, leases: list[Lease]) -> None:
        """Leases taken but never used (a rotation or a child that never came), back to the
        front of the pool for the next runs on this host, MACed as every entry is."""
        self.notice = ""
        if not leases:
            return
        with self.pool.locked() as pool:
            self.notice = self._pool_notice(pool)
            back = [PooledKey(lease.run_id, base64.urlsafe_b64encode(lease.recipient.raw)
                              .decode().rstrip("="), lease.store) for lease in leases]  # fmt: skip
            pool.keys[:0] = back

    def _fetch(self, count: int) -> list[PooledKey]:
        """Keys straight from the server, over the token's authenticated call: the only
        place a pool entry comes from."""
        found = self._call("POST", "/v1/keys/lease", {"count": count})
        try:
            keys = [PooledKey(str(k["run_id"]), str(k["public_key"]),
                              None if k.get("store") is None else str(k["store"]))
                    for k in found]  # fmt: skip
            for key in keys:
                _recipient(key.public_key)
        except (TypeError, KeyError, ValueError, AttributeError):
            raise PlatformError("the server's lease answer is malformed") from None
        return keys

    # -- runs -----------------------------------------------------------------------------

    def register(self, run_id: str, wrapped_key: bytes, *, store: str, service: str,
                 host: str) -> None:  # fmt: skip
        self._call("POST", f"/v1/runs/{run_id}/register", {
            "wrapped_recording_key": base64.urlsafe_b64encode(wrapped_key).decode(),
            "store": store, "service": service, "host": host,
        })  # fmt: skip

    def finish(self, run_id: str, status: str, *, exit_status: int | None = None,
               detail: str = "", requests: int | None = None) -> None:  # fmt: skip
        """The run ended; `requests`: how many requests its request index holds."""
        self._call("POST", f"/v1/runs/{run_id}/finish",
                   {"status": status, "exit_status": exit_status, "detail": detail,
                    "requests": requests})  # fmt: skip


def _recipient(public_key: str) -> Recipient:
    """A public key as the server sends it: raw X25519, base64url without padding."""
    return Recipient.from_raw(base64.urlsafe_b64decode(public_key + "=" * (-len(public_key) % 4)))
