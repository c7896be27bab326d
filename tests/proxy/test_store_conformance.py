"""Every store implementation keeps the same contract: write-once objects, oldest-version reads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sealtrace.proxy import (
    LocalDirStore,
    MemoryStore,
    RecordingSink,
    RecordingSource,
    S3Options,
    S3Store,
    SealedReader,
    SealedWriter,
    StorageError,
    generate_identity,
)

Store = LocalDirStore | MemoryStore | S3Store


@pytest.fixture(params=["local", "memory", pytest.param("s3", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "local":
        yield LocalDirStore(tmp_path / "rec")
    elif request.param == "memory":
        yield MemoryStore()
    else:
        bucket: str = request.getfixturevalue("locked_bucket")
        yield S3Store.from_url(f"s3://{bucket}/t/run", S3Options(retention_days=1))


def test_implements_both_protocols(store: Store) -> None:
    assert isinstance(store, RecordingSink) and isinstance(store, RecordingSource)


def test_round_trip_and_listing(store: Store) -> None:
    identity = generate_identity()
    assert store.list().objects == {}
    with SealedWriter(store, identity.recipient, "run-c", chunk_size=100, segment_size=500) as w:
        w.write(b"q" * 1234)
    listing = store.list()
    assert set(listing.objects) == {
        "header",
        *(f"seg-{i:06d}" for i in range(5)),
    }  # 13 chunks, 3 a segment
    assert listing.alarms == []
    reader = SealedReader(store, identity)
    assert reader.read_all() == b"q" * 1234 and reader.status.complete


def test_a_second_put_never_replaces_the_first(store: Store) -> None:
    store.put("seg-000000", b"first")
    try:
        store.put("seg-000000", b"second")
    except StorageError:
        assert isinstance(store, LocalDirStore)  # a plain directory refuses outright
    else:
        assert any("later version" in a for a in store.list().alarms)
    assert store.get("seg-000000") == b"first"
    assert store.list().objects["seg-000000"].size == len(b"first")


def test_only_recording_names_are_accepted(store: Store) -> None:
    with pytest.raises(ValueError, match="not a recording object name"):
        store.put("../escape", b"x")
