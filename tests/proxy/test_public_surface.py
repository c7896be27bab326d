"""The recorder is imported into other people's processes: pin what it exports and imports."""

from __future__ import annotations

import json
import subprocess
import sys

import sealtrace.proxy

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


def _modules_after(statement: str) -> set[str]:
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True)
    return set(json.loads(out.stdout))


def test_importing_the_recorder_pulls_in_no_heavy_stack() -> None:
    loaded = _modules_after("import sealtrace.proxy")
    assert "sealtrace.proxy" in loaded
    assert not [m for m in loaded for bad in FORBIDDEN if m == bad or m.startswith(bad + ".")]


def test_negative_control_the_s3_store_does_load_boto3_when_asked() -> None:
    loaded = _modules_after("import sealtrace.proxy as p; p.S3Store")
    assert "boto3" in loaded


def test_exported_names_are_pinned() -> None:
    assert sorted(sealtrace.proxy.__all__) == sorted(EXPORTED)
    for name in EXPORTED:
        assert getattr(sealtrace.proxy, name) is not None
