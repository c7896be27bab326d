"""The request index: each HTTP/1.x request a server in the recorded process answered, as it
went, so that a user can pick "the request that returned £0.00" out of a worker's thousands.

Requests are seen where every server meets them, whatever framework runs above it (Flask,
Django, FastAPI/Starlette; werkzeug, Django's server, uvicorn, wsgiref): on the sockets
`accept()` returns. A connection's bytes are read as HTTP/1.x: a request line (method,
target, version) begins a request, the first final status line the server sends (`HTTP/1.1
200 OK`; a `100 Continue` is interim) is its status, and the request ends with the last bytes
sent before the connection's next request line, its close, or the end of the recording. Each
request becomes one REQUEST record when it ends (so a worker that is killed keeps the index of
every request it finished), holding:

    method, path        from the request line; the path without its query string, which
                        often carries tokens, and at most 2,048 characters
    status              the final status code sent, or None (no response line was seen)
    accepted            the event index of the accept() that made its connection (about: the
                        count after it, less one; a window opened there holds the request)
    first, last         the event indices (0-based, over all threads) the request spans: the
                        read that brought its request line is at or after `first`, its last
                        send at or before `last`
    started, duration   wall-clock start (Unix seconds) and seconds to the last send
    thread              the recorded thread that read the request line
    complete            False for a request still open when the recording ended

It must never change what the program sees: it only reads bytes the boundary already holds,
never raises into the program (a connection it cannot read as HTTP/1.x is simply not
indexed: TLS handshakes, HTTP/2, other protocols), and keeps at most one request line
(8 KiB) per connection. Nothing here runs on replay: the index is read from the recording.
"""

from __future__ import annotations

import re
import time
from typing import Any, Protocol

__all__ = ["MAX_LINE", "MAX_PATH", "Exchange", "RequestIndex"]

MAX_LINE = 8192  # a request line longer than this is not HTTP we index
MAX_PATH = 2048

_REQUEST_LINE = re.compile(rb"([A-Z][A-Z0-9_-]{0,31}) (\S{1,8192}) HTTP/1\.[01]\r?\n")
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([1-5][0-9][0-9])")
_now = time.time  # captured before the boundary replaces it: the index's clock is no event

# Connection states.
_IDLE, _READING, _ANSWERED, _NOT_HTTP = 0, 1, 2, 3


class _Recorder(Protocol):
    events: int

    def record_request(self, fields: dict[str, Any]) -> None: ...

    def thread_index(self) -> int: ...


def _path(target: bytes) -> str:
    text = target.decode("latin-1")
    if "://" in text:  # absolute form: keep the path
        after = text.split("://", 1)[1]
        text = after[after.find("/") :] if "/" in after else "/"
    return text.split("?", 1)[0].split("#", 1)[0][:MAX_PATH]


class Exchange:
    """One accepted connection's HTTP/1.x state. Used by the threads that use the connection
    (one at a time, as servers do); only the index's own bookkeeping is shared."""

    __slots__ = (
        "_index",
        "_line",
        "_state",
        "accepted",
        "ended",
        "first",
        "last",
        "method",
        "path",
        "started",
        "status",
        "thread",
    )

    def __init__(self, index: RequestIndex, accepted: int) -> None:
        self._index = index
        self.accepted = accepted
        self._state = _IDLE
        self._line = bytearray()
        self.method = self.path = ""
        self.status: int | None = None
        self.first = self.last = self.thread = 0
        self.started = self.ended = 0.0

    def received(self, data: Any, first: int) -> None:
        """Bytes the server read; `first` is the event count before the read."""
        try:
            self._received(data, first)
        except Exception:
            self._state = _NOT_HTTP

    def _received(self, data: Any, first: int) -> None:
        state = self._state
        if state in (_NOT_HTTP, _READING) or not data:
            return
        if state == _ANSWERED:  # the next request on a kept-alive connection
            self._index.ended(self, complete=True)
            self._state = state = _IDLE
        line = self._line
        if not line:
            self.first = first
            self.started = _now()
            self.thread = self._index.thread()
        line += bytes(data[: MAX_LINE + 1 - len(line)])
        end = line.find(b"\n")
        if end < 0:
            if len(line) > MAX_LINE:
                self._state = _NOT_HTTP
            return
        match = _REQUEST_LINE.match(line, 0, end + 1)
        if match is None:
            self._state = _NOT_HTTP
            return
        self.method = match.group(1).decode("ascii")
        self.path = _path(match.group(2))
        self.status = None
        self.last = first
        self.ended = self.started
        line.clear()
        self._state = _READING
        self._index.opened(self)

    def sent(self, data: Any, last: int) -> None:
        """Bytes the server sent; `last` is the event count after the send."""
        try:
            self._sent(data, last)
        except Exception:
            self._state = _NOT_HTTP

    def _sent(self, data: Any, last: int) -> None:
        if self._state not in (_READING, _ANSWERED):
            return
        if self.status is None:
            view = bytes(data[:4096])
            for match in _STATUS_LINE.finditer(view):
                start = match.start()
                if start and view[start - 4 : start] != b"\r\n\r\n":
                    continue  # only at the start of the data or after an interim response
                code = int(match.group(1))
                if code >= 200:
                    self.status = code
                    self._state = _ANSWERED
                    break
        self.last = max(last - 1, self.first)
        self.ended = _now()

    def closed(self) -> None:
        if self._state in (_READING, _ANSWERED):
            self._index.ended(self, complete=True)
        self._state = _NOT_HTTP

    def record(self, complete: bool) -> dict[str, Any]:
        return {
            "method": self.method,
            "path": self.path,
            "status": self.status,
            "accepted": self.accepted,
            "first": self.first,
            "last": self.last,
            "started": self.started,
            "duration": max(0.0, self.ended - self.started),
            "thread": self.thread,
            "complete": complete,
        }


class RequestIndex:
    """The recording's request index: hands each accepted connection an Exchange and writes a
    REQUEST record for each request as it ends (and for those still open at the end)."""

    def __init__(self, recorder: _Recorder) -> None:
        self._recorder = recorder
        self._open: dict[int, Exchange] = {}  # id -> an exchange with a request under way
        self.count = 0

    def exchange(self) -> Exchange:
        """A connection accept() has just returned (its event the last one recorded)."""
        return Exchange(self, max(self._recorder.events - 1, 0))

    def events(self) -> int:
        return self._recorder.events

    def thread(self) -> int:
        return self._recorder.thread_index()

    def in_flight(self) -> bool:
        """Whether a request is under way (a run rotates between requests)."""
        return bool(self._open)

    def opened(self, exchange: Exchange) -> None:
        self._open[id(exchange)] = exchange

    def ended(self, exchange: Exchange, *, complete: bool) -> None:
        if self._open.pop(id(exchange), None) is None:
            return
        self.count += 1
        self._recorder.record_request(exchange.record(complete))

    def close(self) -> None:
        """The recording ends: every request still open is written, marked incomplete unless
        its response had begun."""
        for exchange in list(self._open.values()):
            self.ended(exchange, complete=exchange.status is not None)
