"""Adapters for sockets, TLS and readiness (select, poll, epoll, selectors).

`socket.socket` becomes `Socket`, a proxy that owns the real socket when recording and none
when replaying; every operation on the operating system's socket is a boundary call keyed by
the proxy's stable object id. TLS is recorded at the SSLSocket level: the application's
plaintext, never TLS records. Readiness results are recorded as file descriptor numbers, which
are the recorded ones on replay too, so selectors keep working against proxies.
"""

from __future__ import annotations

import _socket
import io
import os
import select
import selectors
import socket as socket_module
import ssl  # before socket.socket is replaced: ssl.SSLSocket must subclass the real one
import struct
from collections.abc import Iterable
from typing import Any

from ._boundary import Patcher
from ._io_boundary import tracked_descriptors
from ._runtime import Hot, Runtime, native_methods, proxy_bases

_SOL_SOCKET = getattr(socket_module, "SOL_SOCKET", 1)
_SCM_RIGHTS = getattr(socket_module, "SCM_RIGHTS", 1)
_INT = struct.Struct("i")

__all__ = [
    "Epoll",
    "Poll",
    "SSLSocket",
    "Socket",
    "install_select",
    "install_socket",
    "install_ssl",
]

_BaseSocket = socket_module.socket
# A proxy's real socket is the C socket itself: socket.socket's Python layer (its __init__,
# close and file-object count) would run under the proxy's own for every socket, and its
# accept, dup and socketpair build their new sockets through the module's socket name,
# which is the installed proxy class.
_RealSocket = _socket.socket


# What a Socket proxy is built from: (fd, family, type, proto) of a real socket, each read by
# a method or a field of the C socket type (which the C twin of Socket.__init__ reads
# straight from the descriptors). The fields, not socket.socket's family and type
# properties: those make enum members, which the recorded ints would only turn back into.
_DESCRIBE = (_RealSocket.fileno, _RealSocket.family, _RealSocket.type, _RealSocket.proto)


def _info(sock: Any) -> tuple[int, int, int, int]:
    """_DESCRIBE of a socket (or of a proxy, which socket.py's own socket.socket code makes
    through the replaced socket.socket: accept on a socket made before recording does)."""
    if type(sock) is _RealSocket:  # the fields read as they are: plain ints
        return sock.fileno(), sock.family, sock.type, sock.proto
    if isinstance(sock, _socket.socket):
        fd, family, kind, proto = (
            describe(sock) if callable(describe) else describe.__get__(sock)
            for describe in _DESCRIBE
        )
        return fd, family, kind, proto
    return sock.fileno(), int(sock.family), int(sock.type), sock.proto


def _accept(real: Any) -> tuple[Any, Any]:
    """real.accept(), as socket.socket.accept does it for a C socket."""
    if type(real) is not _RealSocket:
        return real.accept()  # type: ignore[no-any-return]  # ssl.SSLSocket wraps its own
    fd, address = real._accept()  # type: ignore[attr-defined]
    conn = _RealSocket(real.family, real.type, real.proto, fd)
    if socket_module.getdefaulttimeout() is None and real.gettimeout():
        conn.setblocking(True)
    return conn, address


def _dup(real: Any) -> Any:
    """real.dup(), as socket.socket.dup does it for a C socket."""
    if type(real) is not _RealSocket:
        return real.dup()
    copy = _RealSocket(real.family, real.type, real.proto, _socket.dup(real.fileno()))
    copy.settimeout(real.gettimeout())
    return copy


def _socketpair(family: int | None = None, type: int = _socket.SOCK_STREAM, proto: int = 0) -> Any:
    """socket.socketpair, of C sockets."""
    return _socket.socketpair(_socket.AF_UNIX if family is None else family, type, proto)


def _fd_of(obj: Any) -> int:
    return obj if isinstance(obj, int) else int(obj.fileno())


