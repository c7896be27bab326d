"""sealtrace.agent's public names: what the server, the CLI's --sandbox, the benchmarks and
the local stack may use. The `sealtrace` command imports this package on every run."""

from __future__ import annotations

import sealtrace.agent

from ..conftest import modules_after

EXPORTED = [
    "ASSIGNMENT_TASK",
    "AgentSettings",
    "LocalTransport",
    "PodmanTransport",
    "SandboxClient",
    "SandboxError",
    "ServerError",
    "Transport",
    "harden_process",
    "open_sandbox",
    "sandbox_user",
    "serve_podman",
]


def test_exported_names_are_pinned_and_resolve() -> None:
    assert sorted(sealtrace.agent.__all__) == sorted(EXPORTED)
    for name in EXPORTED:
        assert getattr(sealtrace.agent, name) is not None


def test_the_sandbox_client_entry_point_is_the_public_opener() -> None:
    from importlib.metadata import entry_points

    (found,) = entry_points(group="sealtrace.sandbox_client")
    assert found.load() is sealtrace.agent.open_sandbox


def test_importing_the_package_loads_neither_podman_nor_settings() -> None:
    loaded = modules_after("import sealtrace.agent")
    assert not {m for m in loaded if m.split(".")[0] in {"podman", "pydantic_settings"}}
