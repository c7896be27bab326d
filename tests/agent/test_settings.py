"""AgentSettings: its defaults are what the agent used before it had settings, the
environment overrides them when they are used (not when modules are imported), and the
session container is built from them. No Podman needed: the transport's client is a stub."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pydantic
import pytest

from sealtrace.agent import AgentSettings, _podman
from sealtrace.agent._podman import PodmanTransport, SandboxLimits
from sealtrace.agent._sandbox_client import DEFAULT_MEMORY_LIMIT, session_directory


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("SEALTRACE_"):
            monkeypatch.delenv(name)


def _transport(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **kwargs: Any) -> PodmanTransport:
    monkeypatch.setenv("SEALTRACE_SESSION_DIR", str(tmp_path))
    monkeypatch.setattr(_podman, "seccomp_profile", lambda: {"syscalls": []})
    image = SimpleNamespace(labels={})
    client = SimpleNamespace(images=SimpleNamespace(get=lambda reference: image))
    return PodmanTransport(client, "localhost/sealtrace-replay:test",
                           uid=os.getuid(), gid=os.getgid(), **kwargs)  # fmt: skip


def test_defaults() -> None:
    settings = AgentSettings()
    assert settings.podman_user == "sealtrace-sbx"
    assert settings.podman_socket == ""  # the user's /run/user/UID/podman/podman.sock
    assert settings.podman_runtime == "runc"
    assert settings.podman_cgroup_manager == "cgroupfs"
    assert settings.replay_image == ""  # built from this interpreter's environment
    assert settings.session_dir == ""  # /dev/shm
    assert (settings.sandbox_nofile, settings.sandbox_nproc) == (1024, 256)
    assert settings.sandbox_address_space == 4 << 30
    assert settings.sandbox_memory == DEFAULT_MEMORY_LIMIT == 3 << 30
    assert settings.sandbox_tmpfs_bytes == 64 << 20
    assert settings.sandbox_checkpoint_every == 10_000  # a session's seek granularity
    # The limits tests and benchmarks build by hand are the settings' defaults.
    assert SandboxLimits.from_settings(settings) == SandboxLimits()


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "SEALTRACE_PODMAN_USER": "sbx2",
        "SEALTRACE_PODMAN_SOCKET": "unix:///tmp/podman.sock",
        "SEALTRACE_PODMAN_RUNTIME": "crun",
        "SEALTRACE_PODMAN_CGROUP_MANAGER": "systemd",
        "SEALTRACE_REPLAY_IMAGE": "localhost/sealtrace-replay:abc",
        "SEALTRACE_SESSION_DIR": "/run/sealtrace",
        "SEALTRACE_SANDBOX_NOFILE": "512",
        "SEALTRACE_SANDBOX_NPROC": "128",
        "SEALTRACE_SANDBOX_ADDRESS_SPACE": str(2 << 30),
        "SEALTRACE_SANDBOX_MEMORY": "0",
        "SEALTRACE_SANDBOX_TMPFS_BYTES": str(16 << 20),
        "SEALTRACE_SANDBOX_CHECKPOINT_EVERY": "5000",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = AgentSettings()
    assert settings.model_dump() == {
        "podman_user": "sbx2",
        "podman_socket": "unix:///tmp/podman.sock",
        "podman_runtime": "crun",
        "podman_cgroup_manager": "systemd",
        "replay_image": "localhost/sealtrace-replay:abc",
        "session_dir": "/run/sealtrace",
        "sandbox_nofile": 512,
        "sandbox_nproc": 128,
        "sandbox_address_space": 2 << 30,
        "sandbox_memory": 0,
        "sandbox_tmpfs_bytes": 16 << 20,
        "sandbox_checkpoint_every": 5000,
    }


@pytest.mark.parametrize(
    ("name", "value"),
    [("SEALTRACE_SANDBOX_NPROC", "0"), ("SEALTRACE_SANDBOX_MEMORY", "-1"),
     ("SEALTRACE_PODMAN_RUNTIME", ""), ("SEALTRACE_SANDBOX_CHECKPOINT_EVERY", "0")],
)  # fmt: skip
def test_unusable_values_are_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(pydantic.ValidationError):
        AgentSettings()


def test_the_container_runs_under_the_default_runtime(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    transport = _transport(monkeypatch, tmp_path)
    try:
        options = transport.options(["python"])
        assert options["runtime"] == "runc"
        assert {u["Name"]: (u["Soft"], u["Hard"]) for u in options["ulimits"]} == {
            "nofile": (1024, 1024), "nproc": (256, 256), "as": (4 << 30, 4 << 30),
        }  # fmt: skip
    finally:
        transport.kill()


def test_the_container_is_built_from_the_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Set after every module was imported: settings are read when the transport is made.
    monkeypatch.setenv("SEALTRACE_PODMAN_RUNTIME", "crun")
    monkeypatch.setenv("SEALTRACE_SANDBOX_NOFILE", "512")
    monkeypatch.setenv("SEALTRACE_SANDBOX_NPROC", "64")
    monkeypatch.setenv("SEALTRACE_SANDBOX_MEMORY", str(1 << 30))
    monkeypatch.setenv("SEALTRACE_SANDBOX_TMPFS_BYTES", str(8 << 20))
    transport = _transport(monkeypatch, tmp_path)
    try:
        options = transport.options(["python"])
        assert options["runtime"] == "crun"
        ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in options["ulimits"]}
        assert ulimits["nofile"] == (512, 512) and ulimits["nproc"] == (64, 64)
        assert [m["size"] for m in options["mounts"] if m["type"] == "tmpfs"] == [8 << 20]
        assert transport.memory_limit == 1 << 30
        # The session's private directories are in SEALTRACE_SESSION_DIR.
        assert transport.directory.parent == tmp_path and transport.private.parent == tmp_path
    finally:
        transport.kill()
    assert list(tmp_path.iterdir()) == []


def test_explicit_settings_and_limits_win(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SEALTRACE_PODMAN_RUNTIME", "crun")
    transport = _transport(
        monkeypatch, tmp_path,
        settings=AgentSettings(podman_runtime="runsc"), limits=SandboxLimits(nproc=32),
    )  # fmt: skip
    try:
        options = transport.options(["python"])
        assert options["runtime"] == "runsc"
        assert {"Name": "nproc", "Soft": 32, "Hard": 32} in options["ulimits"]
    finally:
        transport.kill()


def test_session_directories_follow_the_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SEALTRACE_SESSION_DIR", str(tmp_path))
    made = session_directory("sealtrace-test-")
    assert made.parent == tmp_path and made.stat().st_mode & 0o777 == 0o700