_get_inheritable = os.get_inheritable  # captured: the boundary's own calls are not the program's
_set_inheritable = os.set_inheritable


def _passed_descriptors(ancdata: list[tuple[Any, ...]]) -> list[int]:
    """The descriptors an SCM_RIGHTS message carried (native-endian C ints)."""
    found: list[int] = []
    for item in ancdata:
        if len(item) == 3 and item[0] == _SOL_SOCKET and item[1] == _SCM_RIGHTS:
            raw = bytes(item[2])
            size = _INT.size
            found.extend(_INT.unpack_from(raw, at)[0] for at in range(0, len(raw) - size + 1, size))
    return found


class Socket:
    """socket.socket, one boundary call per operating-system operation."""

    _rt: Runtime
    _plain: Any  # the installed socket.socket proxy class, for accepted and dup'ed sockets
    _served: Any  # the class of accepted sockets: _plain, or its subclass that indexes requests

    def __init__(
        self,
        family: int = -1,
        type: int = -1,
        proto: int = -1,
        fileno: int | None = None,
    ) -> None:
        made: list[Any] = []

        def create() -> tuple[int, int, int, int]:
            real = _RealSocket(family, type, proto, fileno)
            made.append(real)
            return _info(real)

        info = self._rt.call("socket.socket", (family, type, proto, fileno), create)
        self._setup(info, made[0] if made else None)

    def _setup(self, info: tuple[int, int, int, int], real: Any) -> None:
        """Sets the proxy up from the description of its socket (recorded) and the socket
        itself (None on replay)."""
        self._real: Any = real
        self._oid = self._rt.new_oid()
        self._fd, self._family, self._type, self.proto = info
        # Its descriptor, used as a bare int (fcntl, os.read, a multiprocessing connection),
        # is served on replay as the socket is.
        tracked_descriptors(self._rt).add(self._fd)
        self._timeout: float | None = socket_module.getdefaulttimeout()
        self._io_refs = 0
        self._closed = False

    @classmethod
    def _adopt(cls, info: tuple[int, int, int, int], real: Any) -> Socket:
        sock = cls.__new__(cls)
        sock._setup(info, real)
        return sock

    def _call(self, op: str, key: tuple[Any, ...], fn: Any) -> Any:
        if self._fd < 0 and op != "close":
            raise OSError(9, "Bad file descriptor")
        return self._rt.call(f"socket.{op}", (self._oid, *key), fn)

    # -- identity and local state ---------------------------------------------------------

    @property
    def family(self) -> socket_module.AddressFamily | int:
        try:
            return socket_module.AddressFamily(self._family)
        except ValueError:
            return self._family

    @property
    def type(self) -> socket_module.SocketKind | int:
        try:
            return socket_module.SocketKind(self._type)
        except ValueError:
            return self._type

    def fileno(self) -> int:
        return self._fd

    def gettimeout(self) -> float | None:
        return self._timeout

    @property
    def timeout(self) -> float | None:
        return self._timeout

    def settimeout(self, value: float | None) -> None:
        if value is not None:
            value = float(value)
            if value < 0:
                raise ValueError("Timeout value out of range")
        if self._real is not None:
            self._real.settimeout(value)
        self._timeout = value

    def setblocking(self, flag: bool) -> None:
        self.settimeout(None if flag else 0.0)

    def getblocking(self) -> bool:
        return self._timeout != 0.0

    def __repr__(self) -> str:
        closed = getattr(self, "_closed", False)
        return (
            f"<{type(self).__module__}.{type(self).__qualname__}"
            f"{' [closed]' if closed else ''} fd={self._fd}, family={self._family}, "
            f"type={self._type}, proto={self.proto}>"
        )

    def __enter__(self) -> Socket:
        return self

    def __exit__(self, *args: object) -> None:
        if not self._closed:
            self.close()

    def __getstate__(self) -> Any:
        raise TypeError(f"cannot pickle {type(self).__name__!r} object")

    # -- operations -------------------------------------------------------------------------

    # The hot paths (connect, setsockopt, close, send*, recv*) call the runtime directly.

    def connect(self, address: Any) -> None:
        if self._fd < 0:
            raise OSError(9, "Bad file descriptor")
        self._rt.invoke("socket.connect", (self._oid, address), self._real, "connect", address)

    def connect_ex(self, address: Any) -> int:
        real = self._real
        return int(self._call("connect_ex", (address,), lambda: real.connect_ex(address)))

    def bind(self, address: Any) -> None:
        real = self._real
        self._call("bind", (address,), lambda: real.bind(address))

    def listen(self, *backlog: int) -> None:
        real = self._real
        self._call("listen", backlog, lambda: real.listen(*backlog))

    def accept(self) -> tuple[Socket, Any]:
        holder: list[Any] = []
        real = self._real

        def accept() -> tuple[tuple[int, int, int, int], Any]:
            conn, address = _accept(real)
            holder.append(conn)
            return _info(conn), address

        info, address = self._call("accept", (), accept)
        conn = self._served._adopt(info, holder[0] if holder else None)
        if self._timeout is None and socket_module.getdefaulttimeout() is None:
            conn._timeout = None
        return conn, address

    def dup(self) -> Socket:
        holder: list[Any] = []
        real = self._real

        def dup() -> tuple[int, int, int, int]:
            copy = _dup(real)
            holder.append(copy)
            return _info(copy)

        copy: Socket = self._plain._adopt(self._call("dup", (), dup), holder[0] if holder else None)
        return copy

    def send(self, data: Any, flags: int = 0) -> int:
        payload, real = bytes(data), self._real
        sent: int = self._rt.output(
            "socket.send", (self._oid, flags), payload, lambda: real.send(payload, flags)
        )
        return sent

    def sendall(self, data: Any, flags: int = 0) -> None:
        payload, real = bytes(data), self._real
        self._rt.output(
            "socket.sendall", (self._oid, flags), payload, lambda: real.sendall(payload, flags)
        )

    def sendto(self, data: Any, *args: Any) -> int:
        payload, real = bytes(data), self._real
        return int(
            self._rt.output(
                "socket.sendto", (self._oid, *args), payload, lambda: real.sendto(payload, *args)
            )
        )

    def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> int:
        return int(_BaseSocket._sendfile_use_send(self, file, offset, count))  # type: ignore[attr-defined]

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data: bytes = self._rt.invoke(
            "socket.recv", (self._oid, bufsize, flags), self._real, "recv", bufsize, flags
        )
        return data

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer).cast("B")
        size = nbytes or len(view)
        data: bytes = self._rt.invoke(
            "socket.recv_into", (self._oid, size, flags), self._real, "recv", size, flags
        )
        n = len(data)
        view[:n] = data
        return n

    def recvfrom(self, bufsize: int, flags: int = 0) -> tuple[bytes, Any]:
        real = self._real
        data, address = self._call(
            "recvfrom", (bufsize, flags), lambda: real.recvfrom(bufsize, flags)
        )
        return bytes(data), address

    def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, Any]:
        view = memoryview(buffer).cast("B")
        size = nbytes or len(view)
        real = self._real
        data, address = self._call(
            "recvfrom_into", (size, flags), lambda: real.recvfrom(size, flags)
        )
        view[: len(data)] = data
        return len(data), address

    def shutdown(self, how: int) -> None:
        real = self._real
        self._call("shutdown", (how,), lambda: real.shutdown(how))

    def getpeername(self) -> Any:
        real = self._real
        return self._call("getpeername", (), lambda: real.getpeername())

    def getsockname(self) -> Any:
        real = self._real
        return self._call("getsockname", (), lambda: real.getsockname())

    def setsockopt(self, level: int, option: int, *value: Any) -> None:
        if self._fd < 0:
            raise OSError(9, "Bad file descriptor")
        self._rt.invoke(
            "socket.setsockopt",
            (self._oid, level, option, *value),
            self._real,
            "setsockopt",
            level,
            option,
            *value,
        )

    def getsockopt(self, level: int, option: int, *buflen: int) -> Any:
        real = self._real
        return self._call(
            "getsockopt", (level, option, *buflen), lambda: real.getsockopt(level, option, *buflen)
        )

    # socket.socket's own (Python) methods, on the descriptor: the real one is _socket's.
    def get_inheritable(self) -> bool:
        real = self._real
        return bool(self._call("get_inheritable", (), lambda: _get_inheritable(real.fileno())))

    def set_inheritable(self, inheritable: bool) -> None:
        real, flag = self._real, bool(inheritable)
        self._call("set_inheritable", (flag,), lambda: _set_inheritable(real.fileno(), flag))

    def recvmsg(self, bufsize: int, ancbufsize: int = 0, flags: int = 0) -> tuple[Any, ...]:
        real = self._real
        data, ancdata, msg_flags, address = self._call(
            "recvmsg",
            (bufsize, ancbufsize, flags),
            lambda: real.recvmsg(bufsize, ancbufsize, flags),
        )
        received = [tuple(item) for item in ancdata]
        # Descriptors another process sent (SCM_RIGHTS: multiprocessing's forkserver gets
        # its clients' pipes so) came from outside: tracked, so their calls are recorded and,
        # on replay, served where they do not exist.
        tracked_descriptors(self._rt).update(_passed_descriptors(received))
        return bytes(data), received, msg_flags, address

    def recvmsg_into(
        self, buffers: Iterable[Any], ancbufsize: int = 0, flags: int = 0
    ) -> tuple[Any, ...]:
        views = [memoryview(b).cast("B") for b in buffers]
        data, ancdata, msg_flags, address = self.recvmsg(sum(map(len, views)), ancbufsize, flags)
        at = 0
        for view in views:  # as the kernel scatters it: each buffer filled in turn
            part = data[at : at + len(view)]
            view[: len(part)] = part
            at += len(part)
        return len(data), ancdata, msg_flags, address

    def sendmsg(
        self, buffers: Iterable[Any], ancdata: Iterable[Any] = (), flags: int = 0,
        address: Any = None,
    ) -> int:  # fmt: skip
        parts = [bytes(b) for b in buffers]
        control = [tuple(item) for item in ancdata]
        payload, real = b"".join(parts), self._real
        args: tuple[Any, ...] = (parts, control, flags) + (() if address is None else (address,))
        key = (self._oid, control, flags, address)
        sent = self._rt.output("socket.sendmsg", key, payload, lambda: real.sendmsg(*args))
        return int(sent)

    def sendmsg_afalg(self, msg: Iterable[Any] = (), **options: Any) -> int:
        parts = [bytes(b) for b in msg]
        payload, real = b"".join(parts), self._real
        key = (self._oid, sorted(options.items()))
        sent = self._rt.output(
            "socket.sendmsg_afalg", key, payload, lambda: real.sendmsg_afalg(parts, **options)
        )
        return int(sent)

    def makefile(
        self,
        mode: str = "r",
        buffering: int | None = None,
        *,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
    ) -> Any:
        if not set(mode) <= {"r", "w", "b"}:
            raise ValueError(f"invalid mode {mode!r} (only r, w, b allowed)")
        # As socket.socket.makefile builds it.
        writing, reading = "w" in mode, "r" in mode or "w" not in mode
        binary = "b" in mode
        rawmode = ("r" if reading else "") + ("w" if writing else "")
        raw = socket_module.SocketIO(self, rawmode)  # type: ignore[arg-type]
        self._io_refs += 1
        if buffering is None:
            buffering = -1
        if buffering < 0:
            buffering = io.DEFAULT_BUFFER_SIZE
        if buffering == 0:
            if not binary:
                raise ValueError("unbuffered streams must be binary")
            return raw
        buffer: Any
        if reading and writing:
            buffer = io.BufferedRWPair(raw, raw, buffering)
        elif reading:
            buffer = io.BufferedReader(raw, buffering)
        else:
            buffer = io.BufferedWriter(raw, buffering)
        if binary:
            return buffer
        text = io.TextIOWrapper(buffer, encoding, errors, newline)
        text.mode = mode  # type: ignore[misc]
        return text

    def _decref_socketios(self) -> None:
        if self._io_refs > 0:
            self._io_refs -= 1
        if self._closed:
            self.close()

    def close(self) -> None:
        self._closed = True
        if self._io_refs <= 0 and self._fd >= 0:
            self._rt.invoke("socket.close", (self._oid,), self._real, "close")
            self._fd = -1

    def detach(self) -> int:
        real = self._real
        fd = int(self._call("detach", (), lambda: real.detach()))
        self._closed, self._fd = True, -1
        # The program holds the socket as a bare descriptor from here: its reads, writes
        # and close go through the boundary's os functions (multiprocessing's Connection).
        tracked_descriptors(self._rt).add(fd)
        return fd


