"""The recorder is imported into other people's processes: pin what it exports and imports,
and what its two public seams for the other components (sealtrace.proxy.format,
sealtrace.proxy.boundary) and its command line export."""

from __future__ import annotations

import sys

import pytest

import sealtrace.proxy
import sealtrace.proxy.boundary
import sealtrace.proxy.cli
import sealtrace.proxy.format

from ..conftest import modules_after

FORBIDDEN = [
    "fastapi",
    "celery",
    "podman",
    "sqlalchemy",
    "boto3",
    "botocore",
    "sealtrace._engine",
    "sealtrace.server",
    "sealtrace.agent",
    "sealtrace.sandbox",
    "pydantic",
    "uvicorn",
]

EXPORTED = [
    "BoundaryEntry",
    "BoundaryLibrary",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_SEGMENT_SIZE",
    "DiscardSink",
    "FORMAT_VERSION",
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


FORMAT_EXPORTED = [
    "CodecError",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_SEGMENT_SIZE",
    "DiscardSink",
    "ENC_SIZE",
    "Event",
    "FORMAT_VERSION",
    "Identity",
    "Listing",
    "LocalDirStore",
    "MemoryStore",
    "ParsedStream",
    "RECORDING_KEY_SIZE",
    "Recipient",
    "Request",
    "RecordingSink",
    "RecordingSource",
    "RecordingStatus",
    "SESSION_BLOB_SIZE",
    "SealedReader",
    "SealedWriter",
    "Secret",
    "SourceFile",
    "StoredObject",
    "WRAPPED_KEY_SIZE",
    "chain_streams",
    "incomplete_stream",
    "generate_identity",
    "open_session_key",
    "open_store",
    "parse_stream",
    "process_paths",
    "read_header",
    "read_process",
    "read_meta",
    "register_extension",
    "seal_session_key",
    "unwrap_recording_key",
    "valid_process_path",
    "wrap_recording_key",
    "write_keypair",
]

BOUNDARY_EXPORTED = [
    "BUILTIN_LIBRARIES",
    "THREAD_SHIFT",
    "Entry",
    "Library",
    "Target",
    "ThreadBody",
    "WouldBlock",
    "args_digest",
    "install",
    "installed_manifest",
    "is_own_code",
    "libraries",
    "outside_the_program",
    "path_under",
    "register",
    "replay_hooks",
    "run_target",
]

CLI_EXPORTED = [
    "IdentityOpt",
    "JsonOpt",
    "LocationArg",
    "ProcessOpt",
    "RunIdOpt",
    "app",
    "guarded",
    "main",
]

# What `import sealtrace.proxy` loads of sealtrace itself: the seams are not among them.
RECORDER_MODULES = {
    "sealtrace",
    "sealtrace.proxy",
    "sealtrace.proxy._errors",
    "sealtrace.proxy._format",
    "sealtrace.proxy._inspect",
    "sealtrace.proxy._keys",
    "sealtrace.proxy._reader",
    "sealtrace.proxy._secret",
    "sealtrace.proxy._store",
    "sealtrace.proxy._writer",
}


def test_importing_the_recorder_pulls_in_no_heavy_stack() -> None:
    loaded = modules_after("import sealtrace.proxy")
    assert "sealtrace.proxy" in loaded
    assert not [m for m in loaded for bad in FORBIDDEN if m == bad or m.startswith(bad + ".")]


def test_negative_control_the_s3_store_does_load_boto3_when_asked() -> None:
    loaded = modules_after("import sealtrace.proxy as p; p.S3Store")
    assert "boto3" in loaded


def test_exported_names_are_pinned() -> None:
    assert sorted(sealtrace.proxy.__all__) == sorted(EXPORTED)
    for name in EXPORTED:
        assert getattr(sealtrace.proxy, name) is not None


def test_importing_the_recorder_loads_neither_seam() -> None:
    loaded = modules_after("import sealtrace.proxy")
    assert {m for m in loaded if m.startswith("sealtrace")} == RECORDER_MODULES


@pytest.mark.parametrize("seam", ["sealtrace.proxy.format", "sealtrace.proxy.boundary"])
def test_a_seam_pulls_in_no_heavy_stack(seam: str) -> None:
    loaded = modules_after(f"import {seam}")
    assert not [m for m in loaded for bad in FORBIDDEN if m == bad or m.startswith(bad + ".")]


def test_the_format_seam_adds_only_the_stream_modules_and_stdlib() -> None:
    extra = modules_after("import sealtrace.proxy.format") - modules_after("import sealtrace.proxy")
    ours = {"sealtrace.proxy.format", "sealtrace.proxy._codec", "sealtrace.proxy._stream"}
    assert {m for m in extra if m.split(".")[0].lstrip("_") not in sys.stdlib_module_names} <= ours


def test_the_boundary_seam_loads_the_recorder_only_when_asked() -> None:
    assert "sealtrace.proxy._recorder" not in modules_after("import sealtrace.proxy.boundary")
    assert "sealtrace.proxy._recorder" in modules_after(
        "from sealtrace.proxy.boundary import installed_manifest"
    )


@pytest.mark.parametrize(
    ("module", "exported"),
    [
        (sealtrace.proxy.format, FORMAT_EXPORTED),
        (sealtrace.proxy.boundary, BOUNDARY_EXPORTED),
        (sealtrace.proxy.cli, CLI_EXPORTED),
    ],
)
def test_seam_names_are_pinned(module: object, exported: list[str]) -> None:
    assert sorted(module.__all__) == sorted(exported)  # type: ignore[attr-defined]
    for name in exported:
        assert getattr(module, name) is not None


def test_negative_control_a_seam_refuses_a_name_it_does_not_export() -> None:
    with pytest.raises(AttributeError):
        sealtrace.proxy.boundary.Patcher  # noqa: B018 - the lookup is the test
    assert not hasattr(sealtrace.proxy.format, "HPKE_SUITE")
