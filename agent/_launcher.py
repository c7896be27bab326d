"""`sealtrace launch-agent`: how whatever starts agents away from the server's host (a
systemd unit, the AWS fleet, the local stack's supervisor) gives each agent its own one-time
enrollment.

A launcher token mints enrollments, that is, it makes agents: it must never reach an agent,
whose process parses hostile recordings. So this process hardens itself, takes the token out
of its environment (or reads it from AWS Secrets Manager with the host's role), mints one
enrollment, and replaces itself (exec) with `sealtrace agent`, whose environment carries the
enrollment and no launcher token. The enrollment is worthless once the agent has used it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from typing import NoReturn

from sealtrace.proxy import SealtraceError, UsageError

from ._hygiene import harden_process
from ._server import mint_enrollment

__all__ = [
    "ENROLLMENT_ENV",
    "LAUNCHER_SECRET_ENV",
    "LAUNCHER_TOKEN_ENV",
    "agent_environment",
    "launch",
    "launcher_token",
]

ENROLLMENT_ENV = "SEALTRACE_AGENT_ENROLLMENT"
LAUNCHER_TOKEN_ENV = "SEALTRACE_LAUNCHER_TOKEN"  # noqa: S105 - a variable's name
LAUNCHER_SECRET_ENV = "SEALTRACE_LAUNCHER_TOKEN_SECRET"  # noqa: S105 - a variable's name
# Credentials an agent must not inherit: the launcher's, and any stale agent's.
_NOT_FOR_THE_AGENT = (LAUNCHER_TOKEN_ENV, LAUNCHER_SECRET_ENV, ENROLLMENT_ENV,
                      "SEALTRACE_AGENT_TOKEN")  # fmt: skip


def launcher_token(environ: MutableMapping[str, str]) -> str:
    """The launcher token, taken out of `environ`: SEALTRACE_LAUNCHER_TOKEN, or the Secrets
    Manager secret SEALTRACE_LAUNCHER_TOKEN_SECRET names (an ARN, or a name in the default
    region)."""
    token = environ.pop(LAUNCHER_TOKEN_ENV, "")
    secret = environ.pop(LAUNCHER_SECRET_ENV, "")
    if token:
        return token
    if secret:
        return _from_secrets_manager(secret)
    raise UsageError(
        f"set {LAUNCHER_TOKEN_ENV} to a launcher token (sealtrace server create-token --scope "
        f"launcher), or {LAUNCHER_SECRET_ENV} to the Secrets Manager secret holding one"
    )


def _from_secrets_manager(secret_id: str) -> str:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    parts = secret_id.split(":")
    region = parts[3] if secret_id.startswith("arn:") and len(parts) > 3 else None
    try:
        client = boto3.client("secretsmanager", region_name=region)
        value = client.get_secret_value(SecretId=secret_id).get("SecretString") or ""
    except (BotoCoreError, ClientError) as exc:
        raise SealtraceError(f"cannot read the launcher token from {secret_id}: {exc}") from None
    if not value.strip():
        raise SealtraceError(f"the secret {secret_id} holds no launcher token")
    return str(value).strip()


def agent_environment(environ: MutableMapping[str, str], enrollment: str) -> dict[str, str]:
    """The agent's environment: this one's, without any credential but its enrollment."""
    env = {name: value for name, value in environ.items() if name not in _NOT_FOR_THE_AGENT}
    env[ENROLLMENT_ENV] = enrollment
    return env


def launch(server: str, agent_args: list[str]) -> NoReturn:
    """Mint one enrollment and become `sealtrace agent --server SERVER AGENT_ARGS…`."""
    harden_process()  # it holds the launcher token: no core dump, no reading its memory
    token = launcher_token(os.environ)
    enrollment = mint_enrollment(server, token)
    del token
    argv = [sys.executable, "-m", "sealtrace", "agent", "--server", server, *agent_args]
    os.execve(sys.executable, argv, agent_environment(os.environ, enrollment))  # noqa: S606
