"""sealtrace.server: the central server, the only part that can recover a recording key.

It holds runs' private keys, wrapped by KMS, and decides who may open what: settings
(`_settings`), the database, its models and Alembic migrations (`_db`, `_models`,
`migrations/`), passwords, scoped API tokens and the role table (`_auth`), the sign-in
limiter (`_login_limit`), agents' one-time enrollments and the credential each enrolled
agent holds (`_enrollment`), the hash-chained audit log, a chain per tenant whose heads a KMS
key MACs (`_audit`, `_audit_key`), the KMS key service that mints, leases and re-seals run
keys (`_key_service`), sessions that assign a run to one enrolled, live, disposable agent
(`_sessions`) and relay their questions and answers in memory (`_relay`), the errors
(`_errors`), what a person may do with a session or a sign-in, shared by the API and the
console (`_session_actions`, `_sign_in`), the v1 API (`_app`, `_deps`, `_routes`,
`_session_routes`) and the web console (`_console/`), run and administered by `sealtrace
server` (`cli`). It must never store or log a recording key in the clear or an answer, nor
hand a session to an agent that did not enroll. Not built: the MCP endpoint, and serving
from several processes.

Nothing imports this package; it imports the agent's public names, the sandbox's question
contract and the proxy.
"""

from typing import Any

from ._errors import (
    ActionRefused,
    AgentGone,
    DispatchError,
    EnrollmentRefused,
    KeyServiceError,
    NoAgent,
    RunNotFound,
    SessionClosed,
    SessionMoveRefused,
    SessionNotFound,
)

__all__ = [
    "ActionRefused",
    "AgentGone",
    "DispatchError",
    "EnrollmentRefused",
    "KeyServiceError",
    "NoAgent",
    "RunNotFound",
    "ServerSettings",
    "SessionClosed",
    "SessionMoveRefused",
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
