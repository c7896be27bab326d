"""`sealtrace server`: run the API, migrate its database, create tenants, users and tokens,
mint one-time agent enrollments, and verify the audit log. Registered through the
`sealtrace.cli` entry point; settings come from SEALTRACE_SERVER_* (sealtrace.server._settings).
"""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from sealtrace.proxy import UsageError
from sealtrace.proxy.cli import JsonOpt, guarded

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from ._settings import ServerSettings

__all__ = ["register"]

app = typer.Typer(help="The central server: API, keys, sessions, audit.", no_args_is_help=True)

TenantOpt = Annotated[str, typer.Option("--tenant", help="The tenant's name.")]


def _settings() -> ServerSettings:
    from ._settings import ServerSettings

    return ServerSettings().check()


@app.command("migrate")
@guarded
def migrate() -> None:
    """Bring the database to the newest schema."""
    from ._db import migrate as upgrade

    settings = _settings()
    upgrade(settings.database_url)
    typer.echo("migrated")


@app.command("serve")
@guarded
def serve(
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port")] = 8400,
) -> None:
    """Run the API (migrating the database first)."""
    import uvicorn

    from sealtrace.agent import harden_process

    from ._app import create_app
    from ._db import migrate as upgrade

    harden_process()  # it unwraps run keys: no core dump, no reading its memory
    settings = _settings()
    upgrade(settings.database_url)
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")


@app.command("create-tenant")
@guarded
def create_tenant(tenant: TenantOpt) -> None:
    from sqlalchemy.exc import IntegrityError

    from ._models import Tenant

    with _factory()() as db:
        row = Tenant(name=tenant)
        db.add(row)
        try:
            db.commit()
        except IntegrityError:
            raise UsageError(f"tenant {tenant!r} exists") from None
        _audit_cli("tenant.create", tenant, row.id)
    typer.echo(f"tenant {tenant}")


@app.command("create-user")
@guarded
def create_user(
    tenant: TenantOpt,
    name: Annotated[str, typer.Option("--name")],
    role: Annotated[str, typer.Option("--role", help="admin, oncall, security or auditor")],
    as_json: JsonOpt = False,
) -> None:
    """Create a user with a generated password (shown once)."""
    from sqlalchemy.exc import IntegrityError

    from ._auth import hash_password
    from ._models import Role, User

    try:
        kind = Role(role)
    except ValueError:
        raise UsageError(f"no role {role!r}: admin, oncall, security or auditor") from None
    password = secrets.token_urlsafe(18)
    with _factory()() as db:
        tenant_id = _tenant_id(db, tenant)
        db.add(User(tenant_id=tenant_id, name=name, role=kind,
                    password_hash=hash_password(password)))  # fmt: skip
        try:
            db.commit()
        except IntegrityError:
            raise UsageError(f"user {name!r} exists in tenant {tenant!r}") from None
    _audit_cli("user.create", f"user:{name} ({kind.value})", tenant_id)
    out = {"tenant": tenant, "user": name, "role": kind.value, "password": password}
    typer.echo(json.dumps(out) if as_json else f"user {name} ({kind.value}) password {password}")


@app.command("create-token")
@guarded
def create_token(
    tenant: TenantOpt,
    scope: Annotated[str, typer.Option("--scope", help="record or launcher")],
    name: Annotated[str, typer.Option("--name")] = "token",
) -> None:
    """Create a `record` token (a recorder's) or a `launcher` token (it mints one-time agent
    enrollments, for whatever starts agents); shown once, only its digest is kept."""
    from ._auth import issue_token
    from ._models import Scope

    if scope == "agent":
        raise UsageError("there is no tenant-wide agent token: each agent enrolls once, with "
                         "`sealtrace server enroll-agent` or a launcher token")  # fmt: skip
    if scope not in ("record", "launcher"):
        raise UsageError("--scope is record or launcher (people sign in for a user token)")
    settings = _settings()
    with _factory()() as db:
        key = settings.secret_key.get_secret_value().encode()
        tenant_id = _tenant_id(db, tenant)
        token = issue_token(db, key, tenant_id=tenant_id, scope=Scope(scope), name=name)
        db.commit()
    _audit_cli("token.create", f"{scope}-token:{token.split('_')[1]} ({name})", tenant_id)
    typer.echo(token)


