"""A machine without Podman is an install step for the user (exit 2, one line naming what to
install), not a sandbox failure (exit 5)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sealtrace.agent import SandboxError
from sealtrace.agent._local import podman_client
from sealtrace.proxy import UsageError


def test_no_podman_on_the_machine_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no podman executable anywhere
    monkeypatch.setenv("SEALTRACE_PODMAN_SOCKET", f"unix://{tmp_path}/none.sock")
    with pytest.raises(UsageError, match=r"apt-get install podman") as raised:
        podman_client()
    assert raised.value.exit_code == 2


def test_negative_control_podman_installed_but_no_service_is_a_sandbox_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "podman"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("SEALTRACE_PODMAN_SOCKET", f"unix://{tmp_path}/none.sock")
    with pytest.raises(SandboxError, match="no rootless Podman service") as raised:
        podman_client()
    assert raised.value.exit_code == 5
