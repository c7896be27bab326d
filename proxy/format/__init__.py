"""sealtrace.proxy.format: the sealed recording, as the other components read and make it.

The public seam onto the recorder's format modules for the sandbox, the agent, the server,
bench/ and infra/ (and for applications teaching the codec a type): the value codec's error
and extension hook, the parsed event stream, the format's constants, keys, the sealed reader
and writer, the stores, the HPKE recipes (the recording key wrapped to a run, the
recording key re-sealed to an agent for one session) and the `Secret` buffer the recipes hand
keys out in, which the agent and the server wipe after use. Every name here is a re-export: the
layouts, derivations and the HPKE suite are defined once in the private modules behind it,
whose names may be part of recorded bytes and so never move.

It must never define a layout, a derivation or a recipe of its own, never expose the HPKE
suite or another hazardous primitive, and never import anything heavier than
`sealtrace.proxy` itself does (no web, queue, container or engine stack, no boto3).
"""

from __future__ import annotations

from .._codec import CodecError, register_extension
from .._format import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_SEGMENT_SIZE,
    ENC_SIZE,
    FORMAT_VERSION,
    RECORDING_KEY_SIZE,
    SESSION_BLOB_SIZE,
    WRAPPED_KEY_SIZE,
    open_session_key,
    seal_session_key,
    unwrap_recording_key,
    valid_process_path,
    wrap_recording_key,
)
from .._keys import Identity, Recipient, generate_identity, write_keypair
from .._reader import (
    RecordingStatus,
    SealedReader,
    process_paths,
    read_header,
    read_process,
)
from .._secret import Secret
from .._store import (
    DiscardSink,
    Listing,
    LocalDirStore,
    MemoryStore,
    RecordingSink,
    RecordingSource,
    StoredObject,
    open_store,
)
from .._stream import (
    Event,
    ParsedStream,
    Request,
    SourceFile,
    chain_streams,
    incomplete_stream,
    parse_stream,
    read_meta,
)
from .._writer import SealedWriter

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_SEGMENT_SIZE",
    "ENC_SIZE",
    "FORMAT_VERSION",
    "RECORDING_KEY_SIZE",
    "SESSION_BLOB_SIZE",
    "WRAPPED_KEY_SIZE",
    "CodecError",
    "DiscardSink",
    "Event",
    "Identity",
    "Listing",
    "LocalDirStore",
    "MemoryStore",
    "ParsedStream",
    "Recipient",
    "RecordingSink",
    "RecordingSource",
    "RecordingStatus",
    "Request",
    "SealedReader",
    "SealedWriter",
    "Secret",
    "SourceFile",
    "StoredObject",
    "chain_streams",
    "generate_identity",
    "incomplete_stream",
    "open_session_key",
    "open_store",
    "parse_stream",
    "process_paths",
    "read_header",
    "read_meta",
    "read_process",
    "register_extension",
    "seal_session_key",
    "unwrap_recording_key",
    "valid_process_path",
    "wrap_recording_key",
    "write_keypair",
]
