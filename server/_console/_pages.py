"""The console's routes. Each reads its form, calls one plain function (the session actions,
sign-in, the walk, the lists, the admin's changes) and renders a page or redirects to one.
A signed-in browser (`Browser`) is needed for every page but sign-in; every state-changing
request is a POST whose sign-in CSRF token is checked first (`Posted`). Permissions are the
API's role table, checked (and a refusal audited) by `permitted`, as the API's `require`
does; opening, asking and closing go through sealtrace.server._session_actions.

Page addresses carry ids and positions only (a run, a session, a view's index, a trace's
path); what the user asked and what the replay answered travel in POST bodies and come back
in pages, never in a URL.
"""

from __future__ import annotations

import secrets
import time
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from sealtrace.proxy.format import valid_process_path

from .. import _session_actions as actions
from .._audit import verify
from .._deps import DB, Browser, FormFields, Posted, ServicesDep, permitted
from .._errors import ActionRefused
from .._sign_in import sign_in
from . import _admin, _lists, _walk
from ._forms import checked
from ._render import page, static_file
from ._sign_ins import COOKIE, SIGN_IN_COOKIE, Visitor, end, sign_in_token, start
from ._trail import Flow, Step, Trail
from ._views import describe_flow, describe_step

__all__ = ["router"]

router = APIRouter(prefix="/console", include_in_schema=False)
SEE_OTHER, FORBIDDEN = 303, 403
MAX_LISTED_REQUESTS = 500  # the side card lists these; later ones are reached by request:N
_WHY = {
    "idle": "You were signed out after a while without activity.",
    "expired": "Your sign-in reached its time limit. Sign in again.",
    "signed out": "You are signed out.",
    "replaced": "You signed in again elsewhere in this browser.",
    "unknown": "Sign in to continue.",
}


def _to(path: str) -> RedirectResponse:
    return RedirectResponse(path, SEE_OTHER)


def _refused(
    request: Request, visitor: Visitor | None, status: int, detail: str, retry: str = ""
) -> Response:
    """The refusal page; `retry`: a POST address the page offers to try again."""
    context = {"visitor": visitor, "status": status, "detail": detail, "retry": retry}
    return page(request, "refused.html", context, status=status)


def _address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


# -- sign-in ---------------------------------------------------------------------------------


@router.get("")
def home(visitor: Browser) -> Response:
    return _to("/console/runs")


@router.get("/static/{name}")
def static(name: str) -> Response:
    return static_file(name)


def _sign_in_page(
    request: Request, services: Any, *, why: str = "", error: str = "", status: int = 200
) -> Response:
    nonce = secrets.token_urlsafe(18)
    response = page(request, "sign_in.html", {
        "visitor": None, "form_token": sign_in_token(services.token_key, nonce),
        "why": _WHY.get(why, ""), "error": error}, status=status)  # fmt: skip
    response.set_cookie(SIGN_IN_COOKIE, nonce, max_age=900, path="/console/sign-in",
                        httponly=True, samesite="strict",
                        secure=services.settings.console_cookies_secure)  # fmt: skip
    return response


@router.get("/sign-in")
def sign_in_form(request: Request, services: ServicesDep, why: str = "") -> Response:
    return _sign_in_page(request, services, why=why)


@router.post("/sign-in")
def sign_in_post(request: Request, services: ServicesDep, db: DB, form: FormFields) -> Response:
    nonce = request.cookies.get(SIGN_IN_COOKIE, "")
    checked(request, form, sign_in_token(services.token_key, nonce) if nonce else "-")
    try:
        user = sign_in(services, db, tenant=form.get("tenant", "")[:100],
                       user=form.get("user", "")[:100], password=form.get("password", "")[:1000],
                       address=_address(request), via="console")  # fmt: skip
    except ActionRefused as exc:
        return _sign_in_page(request, services, error=exc.detail, status=exc.status)
    settings = services.settings
    cookie, _row = start(db, services.token_key, user, absolute=settings.console_absolute_timeout,
                         replacing=request.cookies.get(COOKIE))  # fmt: skip
    response = _to("/console/runs")
    response.set_cookie(COOKIE, cookie, max_age=int(settings.console_absolute_timeout),
                        path="/console", httponly=True, samesite="strict",
                        secure=settings.console_cookies_secure)  # fmt: skip
    response.delete_cookie(SIGN_IN_COOKIE, path="/console/sign-in")
    return response


