"""Which extra of the sealtrace distribution brings each optional dependency, and the one line
that tells a user what to install when a command reaches one that is missing.

The roles (README, "Install"): the production host installs `sealtrace` (or `sealtrace[s3]`),
the analyst `sealtrace[analyst]`, a server `sealtrace[server]`, an agent `sealtrace[agent]`.
Every import a role makes is declared for that role in pyproject.toml; this table must name
every optional top-level module the code imports (tests/proxy/test_extras.py checks it
against pyproject.toml).
"""

from __future__ import annotations

from ._errors import UsageError

__all__ = ["EXTRAS", "MissingExtraError", "missing_extra"]

# Top-level module -> (its distribution, the extras that bring it, the first being the one to
# suggest).
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "boto3": ("boto3", ("s3", "analyst", "agent", "server")),
    "botocore": ("boto3", ("s3", "analyst", "agent", "server")),
    "podman": ("podman", ("analyst", "agent")),
    "pydantic_settings": ("pydantic-settings", ("analyst", "agent", "server")),
    "pydantic": ("pydantic-settings", ("analyst", "agent", "server")),
    "celery": ("celery", ("agent", "server")),
    "kombu": ("celery", ("agent", "server")),
    "redis": ("celery[redis]", ("agent", "server")),
    "fastapi": ("fastapi", ("server",)),
    "starlette": ("fastapi", ("server",)),
    "uvicorn": ("uvicorn", ("server",)),
    "sqlalchemy": ("sqlalchemy", ("server",)),
    "alembic": ("alembic", ("server",)),
    "argon2": ("argon2-cffi", ("server",)),
    "psycopg": ("psycopg", ("server",)),
    "jinja2": ("jinja2", ("server",)),
}


class MissingExtraError(UsageError):
    """A command needs an optional dependency that is not installed (exit 2)."""


def missing_extra(exc: ModuleNotFoundError) -> MissingExtraError | None:
    """The one-line error for a missing optional dependency; None when `exc` is about a
    module no extra brings (a bug, not a user's missing install)."""
    top = (exc.name or "").partition(".")[0]
    found = EXTRAS.get(top)
    if found is None:
        return None
    distribution, extras = found
    others = "".join(f", or [{e}]" for e in extras[1:])
    return MissingExtraError(
        f"this needs {distribution}, which is not installed: "
        f"pip install 'sealtrace[{extras[0]}]'{others}"
    )
