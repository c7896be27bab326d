"""What routes get injected: the settings, a database session, the key service, the
sign-in limiter, and the principal a bearer token stands for, checked against the
permission a route needs (and, on an agent's routes, against the agent id in the path); for
the console's pages, the signed-in browser its cookie stands for.

Routes never build these themselves; create_app() puts one `Services` on the app's state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from . import _audit
from ._audit_key import AuditKey
from ._auth import PERMISSIONS, SCOPE_PERMISSIONS, Principal, resolve_token
from ._console._forms import checked, form_of
from ._console._sign_ins import COOKIE, Ended, Visitor, resolve
from ._console._trail import Trails
from ._key_service import KeyService
from ._login_limit import LoginLimiter
from ._relay import Relay
from ._sessions import SessionService
from ._settings import ServerSettings

__all__ = [
    "DB",
    "AsAgent",
    "AuditKeyDep",
    "Browser",
    "FormFields",
    "Keys",
    "Posted",
    "Presented",
    "Services",
    "ServicesDep",
    "Settings",
    "SignInNeeded",
    "SignedIn",
    "needs",
    "permitted",
    "require",
]


@dataclass
class Services:
    settings: ServerSettings
    factory: sessionmaker[Session]
    keys: KeyService
    relay: Relay
    sessions: SessionService
    audit_key: AuditKey
    logins: LoginLimiter
    trails: Trails  # the console's walks through sessions, in memory only

    @property
    def token_key(self) -> bytes:
        return self.settings.secret_key.get_secret_value().encode()

    def audit(self, principal: Principal | None, action: str, target: str, result: str,
              detail: str = "", *, tenant_id: int | None = None) -> None:  # fmt: skip
        _audit.append(
            self.factory,
            self.audit_key,
            actor=principal.name if principal else "anonymous",
            action=action,
            target=target,
            result=result,
            tenant_id=principal.tenant_id if principal else tenant_id,
            detail=detail,
        )


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _db(services: Annotated[Services, Depends(_services)]) -> Iterator[Session]:
    with services.factory() as db:
        yield db


def _keys(request: Request) -> KeyService:
    return _services(request).keys


def _settings(request: Request) -> ServerSettings:
    return _services(request).settings


def _audit_key(request: Request) -> AuditKey:
    return _services(request).audit_key


ServicesDep = Annotated[Services, Depends(_services)]
DB = Annotated[Session, Depends(_db)]
Keys = Annotated[KeyService, Depends(_keys)]
Settings = Annotated[ServerSettings, Depends(_settings)]
AuditKeyDep = Annotated[AuditKey, Depends(_audit_key)]

_bearer = HTTPBearer(auto_error=False, description="An API token: st_<id>_<secret>")

# The bearer credential as presented, unresolved: the one route that takes something other
# than an API token (an agent's one-time enrollment) reads it through this.
Presented = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _principal(
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The principal the bearer token stands for, resolved on every request (so an expired
    or revoked token stops working at once); 401 without a valid one."""
    principal = None
    if credentials is not None:
        with services.factory() as db:
            principal = resolve_token(db, services.token_key, credentials.credentials)
    if principal is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "a valid API token is required",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return principal


SignedIn = Annotated[Principal, Depends(_principal)]


def permitted(services: Services, principal: Principal, permission: str, request: Request) -> bool:
    """Whether `principal` holds `permission` (PERMISSIONS, for a user's role); a refusal is
    audited as `denied METHOD PATH`, the API's and the console's alike."""
    if permission in principal.permissions:
        return True
    services.audit(principal, f"denied {request.method} {request.url.path}", permission,
                   "denied")  # fmt: skip
    return False


def require(permission: str) -> Callable[..., Any]:
    """A dependency that yields the principal if it holds `permission`: 401 without a valid
    token, 403 (and an audit event) without the permission."""

    def check(services: ServicesDep, request: Request, principal: SignedIn) -> Principal:
        if not permitted(services, principal, permission, request):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"this token may not {permission}")
        return principal

    check.permission = permission  # type: ignore[attr-defined]
    return check


def _as_agent(
    agent_id: str,
    services: ServicesDep,
    request: Request,
    principal: Annotated[Principal, Depends(require("agents:serve"))],
) -> Principal:
    """An agent's credential, acting as the agent it was issued to: one that names another
    agent in the path is refused (403, audited), whatever that agent's state."""
    if principal.agent_id != agent_id:
        services.audit(principal, f"denied {request.method} {request.url.path}",
                       f"agent:{agent_id}", "denied",
                       "an agent's credential acts as its own agent only")  # fmt: skip
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this credential is another agent's")
    return principal


# The principal of an agent's route: an agent credential whose agent is the path's {agent_id}.
AsAgent = Annotated[Principal, Depends(_as_agent)]


class SignInNeeded(Exception):
    """The console's page needs a signed-in browser, and this one is not (or no longer):
    `why` is "", "idle", "expired", "signed out", "replaced" or "unknown". The console answers
    with its sign-in page."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _browser(request: Request, services: ServicesDep) -> Visitor:
    """The signed-in browser the console's cookie stands for, checked (and its idle clock
    reset) on every request; SignInNeeded otherwise."""
    cookie = request.cookies.get(COOKIE)
    if not cookie:
        raise SignInNeeded("")
    with services.factory() as db:
        found = resolve(db, services.token_key, cookie,
                        idle=services.settings.console_idle_timeout)  # fmt: skip
    if isinstance(found, Ended):
        raise SignInNeeded(found.why)
    return found


# A console page's visitor: a browser signed in, its sign-in alive.
Browser = Annotated[Visitor, Depends(_browser)]
# A console form's fields (urlencoded, read with limits).
FormFields = Annotated[dict[str, str], Depends(form_of)]


def _posted(request: Request, visitor: Browser, form: FormFields) -> Visitor:
    """A signed-in browser's state-changing request, its CSRF token checked (403 without)."""
    checked(request, form, visitor.csrf)
    return visitor


# The visitor of a console form that changes something: signed in, and its CSRF token right.
Posted = Annotated[Visitor, Depends(_posted)]


def needs(permission: str) -> dict[str, Any]:
    """OpenAPI's note on an operation: the permission it needs, and who holds it (the roles,
    or the token scopes) as the role table has it now."""
    holders = [role.value for role, granted in PERMISSIONS.items() if permission in granted]
    holders += [f"{scope.value} token" for scope, granted in SCOPE_PERMISSIONS.items()
                if permission in granted]  # fmt: skip
    return {"x-permission": permission, "x-granted-to": holders}
