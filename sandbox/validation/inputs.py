"""What a validation program is run with: its arguments, environment, input files, and a peer.

Every program of the suites (sealtrace.sandbox.validation.cases and .corpus) reads real
inputs. A manifest entry's `make_inputs(directory)` writes them into an empty directory,
which becomes the recorded run's working directory, and returns an `Inputs`. A program that
talks over loopback (a web server, a socket or asyncio client) gets a `peer`: the other end,
run by the validator in a thread while the program is recorded. The recording holds what
crossed the socket, so replay needs neither the files nor the peer.

A peer must never hang the validator: every socket it opens has a timeout, and the
validator waits for it only a bounded time.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "PEER_TIMEOUT",
    "Inputs",
    "database",
    "free_port",
    "http_post",
    "lines_client",
    "listening",
    "write_json",
]

PEER_TIMEOUT = 30.0


@dataclass(frozen=True)
class Inputs:
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    # The program's loopback counterpart, started just before the program and joined after.
    peer: Callable[[], None] | None = None


def database(path: Path, schema: str, insert: str, rows: Iterable[tuple[Any, ...]]) -> None:
    db = sqlite3.connect(path)
    try:
        db.execute(schema)
        db.executemany(insert, rows)
        db.commit()
    finally:
        db.close()


def write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2))


def free_port() -> int:
    """A loopback port nothing listens on now (the program binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _connect(port: int) -> socket.socket:
    """Connect to a server the program is about to start, retrying until it listens."""
    deadline = time.monotonic() + PEER_TIMEOUT
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=PEER_TIMEOUT)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def http_post(port: int, path: str, body: bytes, content_type: str) -> Callable[[], None]:
    """A peer that sends one HTTP/1.1 POST to the program's server and reads the reply."""

    def peer() -> None:
        with _connect(port) as sock:
            head = (
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            )
            sock.sendall(head.encode() + body)
            while sock.recv(65536):
                pass

    return peer


def lines_client(port: int, requests: Iterable[bytes]) -> Callable[[], None]:
    """A peer that connects to the program's server, sends each request line and reads one
    reply line after each."""
    sent = list(requests)

    def peer() -> None:
        with _connect(port) as sock, sock.makefile("rb") as replies:
            for line in sent:
                sock.sendall(line)
                replies.readline()

    return peer


def listening(replies: Mapping[bytes, bytes]) -> tuple[int, Callable[[], None]]:
    """A line server the program connects to: for each request line it knows, one reply.
    It listens before the program starts, and serves one connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(PEER_TIMEOUT)
    port = int(server.getsockname()[1])

    def peer() -> None:
        with server:
            conn, _ = server.accept()
            conn.settimeout(PEER_TIMEOUT)
            with conn, conn.makefile("rb") as requests:
                for line in requests:
                    reply = replies.get(line.strip())
                    if reply is None:
                        break
                    conn.sendall(reply)

    return port, peer
