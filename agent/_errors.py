"""Every error sealtrace.agent raises of its own, and the CLI exit code each one maps to.

    SealtraceError (sealtrace.proxy)
    ├── SandboxError                    exit 5: the sandbox refused or failed: no sandbox
    │                                   user or Podman service, a runner that broke the frame
    │                                   protocol, went silent or past its memory limit (the
    │                                   container is killed first), or a closed session
    └── ServerError                     exit 1: the server answered an agent call with an
                                        error, or could not be reached; `status` is its
                                        HTTP status (0 when there was no answer)

The agent also passes on errors of the packages below it, unchanged: sealtrace.sandbox's
ReplayEnvironmentError (exit 2: the replay image cannot replay the recording, refused before
a container starts), QueryError (2) and DivergenceError (3), and sealtrace.proxy's UsageError
(2) and IntegrityError family (4: a sealed key or recording that does not open).
"""

from __future__ import annotations

from sealtrace.proxy import SealtraceError

__all__ = ["SandboxError", "ServerError"]


class SandboxError(SealtraceError):
    """The sandbox refused or failed, or its runner broke the protocol (exit 5)."""

    exit_code = 5


class ServerError(SealtraceError):
    exit_code = 1

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status
