"""The agent's calls to the server's API (standard library HTTP, an agent token).

Everything the agent sends is about its own session: its public key, its state, and the
answers to its session's questions. Errors are ServerError with the status and the
server's one-line reason.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any

from ._errors import ServerError

__all__ = ["ServerClient"]


class ServerClient:
    def __init__(self, url: str, token: str, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 0
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(  # noqa: S310 - the configured server's http(s) URL
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:  # noqa: S310
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

    def register(self, public_key: bytes) -> dict[str, str]:
        _, found = self._call("POST", "/v1/agents",
                              {"public_key": base64.b64encode(public_key).decode()})  # fmt: skip
        return dict(found)

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
