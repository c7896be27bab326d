"""The lease pool: run keys leased from the server, kept on this host between runs.

A JSON file in the user's cache directory (`leases-<id>.json`, one per server and token),
shared under an flock by the recorders of that server and token on the host, so that a run
rarely waits on the server. It holds public keys, run ids, the server's choice of store and
the back-off after an unanswered call: nothing secret.

The file belongs to the user the recorded programs run as, so a program can rewrite it
(issue 21, finding 5). Everything in it therefore carries an HMAC-SHA256 under a key derived
with HKDF from the record token and the server's URL (`pool_key`): a lease is MACed when it
arrives from the server over the token's authenticated call, and a recorder uses only what
verifies. A key planted or altered by anything without the token (which the program never
sees: `_record_token`) is dropped, counted (`dropped`, said once on stderr by the caller) and
never sealed to; the recorder uses the next entry that verifies, or leases fresh keys.

What a writer of the file can still do: delete entries, hold the lock, fill the file with
noise, or bring back entries and back-off it saw earlier (a file rolled back). Each costs
runs their recording or the server some leases (denial of service), never confidentiality:
every key sealed to is one the server minted and the recorder received itself, and a run id
used twice is not registered twice (the server refuses a run that is no longer leased) nor
recorded over (a store keeps the first: written once locally, the oldest version in S3).
Reading the pool never fails a run and never
hangs one: anything malformed is an entry that does not verify, a pool path that is not a
regular file or a lock held too long means leasing without the pool.

Standard library and `cryptography` only: the recorder is imported into production processes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import json
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["POOL_VERSION", "LeasePool", "PoolState", "PooledKey", "pool_key"]

POOL_VERSION = 2  # 1 (before issue 21) had no MACs: its entries do not verify
_SALT = b"sealtrace lease pool v2"
_MAX_BYTES = 1 << 20  # a pool is a few kilobytes; more is noise, not read


def pool_key(token: str, url: str) -> bytes:
    """The MAC key of one server's and token's pool: only the token's holder derives it."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=url.encode())
    return hkdf.derive(token.encode())


@dataclass(frozen=True)
class PooledKey:
    run_id: str
    public_key: str  # raw X25519, base64url, as the server sent it
    store: str | None  # the server's choice of location


@dataclass
class PoolState:
    """The verified contents of the pool, changed in place while it is locked."""

    keys: list[PooledKey] = field(default_factory=list)
    retry_after: float = 0.0  # the server is not asked again before this time
    backoff: float = 0.0  # the last back-off, doubled at the next failure
    dropped: int = 0  # entries read that did not verify
    saved: bool = True  # False: the pool could not be used; changes are not kept
    problem: str = ""  # why not


class LeasePool:
    def __init__(self, path: Path, key: bytes, *, lock_timeout: float) -> None:
        self.path = path
        self._key = key
        self.lock_timeout = lock_timeout

    @contextlib.contextmanager
    def locked(self) -> Iterator[PoolState]:
        """The pool's verified state, written back when the block ends; an unusable pool
        gives an empty state (`saved` False, `problem` says why) that is not written."""
        try:
            fd = self._open_locked()
        except _Unusable as exc:
            yield PoolState(saved=False, problem=str(exc))
            return
        try:
            state = self._parse(_read_capped(fd))
            yield state
            data = json.dumps(self._encode(state)).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)  # and with it the lock

    # -- the file ---------------------------------------------------------------------------

    def _open_locked(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # Not a symlink, and never blocking on a FIFO put in its place.
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            reason = "is a symlink" if exc.errno == errno.ELOOP else f"cannot be opened ({exc})"
            raise _Unusable(f"the lease pool {self.path} {reason}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise _Unusable(f"the lease pool {self.path} is not a regular file")
            deadline = time.monotonic() + self.lock_timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise _Unusable(f"the lease pool {self.path} stayed locked for "
                                        f"{self.lock_timeout:g} s") from None  # fmt: skip
                    time.sleep(0.05)
        except BaseException:
            os.close(fd)
            raise

    # -- the contents -----------------------------------------------------------------------

    def _mac(self, kind: str, fields: list[Any]) -> str:
        message = json.dumps([kind, *fields], separators=(",", ":")).encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def _verified(self, kind: str, fields: list[Any], mac: object) -> bool:
        return isinstance(mac, str) and hmac.compare_digest(mac, self._mac(kind, fields))

    def _encode(self, state: PoolState) -> dict[str, Any]:
        keys = [
            {"run_id": k.run_id, "public_key": k.public_key, "store": k.store,
             "mac": self._mac("lease", [k.run_id, k.public_key, k.store])}
            for k in state.keys
        ]  # fmt: skip
        out: dict[str, Any] = {"version": POOL_VERSION, "keys": keys}
        if state.retry_after:
            times = [state.retry_after, state.backoff]
            out["backoff"] = {"retry_after": times[0], "backoff": times[1],
                              "mac": self._mac("backoff", times)}  # fmt: skip
        return out

    def _parse(self, raw: bytes | None) -> PoolState:
        state = PoolState()
        if raw == b"":
            return state  # a new pool
        try:
            doc = json.loads(raw) if raw is not None else None  # None: bigger than any pool
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            state.dropped = 1
            return state
        entries = doc.get("keys")
        seen: set[str] = set()
        for entry in entries if isinstance(entries, list) else []:
            found = _lease_fields(entry)
            if found is None or not self._verified("lease", found, entry.get("mac")):
                state.dropped += 1
            elif found[0] not in seen:  # a run id twice: a copied entry, used once at most
                seen.add(found[0])
                state.keys.append(PooledKey(*found))
        if entries is not None and not isinstance(entries, list):
            state.dropped += 1
        backoff = doc.get("backoff")
        if backoff is not None:
            times = _backoff_fields(backoff)
            if times is not None and self._verified("backoff", times, backoff.get("mac")):
                state.retry_after, state.backoff = times
            else:
                state.dropped += 1
        return state


class _Unusable(Exception):
    pass


def _read_capped(fd: int) -> bytes | None:
    data = bytearray()
    while len(data) <= _MAX_BYTES and (chunk := os.pread(fd, 1 << 16, len(data))):
        data += chunk
    return None if len(data) > _MAX_BYTES else bytes(data)


def _lease_fields(entry: object) -> list[Any] | None:
    if not isinstance(entry, dict):
        return None
    run_id, public, store = entry.get("run_id"), entry.get("public_key"), entry.get("store")
    if isinstance(run_id, str) and isinstance(public, str) and isinstance(store, str | None):
        return [run_id, public, store]
    return None


def _backoff_fields(backoff: object) -> list[float] | None:
    if not isinstance(backoff, dict):
        return None
    times = [backoff.get("retry_after"), backoff.get("backoff")]
    found = [float(t) for t in times if isinstance(t, int | float) and not isinstance(t, bool)]
    return found if len(found) == len(times) else None