class SSLSocket(Socket):
    """ssl.SSLSocket: the application's plaintext crosses the boundary, TLS records do not."""

    context: Any
    server_side: bool
    server_hostname: str | None

    def _op(self, op: str, key: tuple[Any, ...], fn: Any) -> Any:
        return self._rt.call(f"ssl.{op}", (self._oid, *key), fn)

    def read(self, len: int = 1024, buffer: Any = None) -> Any:
        real = self._real
        data = self._op("read", (len,), lambda: real.read(len))
        if buffer is None:
            return data
        memoryview(buffer).cast("B")[: data.__len__()] = data
        return data.__len__()

    def write(self, data: Any) -> int:
        payload, real = bytes(data), self._real
        return int(self._rt.output("ssl.write", (self._oid,), payload, lambda: real.write(payload)))

    def send(self, data: Any, flags: int = 0) -> int:
        payload, real = bytes(data), self._real
        return int(
            self._rt.output(
                "ssl.send", (self._oid, flags), payload, lambda: real.send(payload, flags)
            )
        )

    def sendall(self, data: Any, flags: int = 0) -> None:
        payload, real = bytes(data), self._real
        self._rt.output(
            "ssl.sendall", (self._oid, flags), payload, lambda: real.sendall(payload, flags)
        )

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        real = self._real
        return bytes(self._op("recv", (buflen, flags), lambda: real.recv(buflen, flags)))

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer).cast("B")
        size = nbytes or len(view)
        real = self._real
        data = self._op("recv_into", (size, flags), lambda: real.recv(size, flags))
        view[: len(data)] = data
        return len(data)

    def do_handshake(self) -> None:
        real = self._real
        self._op("do_handshake", (), lambda: real.do_handshake())

    def getpeercert(self, binary_form: bool = False) -> Any:
        real = self._real
        return self._op("getpeercert", (binary_form,), lambda: real.getpeercert(binary_form))

    def cipher(self) -> Any:
        real = self._real
        return self._op("cipher", (), lambda: real.cipher())

    def version(self) -> str | None:
        real = self._real
        return self._op("version", (), lambda: real.version())  # type: ignore[no-any-return]

    def selected_alpn_protocol(self) -> str | None:
        real = self._real
        return self._op("selected_alpn_protocol", (), lambda: real.selected_alpn_protocol())  # type: ignore[no-any-return]

    def pending(self) -> int:
        real = self._real
        return int(self._op("pending", (), lambda: real.pending()))

    def unwrap(self) -> Socket:
        real = self._real
        holder: list[Any] = []

        def unwrap() -> tuple[int, int, int, int]:
            plain = real.unwrap()
            holder.append(plain)
            return _info(plain)

        info = self._op("unwrap", (), unwrap)
        plain: Socket = self._plain._adopt(info, holder[0] if holder else None)
        return plain