@app.command("revoke-token")
@guarded
def revoke_token(
    token_id: Annotated[str, typer.Option("--token-id", help="The id: st_<id>_… .")],
) -> None:
    """Revoke a token at once (a leaked record or launcher token, an agent's credential)."""
    from ._auth import revoke_token as revoke
    from ._models import ApiToken

    with _factory()() as db:
        row = db.get(ApiToken, token_id)
        if row is None:
            raise UsageError(f"no token {token_id!r}")
        revoke(db, token_id)
        db.commit()
        target, tenant_id = f"{row.scope.value}-token:{token_id} ({row.name})", row.tenant_id
    _audit_cli("token.revoke", target, tenant_id)
    typer.echo(f"revoked {token_id}")


@app.command("enroll-agent")
@guarded
def enroll_agent(
    tenant: TenantOpt,
    ttl: Annotated[Optional[float], typer.Option(  # noqa: UP045 - typer reads it at run time
        "--ttl", help="Seconds it may wait for its agent (SEALTRACE_SERVER_ENROLLMENT_TTL, "
        "600, by default; at most 86400).")] = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Mint a one-time enrollment for one agent (shown once, only its digest is kept): give
    it to that agent alone, as SEALTRACE_AGENT_ENROLLMENT; its first use consumes it."""
    import datetime as dt

    from ._enrollment import MAX_TTL, mint

    settings = _settings()
    seconds = settings.enrollment_ttl if ttl is None else ttl
    if not 0 < seconds <= MAX_TTL.total_seconds():
        raise UsageError(f"--ttl is more than 0 and at most {MAX_TTL.total_seconds():.0f} seconds")
    actor = _cli_actor()
    with _factory()() as db:
        tenant_id = _tenant_id(db, tenant)
        made = mint(db, settings.secret_key.get_secret_value().encode(), tenant_id=tenant_id,
                    minted_by=actor, ttl=dt.timedelta(seconds=seconds))  # fmt: skip
        db.commit()
    expires = made.expires.isoformat(timespec="seconds")
    _audit_cli("agent.enrollment.mint", f"enrollment:{made.enrollment_id}", tenant_id,
               f"expires {expires}")  # fmt: skip
    if as_json:
        out = {"tenant": tenant, "enrollment": made.credential,
               "enrollment_id": made.enrollment_id, "expires": expires}  # fmt: skip
        typer.echo(json.dumps(out))
    else:
        typer.echo(made.credential)


@app.command("audit-verify")
@guarded
def audit_verify(as_json: JsonOpt = False) -> None:
    """Check every tenant's audit chain (digests, and each head's MAC under the audit key) and
    that no row is missing. Exit 3 if any is broken."""
    from ._audit import verify
    from ._audit_key import audit_key

    with _factory()() as db:
        verdict = verify(db, audit_key(_settings()))
    heads = {h.chain: {"row": h.chain_seq, "digest": h.digest.hex()} for h in verdict.heads}
    found = [f"row {p.seq}: {p.why}" for p in verdict.problems]
    if as_json:
        typer.echo(json.dumps({"rows": verdict.rows, "whole": verdict.whole, "heads": heads,
                               "problems": found}))  # fmt: skip
    else:
        typer.echo(f"{verdict.rows} rows in {len(heads)} chains: "
                   + ("whole" if verdict.whole else "BROKEN"))  # fmt: skip
        for chain, head in heads.items():
            typer.echo(f"head of {chain}: row {head['row']} {head['digest']}")
        for line in found:
            typer.echo(line)
    if not verdict.whole:
        raise typer.Exit(3)


def _cli_actor() -> str:
    import getpass

    return f"cli:{getpass.getuser()}"


def _audit_cli(action: str, target: str, tenant_id: int, detail: str = "") -> None:
    """Privileged actions from this command line are audit events too (actor: the OS user)."""
    from ._audit import append
    from ._audit_key import audit_key

    append(_factory(), audit_key(_settings()), actor=_cli_actor(), action=action,
           target=target, result="ok", tenant_id=tenant_id, detail=detail)  # fmt: skip


def _factory() -> sessionmaker[Session]:
    from ._db import connect

    return connect(_settings().database_url)[1]


def _tenant_id(db: Session, name: str) -> int:
    from sqlalchemy import select

    from ._models import Tenant

    found = db.scalars(select(Tenant.id).where(Tenant.name == name)).first()
    if found is None:
        raise UsageError(f"no tenant {name!r}")
    return int(found)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="server")
