"""Every error sealtrace.server raises of its own. None reaches a command line: routes turn
each into an HTTP status (shown after the arrow), so none carries an exit code.

    Exception
    ├── ActionRefused                   what a person asked of the server (a session opened,
    │                                   a question, a close, a sign-in) was refused or failed;
    │                                   it carries the HTTP status the API answers with
    ├── KeyServiceError                 the key service could not do what was asked: KMS
    │   │                               refused, a run in the wrong state, a bad wrapped key
    │   │                               → 409 (runs), 503 (leases, sessions)
    │   └── RunNotFound                 no such run for this tenant → 404
    ├── NoAgent                         no enrolled, live, idle agent for the tenant → 503
    ├── EnrollmentRefused               an agent's enrollment credential is unknown, wrong,
    │                                   expired or already used → 401 (audited)
    ├── SessionNotFound                 no such session (or agent) for this tenant → 404
    ├── SessionMoveRefused              an agent reported a state its session cannot move
    │                                   to from where it is (closed back to ready) → 409
    ├── DispatchError                   the assignment could not be queued (Redis
    │                                   unreachable); the session has failed → 503
    ├── SessionClosed                   the session closed (or failed) while a question
    │                                   waited → 409; to the agent's poll, a close
    └── AgentGone                       the agent stopped polling while a question waited;
                                        the session fails → 502

A question that waits past its time is the standard library's TimeoutError (→ 504).
"""

from __future__ import annotations

__all__ = [
    "ActionRefused",
    "AgentGone",
    "DispatchError",
    "EnrollmentRefused",
    "KeyServiceError",
    "NoAgent",
    "RunNotFound",
    "SessionClosed",
    "SessionMoveRefused",
    "SessionNotFound",
]


class ActionRefused(Exception):
    """A person's action refused or failed (sealtrace.server._session_actions,
    sealtrace.server._sign_in), already audited: `status` is the HTTP status the API answers,
    `detail` the server's own words, `headers` any the answer carries (Retry-After)."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers or {}


class KeyServiceError(Exception):
    """The key service could not do what was asked (KMS refused, a run in the wrong state)."""


class RunNotFound(KeyServiceError):
    """No such run for this tenant (callers answer 404, whether it exists elsewhere or not)."""


class NoAgent(Exception):
    """No enrolled, live, idle agent for the tenant."""


class EnrollmentRefused(Exception):
    """An enrollment credential that enrolls nothing: unknown, wrong, expired or used. The
    message says which, for the audit log only: the presenter is told none of it. `tenant_id`
    and `enrollment_id` are the credential's, when its id is known."""

    def __init__(self, why: str, *, tenant_id: int | None = None, enrollment_id: str = "") -> None:
        super().__init__(why)
        self.tenant_id = tenant_id
        self.enrollment_id = enrollment_id


class SessionNotFound(Exception):
    """No such session for this tenant."""


class SessionMoveRefused(Exception):
    """An agent's report would move its session backwards or skip a step; nothing changed."""


class DispatchError(Exception):
    """The assignment could not be queued (Redis unreachable); the session has failed."""


class SessionClosed(Exception):
    """The session was closed (or failed) while a question waited."""


class AgentGone(Exception):
    """The agent stopped polling while a question waited."""