# Socket's methods that the C per-call path records itself (see _runtime.native_methods).
_HOT = {
    "__init__": Hot("socket.socket", _RealSocket, "new", state=_DESCRIBE),
    "close": Hot("socket.close", "close", "close"),
    "settimeout": Hot("socket.settimeout", "settimeout", "timeout"),  # no event: local state
    "connect": Hot("socket.connect", "connect", guard=True),
    "setsockopt": Hot("socket.setsockopt", "setsockopt", guard=True),
    "recv": Hot("socket.recv", "recv"),
    "recv_into": Hot("socket.recv_into", "recv_into", "recv_into"),
    "send": Hot("socket.send", "send", "output"),
    "sendall": Hot("socket.sendall", "sendall", "output"),
}


def install_socket(rt: Runtime, patcher: Patcher) -> None:
    namespace = {"_rt": rt, "__module__": "socket", **native_methods(rt, Socket, _HOT)}
    proxy: Any = type("socket", proxy_bases(rt, Socket, "SocketState"), namespace)
    proxy._plain = proxy
    proxy._served = _served_class(rt, proxy)

    def socketpair(*args: Any) -> tuple[Socket, Socket]:
        holder: list[Any] = []

        def pair() -> list[tuple[int, int, int, int]]:
            socks = _socketpair(*args)
            holder.extend(socks)
            return [_info(s) for s in socks]

        infos = rt.call("socket.socketpair", args, pair)
        reals = holder or [None, None]
        return proxy._adopt(infos[0], reals[0]), proxy._adopt(infos[1], reals[1])

    patcher.replace(socket_module, "socket", proxy)
    patcher.replace(socket_module, "socketpair", socketpair)
    patcher.replace(
        socket_module,
        "setdefaulttimeout",
        _wrap(rt, "socket.setdefaulttimeout", socket_module.setdefaulttimeout),
    )


