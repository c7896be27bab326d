"""sealtrace.agent: the disposable worker that replays one recording in the sandbox.

`sealtrace agent` (`_worker`) is a Celery worker that serves exactly one session: it makes an
X25519 key pair at boot, enrolls with the server with the one-time enrollment it was started
with (`_server`), takes the one assignment on its own queue, and exits. `sealtrace
launch-agent` (`_launcher`) mints that enrollment with a launcher token and becomes the
agent, which never holds the launcher token. Serving the session (`_serving`) means opening
the recording key the server sealed to it (`_contracts`), reading the recording into memory,
and driving the sandbox.

The sandbox client (`_sandbox_client`) runs the replay runner in a hardened rootless Podman
container (`_podman`; `_local` finds the Podman service and image on this machine, for
`--sandbox`) or as a local child process, streams the recording in, checks every frame and
rebuilds the answers, showing strings only when a keyed digest matches a value it holds
(`_dictionary`). `sealtrace sandbox build-image` is in `cli`; the agent's settings are one
`AgentSettings` (`_settings`), its errors are in `_errors`. The agent must never trust
anything the runner sends past the first bad frame, and never write the plaintext or the key
anywhere.
"""

from typing import TYPE_CHECKING, Any

from ._contracts import ASSIGNMENT_TASK
from ._errors import SandboxError, ServerError

if TYPE_CHECKING:
    from ._hygiene import harden_process
    from ._local import open_sandbox, sandbox_user, serve_podman
    from ._podman import PodmanTransport
    from ._sandbox_client import LocalTransport, SandboxClient, Transport
    from ._settings import AgentSettings

__all__ = [
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

# Imported on first use: the `sealtrace` command loads this package's CLI on every run, and
# must not need pydantic-settings or podman-py to record or replay.
_LAZY = {
    "AgentSettings": "_settings",
    "LocalTransport": "_sandbox_client",
    "PodmanTransport": "_podman",
    "SandboxClient": "_sandbox_client",
    "Transport": "_sandbox_client",
    "harden_process": "_hygiene",
    "open_sandbox": "_local",
    "sandbox_user": "_local",
    "serve_podman": "_local",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
