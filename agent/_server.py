"""The agent's calls to the server's API (standard library HTTP).

An agent enrolls once: it presents the one-time enrollment credential it was started with,
and its boot-time public key, and from then on calls with the credential the server issued
to it alone (bound to its agent id; it dies with the agent). Everything the agent sends is
about itself and its own session: its public key, its heartbeat, its state, and the answers
to its session's questions. A launcher's one call (mint_enrollment, for `sealtrace
launch-agent`) is here too. Errors are ServerError with the status and the server's
one-line reason.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any

from ._errors import ServerError

__all__ = ["ServerClient", "mint_enrollment"]


def _call(url: str, token: str, method: str, path: str, body: dict[str, Any] | None = None,
          timeout: float = 60.0) -> tuple[int, Any]:  # fmt: skip
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(  # noqa: S310 - the configured server's http(s) URL
        url + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read()).get("detail", exc.reason)
        except ValueError:
            reason = exc.reason
        raise ServerError(f"{method} {path}: {exc.code} {reason}", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        raise ServerError(f"{method} {path}: the server is unreachable ({exc})") from None


def mint_enrollment(url: str, launcher_token: str) -> str:
    """A launcher's call: a one-time enrollment for the one agent it is about to start."""
    _, found = _call(url.rstrip("/"), launcher_token, "POST", "/v1/agents/enrollments", {})
    return str(found["enrollment"])


class ServerClient:
    """One agent's calls. It holds no credential until enroll() exchanges its one-time
    enrollment for the agent's own."""

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._credential = ""

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 0
    ) -> tuple[int, Any]:
        return _call(self.url, self._credential, method, path, body, timeout or self.timeout)

    def enroll(self, enrollment: str, public_key: bytes) -> dict[str, str]:
        """Present the one-time enrollment (its use consumes it) and the boot-time public
        key; keep the agent's own credential. Returns the agent's id and queue."""
        _, found = _call(self.url, enrollment, "POST", "/v1/agents",
                         {"public_key": base64.b64encode(public_key).decode()},
                         self.timeout)  # fmt: skip
        self._credential = str(found["credential"])
        return {"agent_id": str(found["agent_id"]), "queue": str(found["queue"])}

    def heartbeat(self, agent_id: str) -> None:
        self._call("POST", f"/v1/agents/{agent_id}/heartbeat")

    def state(self, agent_id: str, session_id: str, state: str, detail: str = "") -> None:
        self._call("POST", f"/v1/agents/{agent_id}/sessions/{session_id}/state",
                   {"state": state, "detail": detail[:2000]})  # fmt: skip

    def next(self, agent_id: str, session_id: str, wait: float = 20.0) -> dict[str, Any] | None:
        status, found = self._call(
            "GET", f"/v1/agents/{agent_id}/sessions/{session_id}/next?wait={wait:g}",
            timeout=wait + 30,
        )  # fmt: skip
        return None if status == 204 else dict(found)

    def answer(self, agent_id: str, session_id: str, question_id: int,
               answer: dict[str, Any]) -> None:  # fmt: skip
        self._call("POST", f"/v1/agents/{agent_id}/sessions/{session_id}/answers/{question_id}",
                   answer)  # fmt: skip
