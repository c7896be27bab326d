"""Round trips through the writer and reader over random sizes, chunkings and write patterns."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sealtrace.proxy import (
    LocalDirStore,
    MemoryStore,
    SealedReader,
    SealedWriter,
    generate_identity,
)
from sealtrace.proxy._format import segment_capacity

IDENTITY = generate_identity()


@st.composite
def sealing_plans(draw: st.DrawFn) -> tuple[bytes, int, int, list[int], set[int]]:
    data = draw(st.binary(min_size=0, max_size=20_000))
    chunk = draw(st.integers(16, 3000))
    segment = draw(st.integers(50, 40_000))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    flush_after = draw(st.sets(st.integers(0, len(cuts)), max_size=4))
    return data, chunk, segment, cuts, flush_after


def _seal(
    store: MemoryStore | LocalDirStore, plan: tuple[bytes, int, int, list[int], set[int]]
) -> SealedWriter:
    data, chunk, segment, cuts, flush_after = plan
    writer = SealedWriter(
        store, IDENTITY.recipient, "run-prop", chunk_size=chunk, segment_size=segment
    )
    bounds = [0, *cuts, len(data)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        writer.write(data[a:b])
        if i in flush_after:
            writer.flush()
    return writer


@settings(max_examples=150, deadline=None)
@given(sealing_plans())
def test_any_plan_round_trips_and_reads_complete(
    plan: tuple[bytes, int, int, list[int], set[int]],
) -> None:
    store = MemoryStore()
    writer = _seal(store, plan)
    writer.close()
    reader = SealedReader(store, IDENTITY, expected_run_id="run-prop")
    chunks = list(reader)
    assert b"".join(chunks) == plan[0]
    assert all(len(c) <= plan[1] for c in chunks)
    assert reader.status.complete
    assert reader.status.chunks == writer.chunks_sealed == len(chunks)
    assert reader.status.segments == writer.segments_written
    assert reader.status.alarms == []


@settings(max_examples=100, deadline=None)
@given(sealing_plans())
def test_an_unfinished_writer_reads_incomplete_up_to_its_last_flush(
    plan: tuple[bytes, int, int, list[int], set[int]],
) -> None:
    store = MemoryStore()
    writer = _seal(store, plan)
    durable = writer.chunks_sealed
    # No close(): whatever the writer sealed into written segments is all a reader may see.
    reader = SealedReader(store, IDENTITY)
    got = reader.read_all()
    assert plan[0].startswith(got)
    assert not reader.status.complete
    assert reader.status.chunks <= durable
    writer.abort()
    reader = SealedReader(store, IDENTITY)
    assert reader.read_all() == plan[0]
    assert not reader.status.complete
    assert "incomplete" in reader.status.describe()


@pytest.mark.parametrize("size", [0, 1, 65535, 65536, 65537, 3 * 65536])
def test_default_sizes_round_trip_on_disk(tmp_path: Path, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    store = LocalDirStore(tmp_path / "rec")
    with SealedWriter(store, IDENTITY.recipient, "run-disk") as writer:
        writer.write(data)
    reader = SealedReader(LocalDirStore(tmp_path / "rec"), IDENTITY)
    assert reader.read_all() == data and reader.status.complete
    assert oct((tmp_path / "rec" / "header").stat().st_mode & 0o777) == "0o444"


def test_memory_is_bounded_by_one_segment_and_one_chunk() -> None:
    store = MemoryStore()
    writer = SealedWriter(
        store, IDENTITY.recipient, "run-mem", chunk_size=1024, segment_size=64 * 1024
    )
    buffers = (id(writer._segment), id(writer._pending))  # allocated once
    for _ in range(500):
        writer.write(b"z" * 3000)
    assert (id(writer._segment), id(writer._pending)) == buffers  # reused, never regrown
    assert len(writer._segment) <= 64 * 1024 + 1024
    assert writer.segments_written >= 500 * 3000 // (64 * 1024)
    assert segment_capacity(1024, 64 * 1024) == (64 * 1024 - 46) // (1024 + 21)
    writer.close()