@router.post("/sign-out")
def sign_out(services: ServicesDep, db: DB, visitor: Posted) -> Response:
    end(db, visitor.sign_in_id, "signed out")
    services.audit(visitor.principal, "logout", f"user:{visitor.principal.user_name}", "ok",
                   "via console")  # fmt: skip
    response = _to("/console/sign-in?why=signed%20out")
    response.delete_cookie(COOKIE, path="/console")
    return response


# -- runs ----------------------------------------------------------------------------------


@router.get("/runs")
def runs(
    request: Request, services: ServicesDep, db: DB, visitor: Browser, service: str = "",
    status: str = "", since: str = "", page_number: int = 1,
) -> Response:  # fmt: skip
    if not permitted(services, visitor.principal, "runs:read", request):
        return _refused(request, visitor, FORBIDDEN, "your role may not read runs")
    rows, total, services_seen = _lists.find_runs(db, visitor.principal.tenant_id,
                                                  service=service, status=status, since=since,
                                                  page=page_number)  # fmt: skip
    pages = max(1, -(-total // _lists.PER_PAGE))
    filters = {"service": service, "status": status, "since": since}
    kept = {k: v for k, v in filters.items() if v}
    return page(request, "runs.html", {
        "visitor": visitor, "runs": rows, "total": total, "page_number": page_number,
        "pages": pages, "filters": filters, "services_seen": services_seen,
        "statuses": _lists.RUN_FILTERS, "since_choices": list(_lists.SINCE),
        "page_link": lambda n: "/console/runs?" + urlencode({**kept, "page_number": n}),
    })  # fmt: skip


@router.get("/runs/{run_id}")
def run(run_id: str, request: Request, services: ServicesDep, db: DB, visitor: Browser) -> Response:
    who = visitor.principal
    if not permitted(services, who, "runs:read", request):
        return _refused(request, visitor, FORBIDDEN, "your role may not read runs")
    found = _lists.find_run(db, who.tenant_id, run_id)
    if found is None:
        return _refused(request, visitor, 404, f"no run {run_id}")
    assert who.user_id is not None
    mine = _lists.runs_sessions(db, who.tenant_id, who.user_id, run_id)
    return page(request, "run.html", {"visitor": visitor, "run": found, "sessions": mine})


@router.post("/runs/{run_id}/sessions")
def open_session(
    run_id: str, request: Request, services: ServicesDep, visitor: Posted, form: FormFields
) -> Response:
    if not permitted(services, visitor.principal, "sessions:open", request):
        return _refused(request, visitor, FORBIDDEN, "your role may not open replay sessions")
    process = form.get("process", "").strip()
    if not valid_process_path(process):
        return _refused(request, visitor, 422, f"{process!r} is not a process of a run: "
                        "leave it blank for the recorded process, or 1, 1.2, ...")  # fmt: skip
    try:
        session = actions.open_session(services, visitor.principal, run_id, process)
    except ActionRefused as exc:
        retry = f"/console/runs/{run_id}/sessions" if exc.status == 503 else ""
        return _refused(request, visitor, exc.status, exc.detail, retry)
    return _to(f"/console/sessions/{session.id}")


# -- a session -------------------------------------------------------------------------------


def _owned(
    request: Request, services: Any, visitor: Visitor, session_id: str
) -> tuple[Any, Trail] | Response:
    """The visitor's session and its walk, or the refusal page (another user's session is
    not found, exactly as the API says)."""
    if not permitted(services, visitor.principal, "sessions:query", request):
        return _refused(request, visitor, FORBIDDEN, "your role may not use replay sessions")
    try:
        session = actions.users_session(services, visitor.principal, session_id)
    except ActionRefused as exc:
        return _refused(request, visitor, exc.status, exc.detail)
    assert visitor.principal.user_id is not None
    return session, services.trails.of(session_id, visitor.principal.user_id)


@router.get("/sessions/{session_id}")
def session_page(
    session_id: str, request: Request, services: ServicesDep, db: DB, visitor: Browser
) -> Response:
    owned = _owned(request, services, visitor, session_id)
    if isinstance(owned, Response):
        return owned
    session, trail = owned
    if session.status == "ready" and trail.views:
        return _to(f"/console/sessions/{session_id}/views/{len(trail.views) - 1}")
    run = _lists.find_run(db, visitor.principal.tenant_id, session.run_id)
    return page(request, "session.html", {"visitor": visitor, "session": session, "run": run,
                                          "notice": _notice(trail)})  # fmt: skip


@router.get("/sessions/{session_id}/status")
def session_status(
    session_id: str, request: Request, services: ServicesDep, visitor: Browser, wait: float = 0
) -> Response:
    """The session's status word (nothing recorded); with `wait`, held up to that many
    seconds (at most 10) while it is still `assigned`, so the page learns at once that it is
    ready."""
    deadline = time.monotonic() + min(max(wait, 0.0), 10.0)
    while True:
        owned = _owned(request, services, visitor, session_id)
        if isinstance(owned, Response):
            return owned
        session, _trail = owned
        if session.status != "assigned" or time.monotonic() >= deadline:
            return JSONResponse({"status": session.status})
        time.sleep(0.02)


def _notice(trail: Trail) -> str:
    notice, trail.notice = trail.notice, ""
    return notice


def _asker(services: Any, visitor: Visitor, session_id: str) -> _walk.Ask:
    def ask(question: dict[str, Any]) -> dict[str, Any]:
        return actions.ask(services, visitor.principal, session_id, question)

    return ask


def _move(
    request: Request, services: Any, visitor: Visitor, session_id: str, form: dict[str, str],
    move: Any,
) -> Response:  # fmt: skip
    """Make one move of the walk (asking what it needs), fetch the recorded sources its
    stack shows, and go to the view it made; a refusal is shown on the view it came from."""
    owned = _owned(request, services, visitor, session_id)
    if isinstance(owned, Response):
        return owned
    _session, trail = owned
    ask = _asker(services, visitor, session_id)
    after = _int(form.get("view"), -1)
    try:
        index = move(ask, trail, after)
        _fetch_sources(ask, trail, trail.views[index])
        _walk.requests(ask, trail)
    except ActionRefused as exc:
        if exc.status == 404:
            return _refused(request, visitor, exc.status, exc.detail)
        trail.notice = exc.detail
        index = after if 0 <= after < len(trail.views) else -1
        if index < 0:
            return _to(f"/console/sessions/{session_id}")
    return _to(f"/console/sessions/{session_id}/views/{index}")


def _fetch_sources(ask: _walk.Ask, trail: Trail, view: Step | Flow) -> None:
    if not isinstance(view, Step):
        return
    files = [frame["file"] for frame in (view.stack or {}).get("frames", [])]
    node = trail.node(view)
    if node is not None:
        files.insert(0, node["file"])
    for path in dict.fromkeys(files):
        _walk.source(ask, trail, path)


def _int(text: str | None, default: int) -> int:
    try:
        return int(text or "")
    except ValueError:
        return default


@router.post("/sessions/{session_id}/land")
def land(
    session_id: str, request: Request, services: ServicesDep, db: DB, visitor: Posted,
    form: FormFields,
) -> Response:  # fmt: skip
    owned = _owned(request, services, visitor, session_id)
    if isinstance(owned, Response):
        return owned
    session, trail = owned
    if trail.views:
        return _to(f"/console/sessions/{session_id}/views/0")
    run = _lists.find_run(db, visitor.principal.tenant_id, session.run_id)
    exit_status = run.exit_status if run is not None else None
    return _move(request, services, visitor, session_id, form,
                 lambda ask, trail, _after: _walk.land(ask, trail, exit_status))  # fmt: skip


@router.post("/sessions/{session_id}/trace")
def trace(
    session_id: str, request: Request, services: ServicesDep, visitor: Posted, form: FormFields
) -> Response:
    var = form.get("var", "").strip()

    def move(ask: _walk.Ask, trail: Trail, after: int) -> int:
        return _walk.trace(ask, trail, after, _counter_of(trail, after), var)

    return _move(request, services, visitor, session_id, form, move)


@router.post("/sessions/{session_id}/follow")
def follow(
    session_id: str, request: Request, services: ServicesDep, visitor: Posted, form: FormFields
) -> Response:
    path = tuple(_int(part, -1) for part in form.get("path", "").split(".") if part)

    def move(ask: _walk.Ask, trail: Trail, after: int) -> int:
        if not 0 <= after < len(trail.views):
            raise ActionRefused(422, "no such view")
        return _walk.follow(ask, trail, after, path)

    return _move(request, services, visitor, session_id, form, move)


@router.post("/sessions/{session_id}/flows")
def flows(
    session_id: str, request: Request, services: ServicesDep, visitor: Posted, form: FormFields
) -> Response:
    # A local's button sends `source`; the expression box sends its `var`.
    source = (form.get("source") or form.get("var") or "").strip()

    def move(ask: _walk.Ask, trail: Trail, after: int) -> int:
        return _walk.flows(ask, trail, after, _counter_of(trail, after), source)

    return _move(request, services, visitor, session_id, form, move)


@router.post("/sessions/{session_id}/goto")
def goto(
    session_id: str, request: Request, services: ServicesDep, visitor: Posted, form: FormFields
) -> Response:
    at = form.get("at", "").strip()

    def move(ask: _walk.Ask, trail: Trail, after: int) -> int:
        return _walk.goto(ask, trail, after if 0 <= after < len(trail.views) else None, at)

    return _move(request, services, visitor, session_id, form, move)


def _counter_of(trail: Trail, index: int) -> int:
    """The step a move starts from: the view's own (a flows view: the step it was asked at)."""
    if not 0 <= index < len(trail.views):
        raise ActionRefused(422, "no such view: reload the page")
    return trail.views[index].counter


@router.get("/sessions/{session_id}/views/{index}")
def view(
    session_id: str, index: int, request: Request, services: ServicesDep, db: DB,
    visitor: Browser, frame: int = 0,
) -> Response:  # fmt: skip
    owned = _owned(request, services, visitor, session_id)
    if isinstance(owned, Response):
        return owned
    session, trail = owned
    if not 0 <= index < len(trail.views):
        return _to(f"/console/sessions/{session_id}")
    shown = trail.views[index]
    context: dict[str, Any] = {
        "visitor": visitor, "session": session, "index": index, "notice": _notice(trail),
        "crumbs": [(i, v.label) for i, v in enumerate(trail.views)],
        "run": _lists.find_run(db, visitor.principal.tenant_id, session.run_id),
        "requests": (trail.requests or [])[:MAX_LISTED_REQUESTS],
        "more_requests": max(0, len(trail.requests or []) - MAX_LISTED_REQUESTS),
    }  # fmt: skip
    if isinstance(shown, Flow):
        return page(request, "flows.html", {**context, "flow": describe_flow(shown)})
    step = describe_step(trail, shown, trail.sources, frame)
    return page(request, "step.html", {**context, "step": step, "kind": shown.kind})


@router.post("/sessions/{session_id}/close")
def close(session_id: str, request: Request, services: ServicesDep, visitor: Posted) -> Response:
    if not permitted(services, visitor.principal, "sessions:query", request):
        return _refused(request, visitor, FORBIDDEN, "your role may not use replay sessions")
    try:
        session = actions.close_session(services, visitor.principal, session_id)
    except ActionRefused as exc:
        return _refused(request, visitor, exc.status, exc.detail)
    services.trails.forget(session_id)
    return _to(f"/console/runs/{session.run_id}")


# -- audit -----------------------------------------------------------------------------------


@router.get("/audit")
def audit(
    request: Request, services: ServicesDep, db: DB, visitor: Browser, actor: str = "",
    action: str = "", result: str = "", before: int = 0,
) -> Response:  # fmt: skip
    who = visitor.principal
    if not permitted(services, who, "audit:read", request):
        return _refused(request, visitor, FORBIDDEN, "your role may not read the audit log")
    rows = _lists.audit_rows(db, who.tenant_id, actor=actor[:200], action=action[:100],
                             result=result, before=before)  # fmt: skip
    verdict = verify(db, services.audit_key, tenant_id=who.tenant_id)
    head = verdict.heads[0] if verdict.heads else None
    filters = {"actor": actor, "action": action, "result": result}
    kept = {k: v for k, v in filters.items() if v}
    older = ("/console/audit?" + urlencode({**kept, "before": rows[-1].seq})) if rows else ""
    return page(request, "audit.html", {
        "visitor": visitor, "rows": rows, "filters": filters, "verdict": verdict,
        "head": head, "older": older if len(rows) >= _lists.PER_PAGE * 2 else "",
    })  # fmt: skip


# -- users and tokens ------------------------------------------------------------------------


def _admin_page(
    request: Request, services: Any, db: Any, visitor: Visitor, *,
    shown: dict[str, str] | None = None, error: str = "", status: int = 200,
) -> Response:  # fmt: skip
    tenant = visitor.principal.tenant_id
    return page(request, "admin.html", {
        "visitor": visitor, "users": _admin.users(db, tenant),
        "tokens": [_admin.describe_token(t) for t in _admin.tokens(db, tenant)],
        "roles": ["oncall", "security", "auditor", "admin"], "shown": shown or {},
        "error": error,
    }, status=status)  # fmt: skip


@router.get("/admin")
def admin(request: Request, services: ServicesDep, db: DB, visitor: Browser) -> Response:
    if not permitted(services, visitor.principal, "users:manage", request):
        return _refused(request, visitor, FORBIDDEN, "only a tenant's admins manage its users")
    return _admin_page(request, services, db, visitor)


@router.post("/admin/users")
def add_user(
    request: Request, services: ServicesDep, db: DB, visitor: Posted, form: FormFields
) -> Response:
    if not permitted(services, visitor.principal, "users:manage", request):
        return _refused(request, visitor, FORBIDDEN, "only a tenant's admins manage its users")
    name = form.get("name", "")
    try:
        password = _admin.add_user(services, visitor.principal, name, form.get("role", ""))
    except ActionRefused as exc:
        return _admin_page(request, services, db, visitor, error=exc.detail, status=exc.status)
    shown = {"what": f"password of {name.strip()}", "secret": password}
    return _admin_page(request, services, db, visitor, shown=shown)


@router.post("/admin/tokens")
def mint_token(
    request: Request, services: ServicesDep, db: DB, visitor: Posted, form: FormFields
) -> Response:
    if not permitted(services, visitor.principal, "users:manage", request):
        return _refused(request, visitor, FORBIDDEN, "only a tenant's admins manage its tokens")
    try:
        token = _admin.mint_token(services, visitor.principal, form.get("scope", ""),
                                  form.get("name", ""))  # fmt: skip
    except ActionRefused as exc:
        return _admin_page(request, services, db, visitor, error=exc.detail, status=exc.status)
    shown = {"what": f"{form.get('scope', '')} token", "secret": token}
    return _admin_page(request, services, db, visitor, shown=shown)


@router.post("/admin/tokens/revoke")
def revoke_token(
    request: Request, services: ServicesDep, db: DB, visitor: Posted, form: FormFields
) -> Response:
    if not permitted(services, visitor.principal, "users:manage", request):
        return _refused(request, visitor, FORBIDDEN, "only a tenant's admins manage its tokens")
    try:
        _admin.revoke(services, visitor.principal, form.get("token", ""))
    except ActionRefused as exc:
        return _admin_page(request, services, db, visitor, error=exc.detail, status=exc.status)
    return _to("/console/admin")
