"""sealtrace.proxy: the recorder imported into production processes, and the sealed format.

It must never block or crash the host application, never hold a private key, and never import
web, queue, container or engine stacks (FastAPI, Celery, podman, SQLAlchemy, sealtrace._engine);
boto3 is imported only when an s3:// store is used. The public surface is `__all__` here and
in three public modules: `sealtrace.proxy.format` (codec, event stream, sealed format, keys,
reader, writer, stores, every HPKE recipe), `sealtrace.proxy.boundary` (the boundary table,
what replay needs of the runtime, launch) and `sealtrace.proxy.cli` (the root command); the
modules behind them are private, and `make lint` fails on another package importing one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._errors import (
    IncompleteRecordingError,
    IntegrityError,
    RunIdMismatchError,
    SealtraceError,
    StorageError,
    TamperedError,
    UnsupportedFormatError,
    UsageError,
    WrongIdentityError,
)
from ._format import DEFAULT_CHUNK_SIZE, DEFAULT_SEGMENT_SIZE, FORMAT_VERSION
from ._inspect import describe_recording
from ._keys import Identity, Recipient, generate_identity, write_keypair
from ._reader import RecordingStatus, SealedReader
from ._store import (
    DiscardSink,
    Listing,
    LocalDirStore,
    MemoryStore,
    RecordingSink,
    RecordingSource,
    StoredObject,
    open_store,
)
from ._writer import SealedWriter

if TYPE_CHECKING:
    from ._boundary import Entry as BoundaryEntry
    from ._boundary import Library as BoundaryLibrary
    from ._boundary import register as register_boundary
    from ._recorder import Recording, start_recording
    from ._s3 import S3Options, S3Store

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_SEGMENT_SIZE",
    "FORMAT_VERSION",
    "BoundaryEntry",
    "BoundaryLibrary",
    "DiscardSink",
    "Identity",
    "IncompleteRecordingError",
    "IntegrityError",
    "Listing",
    "LocalDirStore",
    "MemoryStore",
    "Recipient",
    "Recording",
    "RecordingSink",
    "RecordingSource",
    "RecordingStatus",
    "RunIdMismatchError",
    "S3Options",
    "S3Store",
    "SealedReader",
    "SealedWriter",
    "SealtraceError",
    "StorageError",
    "StoredObject",
    "TamperedError",
    "UnsupportedFormatError",
    "UsageError",
    "WrongIdentityError",
    "describe_recording",
    "generate_identity",
    "open_store",
    "register_boundary",
    "start_recording",
    "write_keypair",
]

_LAZY = {
    # The S3 store pulls in boto3, and the recorder the boundary adapters: load each only
    # when someone asks for it.
    "S3Options": ("_s3", "S3Options"),
    "S3Store": ("_s3", "S3Store"),
    "Recording": ("_recorder", "Recording"),
    "start_recording": ("_recorder", "start_recording"),
    "BoundaryEntry": ("_boundary", "Entry"),
    "BoundaryLibrary": ("_boundary", "Library"),
    "register_boundary": ("_boundary", "register"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