def _served_class(rt: Runtime, proxy: Any) -> Any:
    """The class of the sockets accept() returns: when the runtime keeps a request index (it
    records), a subclass of the socket proxy whose reads, sends and close also feed that
    connection's Exchange (_requests.py); the proxy itself otherwise (replay, where the index
    is read from the recording). Its methods call the proxy's own, so every event is recorded
    exactly as on any socket."""
    index = getattr(rt, "requests", None)
    if index is None:
        return proxy
    base_recv, base_recv_into, base_send, base_sendall = (
        proxy.recv,
        proxy.recv_into,
        proxy.send,
        proxy.sendall,
    )
    base_close, base_shutdown, base_detach = proxy.close, proxy.shutdown, proxy.detach

    def _adopt(cls: Any, info: tuple[int, int, int, int], real: Any) -> Any:
        sock = proxy._adopt.__func__(cls, info, real)
        sock._exchange = index.exchange()
        return sock

    def recv(self: Any, bufsize: int, flags: int = 0) -> bytes:
        first = index.events()
        data: bytes = base_recv(self, bufsize, flags)
        self._exchange.received(data, first)
        return data

    def recv_into(self: Any, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        first = index.events()
        n: int = base_recv_into(self, buffer, nbytes, flags)
        if n:
            self._exchange.received(memoryview(buffer).cast("B")[:n], first)
        return n

    def send(self: Any, data: Any, flags: int = 0) -> int:
        sent: int = base_send(self, data, flags)
        self._exchange.sent(data, index.events())
        return sent

    def sendall(self: Any, data: Any, flags: int = 0) -> None:
        base_sendall(self, data, flags)
        self._exchange.sent(data, index.events())

    def close(self: Any) -> None:
        base_close(self)
        if self._fd < 0:
            self._exchange.closed()

    def shutdown(self: Any, how: int) -> None:
        base_shutdown(self, how)
        if how != socket_module.SHUT_RD:
            self._exchange.closed()

    def detach(self: Any) -> int:
        fd: int = base_detach(self)
        self._exchange.closed()
        return fd

    methods = {
        "recv": recv,
        "recv_into": recv_into,
        "send": send,
        "sendall": sendall,
        "close": close,
        "shutdown": shutdown,
        "detach": detach,
    }
    for name, method in methods.items():
        method.__qualname__ = f"socket.{name}"
        method.__doc__ = getattr(_BaseSocket, name).__doc__
    served: Any = type(
        "socket", (proxy,), {"__module__": "socket", "_adopt": classmethod(_adopt), **methods}
    )
    served._served = served
    return served


def _wrap(rt: Runtime, name: str, fn: Any) -> Any:
    def wrapper(*args: Any) -> Any:
        return rt.call(name, args, lambda: fn(*args))

    return wrapper


def install_ssl(rt: Runtime, patcher: Patcher) -> None:
    plain = socket_module.socket if issubclass(socket_module.socket, Socket) else None
    proxy: Any = type(
        "SSLSocket",
        (SSLSocket,),
        {"_rt": rt, "_plain": plain, "_served": plain, "__module__": "ssl"},
    )
    base_wrap = ssl.SSLContext.wrap_socket

    def wrap_socket(
        self: ssl.SSLContext,
        sock: Any,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | None = None,
        session: Any = None,
    ) -> Any:
        if not isinstance(sock, Socket):
            return base_wrap(
                self,
                sock,
                server_side,
                do_handshake_on_connect,
                suppress_ragged_eofs,
                server_hostname,
                session,
            )
        holder: list[Any] = []
        real_plain = sock._real

        def wrap() -> tuple[int, int, int, int]:
            tls = base_wrap(
                self,
                real_plain,
                server_side,
                do_handshake_on_connect,
                suppress_ragged_eofs,
                server_hostname,
                session,
            )
            holder.append(tls)
            return _info(tls)

        key = (sock._oid, server_side, do_handshake_on_connect, server_hostname)
        info = rt.call("ssl.wrap_socket", key, wrap)
        sock._closed, sock._fd = True, -1  # the plain socket was detached into the TLS one
        wrapped = proxy._adopt(info, holder[0] if holder else None)
        wrapped._timeout = sock._timeout
        wrapped.context, wrapped.server_side = self, server_side
        wrapped.server_hostname = server_hostname
        return wrapped

    patcher.replace(ssl.SSLContext, "wrap_socket", wrap_socket)
    for name in ("load_verify_locations", "load_cert_chain", "load_dh_params"):
        base = getattr(ssl.SSLContext, name)
        patcher.replace(ssl.SSLContext, name, _context_call(rt, f"ssl.SSLContext.{name}", base))


def _context_call(rt: Runtime, name: str, base: Any) -> Any:
    # Loading certificates reads files from C; on replay the context is never used for TLS.
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return rt.call(name, (args, kwargs), lambda: base(self, *args, **kwargs))

    return method


class Poll:
    """select.poll(): registrations are local; each poll() is a boundary call."""

    _rt: Runtime
    _base: Any

    def __init__(self) -> None:
        holder: list[Any] = []
        base = type(self)._base

        def create() -> None:
            holder.append(base())

        self._rt.call("select.poll", (), create)
        self._real: Any = holder[0] if holder else None
        self._oid = self._rt.new_oid()

    def register(
        self, fd: Any, eventmask: int = select.POLLIN | select.POLLPRI | select.POLLOUT
    ) -> None:
        number = _fd_of(fd)
        if self._real is not None:
            self._real.register(number, eventmask)

    def modify(self, fd: Any, eventmask: int) -> None:
        number = _fd_of(fd)
        real = self._real
        self._rt.call(
            "select.poll.modify",
            (self._oid, number, eventmask),
            lambda: real.modify(number, eventmask),
        )

    def unregister(self, fd: Any) -> None:
        number = _fd_of(fd)
        real = self._real
        self._rt.call(
            "select.poll.unregister", (self._oid, number), lambda: real.unregister(number)
        )

    def poll(self, timeout: float | None = None) -> list[tuple[int, int]]:
        real = self._real
        return list(
            self._rt.call("select.poll.poll", (self._oid, timeout), lambda: real.poll(timeout))
        )


class Epoll:
    """select.epoll(), recorded like Poll; its own descriptor number is the recorded one."""

    _rt: Runtime
    _base: Any

    def __init__(self, sizehint: int = -1, flags: int = 0) -> None:
        holder: list[Any] = []
        base = type(self)._base

        def create() -> int:
            real = base(sizehint, flags)
            holder.append(real)
            return int(real.fileno())

        self._fd = self._rt.call("select.epoll", (sizehint, flags), create)
        self._real: Any = holder[0] if holder else None
        self._oid = self._rt.new_oid()
        self.closed = False

    def fileno(self) -> int:
        return int(self._fd)

    def _op(self, op: str, key: tuple[Any, ...], fn: Any) -> Any:
        if self.closed:
            raise ValueError("I/O operation on closed epoll object")
        return self._rt.call(f"select.epoll.{op}", (self._oid, *key), fn)

    def register(
        self, fd: Any, eventmask: int = select.EPOLLIN | select.EPOLLPRI | select.EPOLLOUT
    ) -> None:
        number, real = _fd_of(fd), self._real
        self._op("register", (number, eventmask), lambda: real.register(number, eventmask))

    def modify(self, fd: Any, eventmask: int) -> None:
        number, real = _fd_of(fd), self._real
        self._op("modify", (number, eventmask), lambda: real.modify(number, eventmask))

    def unregister(self, fd: Any) -> None:
        number, real = _fd_of(fd), self._real
        self._op("unregister", (number,), lambda: real.unregister(number))

    def poll(self, timeout: float | None = None, maxevents: int = -1) -> list[tuple[int, int]]:
        real = self._real
        return list(self._op("poll", (timeout, maxevents), lambda: real.poll(timeout, maxevents)))

    def close(self) -> None:
        if not self.closed:
            real = self._real
            self._rt.call("select.epoll.close", (self._oid,), lambda: real.close())
            self.closed = True

    def __enter__(self) -> Epoll:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()


def install_select(rt: Runtime, patcher: Patcher) -> None:
    base_select = select.select

    def select_(
        rlist: Iterable[Any],
        wlist: Iterable[Any],
        xlist: Iterable[Any],
        timeout: float | None = None,
    ) -> Any:
        lists = (list(rlist), list(wlist), list(xlist))
        fds = tuple([_fd_of(o) for o in group] for group in lists)

        def ready() -> tuple[list[int], ...]:
            result = base_select(fds[0], fds[1], fds[2], timeout)
            return tuple(
                [i for i, fd in enumerate(group) if fd in chosen]
                for group, chosen in zip(fds, result, strict=True)
            )

        picked = rt.call("select.select", (fds, timeout), ready)
        return tuple(
            [group[i] for i in indices] for group, indices in zip(lists, picked, strict=True)
        )

    patcher.replace(select, "select", select_)
    classes: dict[str, type] = {}
    for name, cls in (("poll", Poll), ("epoll", Epoll)):
        base = getattr(select, name, None)
        if base is not None:
            classes[name] = type(name, (cls,), {"_rt": rt, "_base": base, "__module__": "select"})
            patcher.replace(select, name, classes[name])
    for selector, name in (("PollSelector", "poll"), ("EpollSelector", "epoll")):
        owner = getattr(selectors, selector, None)
        if owner is not None and name in classes:
            patcher.replace(owner, "_selector_cls", classes[name])
