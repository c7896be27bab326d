"""Every error sealtrace.sandbox raises, and the CLI exit code each one maps to.

    SealtraceError (sealtrace.proxy)
    ├── UsageError
    │   └── ReplayEnvironmentError  exit 2: this interpreter cannot replay the recording
    │                               (another Python version, a different distribution
    │                               manifest, missing boundary libraries, other flags)
    │   └── QueryError              exit 2: a provenance question that cannot be asked of
    │                               this run (a location it never reached, a bad expression)
    ├── DivergenceError             exit 3: the replayed program did not do what the
    │                               recording says (the receipt names the first event)
    │   └── PassesDisagreedError    exit 3: the passes of one question replayed it
    │                               differently (the step where they part)
    ├── ValidationError             exit 3: the provenance engine failed its own validation
    │                               (`sealtrace validate`: a planted root cause not ranked
    │                               first, the corpus below precision 1.00 or recall 0.95,
    │                               a negative control reached an input, or the depth
    │                               property broke)
    └── ReplayCrashedError          exit 1: the replay process died without a receipt

Integrity failures of the recording itself (tampered, truncated, wrong key, a corrupt event
stream) are sealtrace.proxy's IntegrityError family: exit 4.
"""

from __future__ import annotations

from typing import Any

from sealtrace.proxy import SealtraceError, UsageError

__all__ = [
    "DivergenceError",
    "PassesDisagreedError",
    "QueryError",
    "ReplayCrashedError",
    "ReplayEnvironmentError",
    "ValidationError",
]


class ReplayEnvironmentError(UsageError):
    pass


class QueryError(UsageError):
    pass


class DivergenceError(SealtraceError):
    """`divergence`, when known, is the receipt's: the event, the expected and the actual
    call, and where the program made it (a sandbox runner sends it on as frames)."""

    exit_code = 3

    def __init__(self, message: str, divergence: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.divergence = divergence


class PassesDisagreedError(DivergenceError):
    """The passes one question took executed different instructions: `step`, the counter
    where one describes another instruction or another value than the other. Nothing is
    answered from them (a tree joined from two runs would look complete and be wrong)."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


class ValidationError(SealtraceError):
    exit_code = 3


class ReplayCrashedError(SealtraceError):
    exit_code = 1
