"""Seal and open throughput against raw AES-256-GCM on the same bytes, in the same run.

Raw baseline: AESGCM over the same plaintext in the same 64 KiB pieces into a preallocated
buffer (the fastest way Python can drive the cipher: no framing, no nonce/AAD building, no
store), and, for reference, one AESGCM call over the whole buffer. Sealing writes into a
DiscardSink and opening reads from a MemoryStore, so storage cost is not counted on either
side. Streaming throughput (write + close; verify + decrypt) is reported apart from the fixed
per-recording setup (HPKE wrap or unwrap, header), which is also given in microseconds and
folded into the "+setup" ratios. Each figure is the best of several repeats.
Target: seal and open streaming throughput >= 80 % of raw.

    python bench/seal.py [--sizes 1,16,64,256] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from _machine import machine
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from sealtrace.proxy import (
    DEFAULT_CHUNK_SIZE,
    DiscardSink,
    Identity,
    MemoryStore,
    Recipient,
    SealedReader,
    SealedWriter,
    generate_identity,
)

MiB = 1024 * 1024
WRITE_SIZE = MiB  # what `sealtrace seal` reads from stdin at a time


def best_of(repeats: int, func: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best


def raw_chunked_encrypt(aead: AESGCM, data: memoryview, out: bytearray) -> None:
    nonce, view = bytearray(12), memoryview(out)
    for pos in range(0, len(data), DEFAULT_CHUNK_SIZE):
        piece = data[pos : pos + DEFAULT_CHUNK_SIZE]
        nonce[4:] = (pos // DEFAULT_CHUNK_SIZE).to_bytes(8, "big")
        aead.encrypt_into(nonce, piece, None, view[: len(piece) + 16])


def raw_chunked_decrypt(aead: AESGCM, sealed: list[bytes], out: bytearray) -> None:
    nonce, view = bytearray(12), memoryview(out)
    for i, piece in enumerate(sealed):
        nonce[4:] = i.to_bytes(8, "big")
        aead.decrypt_into(nonce, piece, None, view[: len(piece) - 16])


def stream_into(writer: SealedWriter, data: memoryview) -> None:
    for pos in range(0, len(data), WRITE_SIZE):
        writer.write(data[pos : pos + WRITE_SIZE])
    writer.close()


def timed_seal(data: memoryview, recipient: Recipient) -> tuple[float, float]:
    """(setup seconds: key wrap + header, stream seconds: write + close)."""
    start = time.perf_counter()
    writer = SealedWriter(DiscardSink(), recipient, "bench-run")
    ready = time.perf_counter()
    stream_into(writer, data)
    return ready - start, time.perf_counter() - ready


def timed_open(store: MemoryStore, identity: Identity, size: int) -> tuple[float, float]:
    """(setup seconds: listing + key unwrap, stream seconds: verify + decrypt every chunk)."""
    start = time.perf_counter()
    reader = SealedReader(store, identity)
    ready = time.perf_counter()
    status = reader.copy_to(lambda view: None)
    done = time.perf_counter()
    assert status.complete and status.plaintext_bytes == size
    return ready - start, done - ready


def best_pair(repeats: int, func: Callable[[], tuple[float, float]]) -> tuple[float, float]:
    runs = [func() for _ in range(repeats)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def measure(size_mib: int, repeats: int) -> dict[str, float]:
    data = memoryview(os.urandom(size_mib * MiB))
    identity = generate_identity()
    aead = AESGCM(os.urandom(32))
    out = bytearray(DEFAULT_CHUNK_SIZE + 16)

    raw_enc = best_of(repeats, lambda: raw_chunked_encrypt(aead, data, out))
    raw_oneshot = best_of(max(1, repeats // 2), lambda: aead.encrypt(bytes(12), data, None))
    seal_setup, seal = best_pair(repeats, lambda: timed_seal(data, identity.recipient))

    pieces = [
        aead.encrypt(
            (i // DEFAULT_CHUNK_SIZE).to_bytes(12, "big"), data[i : i + DEFAULT_CHUNK_SIZE], None
        )
        for i in range(0, len(data), DEFAULT_CHUNK_SIZE)
    ]
    raw_dec = best_of(repeats, lambda: raw_chunked_decrypt(aead, pieces, out))
    store = MemoryStore()
    stream_into(SealedWriter(store, identity.recipient, "bench-run"), data)
    open_setup, opened = best_pair(repeats, lambda: timed_open(store, identity, len(data)))
    mbps = lambda seconds: size_mib / seconds  # noqa: E731
    return {
        "size_mib": size_mib,
        "raw_encrypt_mib_s": mbps(raw_enc),
        "raw_encrypt_oneshot_mib_s": mbps(raw_oneshot),
        "seal_mib_s": mbps(seal),
        "seal_vs_raw": raw_enc / seal,
        "seal_setup_us": seal_setup * 1e6,
        "seal_with_setup_vs_raw": raw_enc / (seal + seal_setup),
        "raw_decrypt_mib_s": mbps(raw_dec),
        "open_mib_s": mbps(opened),
        "open_vs_raw": raw_dec / opened,
        "open_setup_us": open_setup * 1e6,
        "open_with_setup_vs_raw": raw_dec / (opened + open_setup),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1,16,64,256", help="MiB, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "seal.json"
    )
    args = parser.parse_args()

    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        repeats = args.repeats if size <= 64 else max(2, args.repeats // 2)
        rows.append(measure(size, repeats))

    print(
        "size     | raw enc MiB/s | seal MiB/s | seal/raw | +setup | raw dec MiB/s | open MiB/s"
        " | open/raw | +setup | seal setup us | open setup us"
    )
    for r in rows:
        print(
            f"{r['size_mib']:>4} MiB | {r['raw_encrypt_mib_s']:>13.0f} | {r['seal_mib_s']:>10.0f}"
            f" | {r['seal_vs_raw']:>8.0%} | {r['seal_with_setup_vs_raw']:>6.0%}"
            f" | {r['raw_decrypt_mib_s']:>13.0f} | {r['open_mib_s']:>10.0f}"
            f" | {r['open_vs_raw']:>8.0%} | {r['open_with_setup_vs_raw']:>6.0%}"
            f" | {r['seal_setup_us']:>13.0f} | {r['open_setup_us']:>13.0f}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {"bench": "seal", "target_ratio": 0.8, "machine": machine(), "results": rows}, indent=2
        )
        + "\n"
    )
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
