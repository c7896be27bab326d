"""What a person does with a replay session: open one on a run, ask it a question of the
contract, close it; and the audit event each leaves, whichever way the person came in. The
v1 API (sealtrace.server._session_routes) and the console (sealtrace.server._console) both
call these, so both ask through the same question contract, refuse alike and leave the same
events: `session.open`, `session.<kind>` (`session.question` for one that does not parse)
and `session.close`, each `ok`, `failed` (tried and did not work) or `denied` (refused
before anything was tried). Details are the server's own words, never the question's text
or an answer.

Every refusal is an ActionRefused carrying the HTTP status the API answers with; the API
turns it into its error response, the console into a page. Nothing here knows HTTP beyond
that number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sealtrace.sandbox import QueryError
from sealtrace.sandbox.questions import check_answer, parse_question, question_json

from ._auth import Principal
from ._errors import (
    ActionRefused,
    AgentGone,
    DispatchError,
    KeyServiceError,
    NoAgent,
    RunNotFound,
    SessionClosed,
    SessionNotFound,
)
from ._models import PlatformSession

if TYPE_CHECKING:
    from ._deps import Services

__all__ = ["ask", "close_session", "judge", "open_session", "users_session"]

# The statuses, by number: Starlette renamed 422's constant across versions.
NOT_FOUND, CONFLICT, UNPROCESSABLE = 404, 409, 422
BAD_GATEWAY, UNAVAILABLE, GATEWAY_TIMEOUT = 502, 503, 504


def open_session(
    services: Services, who: Principal, run_id: str, process: str = ""
) -> PlatformSession:
    """Assign an idle agent to `run_id` for `who` (a user holding sessions:open), to replay
    its recorded process or one it forked (`process`, a path checked by the caller)."""
    assert who.user_id is not None  # sessions:* are user permissions only
    try:
        session = services.sessions.open(who.tenant_id, who.user_id, run_id, process)
    except RunNotFound as exc:
        services.audit(who, "session.open", run_id, "denied", str(exc))
        raise ActionRefused(NOT_FOUND, str(exc)) from None
    except (NoAgent, KeyServiceError, DispatchError) as exc:
        services.audit(who, "session.open", run_id, "failed", str(exc))
        raise ActionRefused(UNAVAILABLE, str(exc)) from None
    where = f"{run_id} process {process}" if process else run_id
    services.audit(who, "session.open", f"{where} {session.id}", "ok")
    return session


def users_session(
    services: Services, who: Principal, session_id: str, *, audit: str | None = None
) -> PlatformSession:
    """The session, if `who` opened it (404 otherwise, whoever else's it is); the refusal is
    audited as `audit` when that is given."""
    assert who.user_id is not None  # sessions:* are user permissions only
    try:
        return services.sessions.get(who.tenant_id, session_id, user_id=who.user_id)
    except SessionNotFound as exc:
        if audit is not None:
            services.audit(who, audit, session_id, "denied", str(exc))
        raise ActionRefused(NOT_FOUND, str(exc)) from None


def ask(
    services: Services, who: Principal, session_id: str, body: Mapping[str, Any]
) -> dict[str, Any]:
    """The answer to the question `body` (its JSON form: sealtrace.sandbox.questions) from
    the session's sandbox: the document `sealtrace trace|flows|... --json` prints. It passes
    through this server's memory only."""
    try:
        question = parse_question(body)
    except QueryError as exc:
        # Its kind is unknown, and its text is the user's: the event says neither.
        services.audit(who, "session.question", session_id, "denied", "the question is invalid")
        raise ActionRefused(UNPROCESSABLE, str(exc)) from None
    action = f"session.{question.kind}"
    session = users_session(services, who, session_id, audit=action)
    if session.status != "ready":
        services.audit(who, action, session_id, "failed", f"the session is {session.status}")
        raise ActionRefused(CONFLICT, f"the session is {session.status}")
    request = question_json(question)
    try:
        answer = services.relay.ask(session_id, request, timeout=services.settings.query_timeout)
    except AgentGone as exc:
        services.sessions.fail(who.tenant_id, session_id, str(exc))
        services.audit(who, action, session_id, "failed", str(exc))
        raise ActionRefused(BAD_GATEWAY, f"the session failed: {exc}") from None
    except SessionClosed as exc:
        services.audit(who, action, session_id, "failed", f"the session ended: {exc}")
        raise ActionRefused(CONFLICT, f"the session ended: {exc}") from None
    except TimeoutError:
        services.audit(who, action, session_id, "failed", "no answer in time")
        raise ActionRefused(GATEWAY_TIMEOUT, "no answer in time") from None
    status_code, detail, document = judge(question.kind, answer)
    services.audit(who, action, session_id, "ok" if document is not None else "failed",
                   "" if document is not None else f"answered {status_code}")  # fmt: skip
    if document is None:
        raise ActionRefused(status_code, detail)
    return document


# What an agent may say of a question it could not answer: the question was wrong (422) or
# the replay diverged before the answer (409). The server, not the agent, picks the status.
_AGENT_STATUSES = frozenset({CONFLICT, UNPROCESSABLE})


def judge(kind: str, answer: Any) -> tuple[int, str, dict[str, Any] | None]:
    """(status, detail, document) for an agent's answer: its document when that has the
    contract's shape for `kind`, its error with one of the statuses an agent may choose, and
    502 for anything else (the agent is not trusted to shape the user's response)."""
    if not isinstance(answer, dict):
        return BAD_GATEWAY, "the agent sent no answer", None
    if "error" in answer:
        code = answer.get("status")
        if type(code) is not int or code not in _AGENT_STATUSES:
            return BAD_GATEWAY, "the agent sent an invalid answer", None
        return code, str(answer["error"])[:2000], None
    document: Any = answer.get("document")
    if check_answer(kind, document):
        return BAD_GATEWAY, "the agent sent an invalid answer", None
    return 200, "", dict(document)


def close_session(services: Services, who: Principal, session_id: str) -> PlatformSession:
    """End `who`'s session; its agent exits."""
    assert who.user_id is not None  # sessions:* are user permissions only
    try:
        session = services.sessions.close(who.tenant_id, who.user_id, session_id)
    except SessionNotFound as exc:
        services.audit(who, "session.close", session_id, "denied", str(exc))
        raise ActionRefused(NOT_FOUND, str(exc)) from None
    services.audit(who, "session.close", session_id, "ok")
    return session
