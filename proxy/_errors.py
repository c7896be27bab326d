"""Every error sealtrace.proxy raises, and the CLI exit code each one maps to.

    SealtraceError                      base of everything below
    ├── UsageError                      exit 2: bad arguments, malformed key file, unusable store
    ├── StorageError                    exit 1: the store could not be read or written
    └── IntegrityError                  exit 4: the recording cannot be trusted as stored
        ├── UnsupportedFormatError      not a sealtrace recording, or a version we do not read
        ├── WrongIdentityError          the identity cannot unwrap the recording key
        ├── RunIdMismatchError          the recording belongs to another run
        ├── TamperedError               a chunk, segment or header failed authentication or
        │                               structure checks (bit flips, splicing, reordering,
        │                               duplication, truncation inside a segment, garbage)
        └── IncompleteRecordingError    authenticated data ends before the final chunk

A reader never yields plaintext that failed authentication: when one of these is raised,
everything yielded before it was verified and belongs to this recording, in order.
"""

from __future__ import annotations

__all__ = [
    "IncompleteRecordingError",
    "IntegrityError",
    "RunIdMismatchError",
    "SealtraceError",
    "StorageError",
    "TamperedError",
    "UnsupportedFormatError",
    "UsageError",
    "WrongIdentityError",
]


class SealtraceError(Exception):
    """Base class; `exit_code` is what the CLI exits with."""

    exit_code = 1


class UsageError(SealtraceError):
    exit_code = 2


class StorageError(SealtraceError):
    exit_code = 1


class IntegrityError(SealtraceError):
    exit_code = 4


class UnsupportedFormatError(IntegrityError):
    pass


class WrongIdentityError(IntegrityError):
    pass


class RunIdMismatchError(IntegrityError):
    pass


class TamperedError(IntegrityError):
    pass


class IncompleteRecordingError(IntegrityError):
    """Raised only where the caller asked for a complete recording."""

    def __init__(self, message: str, *, chunks: int) -> None:
        super().__init__(message)
        self.chunks = chunks
