"""sealtrace.server: the central server (issue 6, under way).

Built: settings (`_settings`), the database and its migrations (`_db`, `_models`,
`migrations/`), passwords, scoped API tokens and the role table (`_auth`), the hash-chained
audit log (`_audit`), the KMS key service (`_key_service`), sessions and their relay
(`_sessions`, `_relay`), the errors (`_errors`), and the v1 API (`_app`, `_deps`, `_routes`,
`_session_routes`) run by `sealtrace server serve`. Not yet: the console and MCP.
Nothing imports this package; it imports the agent's contracts, the sandbox and the proxy.
"""

from typing import Any

from ._errors import (
    AgentGone,
    DispatchError,
    KeyServiceError,
    NoAgent,
    RunNotFound,
    SessionClosed,
    SessionNotFound,
)

__all__ = [
    "AgentGone",
    "DispatchError",
    "KeyServiceError",
    "NoAgent",
    "RunNotFound",
    "ServerSettings",
    "SessionClosed",
    "SessionNotFound",
    "create_app",
]


def __getattr__(name: str) -> Any:
    # Imported on first use: the `sealtrace` command loads this package's CLI on every run,
    # and must not pay for FastAPI and SQLAlchemy (or need them) to record or replay.
    if name == "create_app":
        from ._app import create_app

        return create_app
    if name == "ServerSettings":
        from ._settings import ServerSettings

        return ServerSettings
    raise AttributeError(name)
