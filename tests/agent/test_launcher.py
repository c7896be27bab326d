"""Starting an agent with its own one-time enrollment (issue 21, finding 3).

- `sealtrace agent` takes its enrollment from SEALTRACE_AGENT_ENROLLMENT only, and refuses
  to start without one (exit 2, one line), saying so when it is given the tenant-wide token
  of before;
- `sealtrace launch-agent` takes the launcher token out of its environment, or reads it
  from the Secrets Manager secret it is pointed at (moto's server here), refuses to start
  without one (exit 2, one line), and hands the agent an environment holding the enrollment
  and no launcher token (the agent's process is checked end to end, tests/e2e).
"""

from __future__ import annotations

from typing import Any

import pytest

from sealtrace.agent._launcher import (
    ENROLLMENT_ENV,
    LAUNCHER_SECRET_ENV,
    LAUNCHER_TOKEN_ENV,
    agent_environment,
    launcher_token,
)
from sealtrace.proxy import SealtraceError, UsageError

from ..conftest import run_cli

NOWHERE = "http://127.0.0.1:9"  # nothing is asked of it: the refusal comes first


def test_the_launcher_token_is_taken_out_of_the_environment() -> None:
    environ = {LAUNCHER_TOKEN_ENV: "st_a_b", "PATH": "/usr/bin"}
    assert launcher_token(environ) == "st_a_b"
    assert environ == {"PATH": "/usr/bin"}
    with pytest.raises(UsageError, match=LAUNCHER_TOKEN_ENV):
        launcher_token({})


def test_the_launcher_token_comes_from_secrets_manager(aws_env: dict[str, str]) -> None:
    import boto3

    client: Any = boto3.client("secretsmanager")
    made = client.create_secret(Name="sealtrace/launcher", SecretString="st_l_secret\n")
    for name in ("sealtrace/launcher", made["ARN"]):
        environ = {LAUNCHER_SECRET_ENV: name}
        assert launcher_token(environ) == "st_l_secret"
        assert environ == {}
    client.create_secret(Name="sealtrace/empty", SecretString=" ")
    for missing, says in (("sealtrace/none", "cannot read"), ("sealtrace/empty", "holds no")):
        with pytest.raises(SealtraceError, match=says):
            launcher_token({LAUNCHER_SECRET_ENV: missing})


def test_the_agent_gets_its_enrollment_and_no_launcher_credential() -> None:
    environ = {LAUNCHER_TOKEN_ENV: "st_l_s", LAUNCHER_SECRET_ENV: "arn:x",
               "SEALTRACE_AGENT_TOKEN": "st_old_s", ENROLLMENT_ENV: "ste_stale_s",
               "SEALTRACE_AGENT_BROKER": "redis://127.0.0.1:6379/0"}  # fmt: skip
    assert agent_environment(environ, "ste_new_s") == {
        "SEALTRACE_AGENT_BROKER": "redis://127.0.0.1:6379/0",
        ENROLLMENT_ENV: "ste_new_s",
    }


@pytest.mark.parametrize(
    ("command", "env", "says"),
    [
        (["agent"], {}, f"set {ENROLLMENT_ENV}"),
        (["agent"], {"SEALTRACE_AGENT_TOKEN": "st_old_s"}, "no longer accepted"),
        (["launch-agent"], {}, f"set {LAUNCHER_TOKEN_ENV}"),
    ],
)
def test_without_its_credential_nothing_starts(
    command: list[str], env: dict[str, str], says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (ENROLLMENT_ENV, LAUNCHER_TOKEN_ENV, LAUNCHER_SECRET_ENV, "SEALTRACE_AGENT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    proc = run_cli(*command, "--server", NOWHERE, env=env)
    lines = proc.stderr.decode().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr
