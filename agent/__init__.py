"""sealtrace.agent: the agent's side of a sandbox session.

The client that runs the replay runner in a hardened rootless Podman container (or as a
local child process), streams the recording in, checks every frame and rebuilds the answers
(`_sandbox`, `_podman`, `_dictionary`, `_local`); the disposable one-session Celery worker
around it (`_worker`, `_serving`, `_server`); its settings (`_settings`) and its errors
(`_errors`).
"""

from typing import Any

from ._errors import SandboxError, ServerError

__all__ = ["AgentSettings", "SandboxError", "ServerError"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the `sealtrace` command loads this package's CLI on every run,
    # and must not need pydantic-settings to record or replay.
    if name == "AgentSettings":
        from ._settings import AgentSettings

        return AgentSettings
    raise AttributeError(name)
