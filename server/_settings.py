"""The server's settings: one class, read from the environment (SEALTRACE_SERVER_*) when a
deployable starts, never at import time.

Outside development, a placeholder secret or a missing KMS key is refused at start-up rather
than run with.
"""

from __future__ import annotations

from typing import Literal

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["PLACEHOLDER_SECRET", "ServerSettings"]

PLACEHOLDER_SECRET = "development-only-not-a-secret"  # noqa: S105 - refused in production


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SEALTRACE_SERVER_", extra="forbid")

    environment: Literal["development", "production"] = "development"
    database_url: str = "sqlite:///sealtrace-server.db"
    # Signs nothing yet; peppers API token digests so a database dump alone cannot test a
    # guessed token.
    secret_key: SecretStr = SecretStr(PLACEHOLDER_SECRET)
    kms_key_id: str = "alias/sealtrace-run-keys"
    # A KMS HMAC_256 key that MACs the audit chain (sealtrace.server._audit_key). Empty: a
    # key derived from secret_key, in development only.
    audit_key_id: str = ""
    aws_region: str = "us-east-1"
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Where recorders put runs when they are not told (s3://bucket[/prefix]); each tenant's
    # under its name.
    store: str = ""
    # Keys minted per batch, and how many one lease hands out.
    mint_batch: int = 32
    lease_batch: int = 8
    # How long a login token works (checked on every request; POST /v1/auth/logout ends
    # one sooner).
    user_token_hours: float = 12.0
    # Failed sign-ins allowed per account and address in `login_window` seconds (ten times
    # as many per address, whatever the accounts); past them, 429 (server/_login_limit.py).
    login_attempts: int = 10
    login_window: float = 300.0
    # How long a user's question waits for its answer, and how long an agent may go without
    # polling while a question waits before its session fails.
    query_timeout: float = 300.0
    agent_silence: float = 30.0
    # How long an assigned session may wait for its agent to load it before it fails.
    assign_timeout: float = 180.0
    # How long a one-time agent enrollment lives when its minter does not say (seconds; at
    # most a day), and how long an enrolled agent's credential works at most (hours; it is
    # revoked sooner, when the agent is gone).
    enrollment_ttl: float = 600.0
    agent_credential_hours: float = 24.0
    # The web console's browser sign-ins (sealtrace.server._console): signed out after this
    # many seconds without a request, and after this many whatever happens.
    console_idle_timeout: float = 1800.0
    console_absolute_timeout: float = 43200.0
    # Whether its cookies are Secure (sent over TLS only). Behind TLS, say so; unset, they
    # are Secure in production and not in development (plain http on loopback).
    console_secure_cookies: bool | None = None

    @property
    def console_cookies_secure(self) -> bool:
        if self.console_secure_cookies is None:
            return self.environment == "production"
        return self.console_secure_cookies

    def check(self) -> ServerSettings:
        """Refuse settings that must not reach production; returns self."""
        if self.environment == "production":
            if self.secret_key.get_secret_value() in ("", PLACEHOLDER_SECRET):
                raise ValueError("SEALTRACE_SERVER_SECRET_KEY must be set in production")
            if self.database_url.startswith("sqlite"):
                raise ValueError("production needs PostgreSQL (SEALTRACE_SERVER_DATABASE_URL)")
            if not self.audit_key_id:
                raise ValueError(
                    "production needs SEALTRACE_SERVER_AUDIT_KEY_ID (a KMS HMAC_256 key that "
                    "MACs the audit chain)"
                )
        if self.mint_batch < 1 or self.lease_batch < 1:
            raise ValueError("mint_batch and lease_batch must be at least 1")
        if self.login_attempts < 1 or not self.login_window > 0:
            raise ValueError("login_attempts must be at least 1 and login_window more than 0")
        if not self.user_token_hours > 0:
            raise ValueError("user_token_hours must be more than 0")
        if not 0 < self.enrollment_ttl <= 86400:
            raise ValueError("enrollment_ttl must be more than 0 and at most 86400 seconds")
        if not self.agent_credential_hours > 0:
            raise ValueError("agent_credential_hours must be more than 0")
        if not 0 < self.console_idle_timeout <= self.console_absolute_timeout:
            raise ValueError(
                "console_idle_timeout must be more than 0 and at most console_absolute_timeout"
            )
        return self
