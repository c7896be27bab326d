"""Recording through the server: key leases, run registration and the run's end.

`sealtrace record --server URL --token T --store s3://…` takes a run key from a lease pool
kept on this host (public keys and run ids only, in the user's cache directory), refilling it
from the server a batch at a time, so a run rarely waits on the server and never for long. If
the pool is empty and the server does not answer within a few seconds, the run is not
recorded (the program runs anyway, and says so once); the server is not asked again until a
back-off passes. Once the recorder has written the recording's header, the run is registered
with the header's wrapped key; when the program ends, the run is finished as complete,
incomplete (no final chunk: the recording stopped early) or failed (nothing reached the
store). The server's answers never hold anything secret; the token is sent only to the
server, never to the program.

Standard library only: the recorder is imported into production processes.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._keys import Recipient

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
        self.url = url.rstrip("/")
        self.token = token
        self.batch = batch
        self.timeout = timeout
        # One pool per server and token: never a key leased by another tenant's token.
        name = hashlib.sha256(f"{self.url}\0{token.split('_')[1:2]}".encode()).hexdigest()[:16]
        base = cache or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        self.pool = base / "sealtrace" / f"leases-{name}.json"

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
        return json.loads(raw) if raw else None

    # -- leases ---------------------------------------------------------------------------

    def lease(self) -> Lease | None:
        """A key for one run, or None (the reason in `self.why`)."""
        self.why = ""
        self.pool.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.pool, "a+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # recorders on this host share the pool
            handle.seek(0)
            try:
                state = json.loads(handle.read() or "{}")
            except ValueError:
                state = {}
            keys: list[list[str | None]] = state.get("keys", [])
            if not keys:
                if time.time() < state.get("retry_after", 0):
                    self.why = "the server did not answer lately; not asking again yet"
                else:
                    try:
                        found = self._call("POST", "/v1/keys/lease", {"count": self.batch})
                        keys = [[k["run_id"], k["public_key"], k.get("store")] for k in found]
                        state.pop("retry_after", None)
                        state.pop("backoff", None)
                    except PlatformError as exc:
                        backoff = min(float(state.get("backoff", _BACKOFF_FIRST / 2)) * 2,
                                      _BACKOFF_MAX)  # fmt: skip
                        state.update(retry_after=time.time() + backoff, backoff=backoff)
                        self.why = str(exc)
            taken = keys.pop(0) if keys else None
            state["keys"] = keys
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(state))
        if taken is None:
            return None
        run_id, public, *rest = (str(item) if item is not None else None for item in taken)
        if run_id is None or public is None:
            return None
        raw = base64.urlsafe_b64decode(public + "=" * (-len(public) % 4))
        return Lease(run_id, Recipient.from_raw(raw), rest[0] if rest else None)

    # -- runs -----------------------------------------------------------------------------

    def register(self, run_id: str, wrapped_key: bytes, *, store: str, service: str,
                 host: str) -> None:  # fmt: skip
        self._call("POST", f"/v1/runs/{run_id}/register", {
            "wrapped_recording_key": base64.urlsafe_b64encode(wrapped_key).decode(),
            "store": store, "service": service, "host": host,
        })  # fmt: skip

    def finish(self, run_id: str, status: str, *, exit_status: int | None = None,
               detail: str = "") -> None:  # fmt: skip
        self._call("POST", f"/v1/runs/{run_id}/finish",
                   {"status": status, "exit_status": exit_status, "detail": detail})  # fmt: skip
