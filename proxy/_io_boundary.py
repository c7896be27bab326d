"""Adapters for files and the standard streams.

Files are intercepted at the raw layer: `open()` builds the real buffered and text layers of
the io module on top of a BoundaryRaw, so decoding, newlines, buffering and readline behave
exactly as in an unrecorded run, and only raw reads, writes and seeks cross the boundary.
Reads are recorded with their bytes; writes are outputs, passed through when recording and
compared byte for byte when replaying (replay never writes a file).

Files under the interpreter's own trees (the standard library and site-packages) are not
external: the replay image provides the same files, so they are opened directly.
"""

from __future__ import annotations

import builtins
import inspect
import io
import os
import sys
from collections.abc import Iterator
from typing import Any

from ._boundary import Patcher
from ._runtime import Runtime, paths_under

__all__ = ["BoundaryRaw", "DirEntry", "install_files", "install_stdio"]

_VALID_MODE = frozenset("axrwb+t")
_fstat = os.fstat  # the real one, as io.open asks it (inside the open call: never recorded)


_OPERATIONS = ("seekable", "read", "readall", "write", "seek", "tell", "truncate", "close")
_NAMES: dict[str, dict[str, str]] = {}  # a label's callee names, by operation


def _names(label: str) -> dict[str, str]:
    names = _NAMES.get(label)
    if names is None:
        names = _NAMES[label] = {op: f"{label}.{op}" for op in _OPERATIONS}
    return names


class BoundaryRaw(io.RawIOBase):
    """A raw file whose every operation is a boundary call."""

    def __init__(
        self,
        rt: Runtime,
        real: Any,
        *,
        oid: int,
        label: str,
        name: Any,
        mode: str,
        fd: int,
        isatty: bool,
        closefd: bool = True,
        on_close: Any = None,
    ) -> None:
        super().__init__()
        self._on_close = on_close
        self._rt = rt
        self._real: Any = real
        self._oid = oid
        self._names = _names(label)  # the callee names of its calls: "file.read" ...
        self.name = name
        self.mode = mode
        self._fd = fd
        self._isatty = isatty
        self.closefd = closefd

    def readable(self) -> bool:
        return "r" in self.mode or "+" in self.mode

    def writable(self) -> bool:
        return "r" not in self.mode or "+" in self.mode

    def seekable(self) -> bool:
        return bool(self._rt.invoke(self._names["seekable"], (self._oid,), self._real, "seekable"))

    def isatty(self) -> bool:
        return self._isatty

    def fileno(self) -> int:
        return self._fd

    def readinto(self, buffer: Any) -> int | None:
        size = len(memoryview(buffer))
        data = self._rt.invoke(self._names["read"], (self._oid, size), self._real, "read", size)
        if data is None:
            return None
        n = len(data)
        memoryview(buffer).cast("B")[:n] = data
        return n

    def readall(self) -> bytes:
        data: bytes = self._rt.invoke(self._names["readall"], (self._oid,), self._real, "readall")
        return data

    def write(self, data: Any) -> int | None:
        payload = bytes(data)
        real = self._real
        return self._rt.output(  # type: ignore[no-any-return]
            self._names["write"],
            (self._oid,),
            payload,
            lambda: real.write(payload),
        )

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._rt.invoke(  # type: ignore[no-any-return]
            self._names["seek"], (self._oid, offset, whence), self._real, "seek", offset, whence
        )

    def tell(self) -> int:
        position: int = self._rt.invoke(self._names["tell"], (self._oid,), self._real, "tell")
        return position

    def truncate(self, size: int | None = None) -> int:
        return self._rt.invoke(  # type: ignore[no-any-return]
            self._names["truncate"], (self._oid, size), self._real, "truncate", size
        )

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self.closefd:
                self._rt.invoke(self._names["close"], (self._oid,), self._real, "close")
                if self._on_close is not None:
                    self._on_close(self._fd)
        finally:
            super().close()

    def __repr__(self) -> str:
        return f"<_io.FileIO name={self.name!r} mode={self.mode!r} closefd={self.closefd!r}>"


_RAW_MODES: dict[str, tuple[str, str, bool]] = {}  # the valid modes met, each worked out once


def _raw_mode(mode: str) -> tuple[str, str, bool]:
    """(raw mode for FileIO, FileIO's own mode string, text?) with io.open's validation."""
    known = _RAW_MODES.get(mode) if type(mode) is str else None
    if known is None:
        known = _work_out_mode(mode)
        if type(mode) is str and len(_RAW_MODES) < 64:
            _RAW_MODES[mode] = known
    return known


def _work_out_mode(mode: str) -> tuple[str, str, bool]:
    if not isinstance(mode, str):
        raise TypeError(f"open() argument 'mode' must be str, not {type(mode).__name__}")
    modes = set(mode)
    if modes - _VALID_MODE or len(mode) != len(modes):
        raise ValueError(f"invalid mode: '{mode}'")
    creating, reading, writing, appending = "x" in modes, "r" in modes, "w" in modes, "a" in modes
    updating, text, binary = "+" in modes, "t" in modes, "b" in modes
    if text and binary:
        raise ValueError("can't have text and binary mode at once")
    if creating + reading + writing + appending != 1:
        raise ValueError("must have exactly one of create/read/write/append mode")
    base = "x" if creating else "r" if reading else "w" if writing else "a"
    raw = base + ("+" if updating else "")
    readable = reading or updating
    if creating:
        shown = "xb+" if readable else "xb"
    elif appending:
        shown = "ab+" if readable else "ab"
    elif reading or updating:
        shown = "rb+" if (writing or updating) else "rb"
    else:
        shown = "wb"
    return raw, shown, not binary


def _open_flags(raw_mode: str) -> int:
    """The flags io.FileIO passes to an opener for this mode."""
    if "+" in raw_mode:
        flags = os.O_RDWR
    elif raw_mode[0] == "r":
        flags = os.O_RDONLY
    else:
        flags = os.O_WRONLY
    creation = {"r": 0, "w": os.O_CREAT | os.O_TRUNC, "a": os.O_CREAT | os.O_APPEND}
    flags |= creation.get(raw_mode[0], os.O_CREAT | os.O_EXCL)
    return flags | os.O_CLOEXEC


def _layers(
    raw: io.RawIOBase,
    *,
    mode: str,
    text: bool,
    buffering: int,
    blksize: int,
    isatty: bool,
    encoding: str | None,
    errors: str | None,
    newline: str | None,
    write_through: bool = False,
) -> Any:
    """Stack buffered and text layers exactly as io.open() would."""
    line_buffering = buffering == 1 or (buffering < 0 and isatty)
    if buffering == 1 or buffering < 0:
        buffering = blksize if blksize > 1 else io.DEFAULT_BUFFER_SIZE
    if buffering == 0:
        if text:
            raise ValueError("can't have unbuffered text I/O")
        return raw
    buffer: Any
    if "+" in mode:
        buffer = io.BufferedRandom(raw, buffering)
    elif "w" in mode or "a" in mode or "x" in mode:
        buffer = io.BufferedWriter(raw, buffering)
    else:
        buffer = io.BufferedReader(raw, buffering)
    if not text:
        return buffer
    wrapper = io.TextIOWrapper(
        buffer, encoding, errors, newline, line_buffering, write_through=write_through
    )
    wrapper.mode = mode  # type: ignore[misc]
    return wrapper


def install_files(rt: Runtime, patcher: Patcher) -> None:
    base_open = io.open
    base_scandir = os.scandir
    prefixes: tuple[str, ...] = tuple(getattr(rt, "passthrough_prefixes", ()))
    passed_through = paths_under(prefixes)
    intercepting = rt.intercepting

    tracked = tracked_descriptors(rt)

    def boundary_open(
        file: Any,
        mode: str = "r",
        buffering: int = -1,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
        closefd: bool = True,
        opener: Any = None,
    ) -> Any:
        layers = (mode, buffering, encoding, errors, newline)
        if isinstance(file, int) and file in tracked and opener is None:
            return open_file("open.fd", file, file, closefd, *layers)
        if opener is not None and not isinstance(file, int) and intercepting():
            # tempfile and friends open through os.open in an opener: what it returns is
            # a tracked descriptor, and the file object must be built on the boundary too.
            fd = opener(file, _open_flags(_raw_mode(mode)[0]))
            if fd in tracked:
                return open_file("open.fd", fd, file, True, *layers)
            return base_open(fd, mode, buffering, encoding, errors, newline, True)
        if isinstance(file, int) or opener is not None or not intercepting():
            return base_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        if passed_through(os.path.abspath(os.fsdecode(os.fspath(file)))):
            return base_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        return open_file("open", os.fspath(file), file, closefd, *layers)

    boundary_open.__name__ = "open"
    boundary_open.__doc__ = base_open.__doc__

    def open_file(
        callee: str,
        target: Any,
        name: Any,
        closefd: bool,
        mode: str,
        buffering: int,
        encoding: str | None,
        errors: str | None,
        newline: str | None,
    ) -> Any:
        """A file object like io.open() builds, over a BoundaryRaw on `target` (a path or
        a tracked descriptor)."""
        raw_mode, shown, text = _raw_mode(mode)
        if not text and (encoding is not None or errors is not None or newline is not None):
            what = "an encoding" if encoding is not None else "errors" if errors else "a newline"
            raise ValueError(f"binary mode doesn't take {what} argument")
        holder: list[io.FileIO] = []

        def really_open() -> tuple[int, bool, int]:
            real = io.FileIO(target, raw_mode, closefd)
            holder.append(real)
            try:
                blksize = _fstat(real.fileno()).st_blksize
            except OSError:
                blksize = io.DEFAULT_BUFFER_SIZE
            return real.fileno(), real.isatty(), blksize

        oid = rt.new_oid()
        key = (os.fsdecode(target) if not isinstance(target, int) else target, raw_mode, closefd)
        fd, isatty, blksize = rt.call(callee, key, really_open)
        raw = BoundaryRaw(
            rt, holder[0] if holder else None, oid=oid, label="file", name=name, mode=shown,
            fd=fd, isatty=isatty, closefd=closefd, on_close=tracked.discard,
        )  # fmt: skip
        try:
            return _layers(
                raw, mode=mode, text=text, buffering=buffering, blksize=blksize,
                isatty=isatty, encoding=encoding, errors=errors, newline=newline,
            )  # fmt: skip
        except BaseException:
            raw.close()
            raise

    _install_descriptors(rt, patcher, tracked, prefixes)

    def scandir(path: Any = ".") -> Any:
        if isinstance(path, int):
            rt.unsupported("os.scandir() on a file descriptor is not recorded in v1")
            return base_scandir(path)
        key = os.fspath(path)

        def listing() -> list[tuple[Any, ...]]:
            with base_scandir(key) as it:
                return [_entry_fields(e) for e in it]

        entries = rt.call("os.scandir", (key,), listing)
        return ScandirIterator([DirEntry(rt, *fields) for fields in entries])

    patcher.replace(builtins, "open", boundary_open)
    patcher.replace(io, "open", boundary_open)
    patcher.replace(os, "scandir", scandir)
    # shutil.rmtree walks by descriptor (os.open, scandir(fd), unlink(dir_fd=)); its
    # path-based walk goes through the boundary instead.
    import shutil

    patcher.replace(shutil, "_use_fd_functions", False)


def tracked_descriptors(rt: Runtime) -> set[int]:
    """The descriptors that came through the boundary (os.open, os.pipe, a socket's
    detach()): every os.read, os.write, os.close ... on one of them is a boundary call, so a
    descriptor the program holds as a bare int (multiprocessing's connections) is recorded
    and, on replay, served; it may not exist there. One set per runtime."""
    found: set[int] | None = getattr(rt, "_tracked_descriptors", None)
    if found is None:
        found = set()
        rt._tracked_descriptors = found  # type: ignore[attr-defined]
    return found


def _install_descriptors(
    rt: Runtime, patcher: Patcher, tracked: set[int], prefixes: tuple[str, ...]
) -> None:
    """os.open and friends: descriptors opened through the boundary are tracked, and every
    operation on a tracked descriptor is a boundary call; any other descriptor (the standard
    streams, the interpreter's own files) is left alone."""
    base_open, base_pipe = os.open, os.pipe
    base_read, base_write, base_close = os.read, os.write, os.close
    base_lseek, base_fsync, base_ftruncate = os.lseek, os.fsync, os.ftruncate
    passed_through = paths_under(prefixes)

    def os_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if dir_fd is not None or not rt.intercepting():
            return base_open(path, flags, mode, dir_fd=dir_fd)
        text_path = os.fsdecode(os.fspath(path))
        if passed_through(os.path.abspath(text_path)):
            return base_open(path, flags, mode)
        fd: int = rt.call("os.open", (text_path, flags, mode), lambda: base_open(path, flags, mode))
        tracked.add(fd)
        return fd

    def os_pipe() -> tuple[int, int]:
        if not rt.intercepting():
            return base_pipe()
        read_end, write_end = rt.call("os.pipe", None, base_pipe)
        tracked.update((read_end, write_end))
        return read_end, write_end

    def os_read(fd: int, n: int) -> bytes:
        if fd not in tracked:
            return base_read(fd, n)
        data: bytes = rt.call("os.read", (fd, n), lambda: base_read(fd, n))
        return data

    def os_write(fd: int, data: Any) -> int:
        if fd not in tracked:
            return base_write(fd, data)
        payload = bytes(data)
        written: int = rt.output("os.write", (fd,), payload, lambda: base_write(fd, payload))
        return written

    def os_close(fd: int) -> None:
        if fd not in tracked:
            return base_close(fd)
        tracked.discard(fd)
        rt.call("os.close", (fd,), lambda: base_close(fd))
        return None

    def on_tracked(name: str, base: Any) -> Any:
        def operation(fd: int, *args: Any) -> Any:
            if fd not in tracked:
                return base(fd, *args)
            return rt.call(f"os.{name}", (fd, *args), lambda: base(fd, *args))

        return operation

    patcher.replace(os, "open", os_open)
    patcher.replace(os, "pipe", os_pipe)
    patcher.replace(os, "read", os_read)
    patcher.replace(os, "write", os_write)
    patcher.replace(os, "close", os_close)
    patcher.replace(os, "lseek", on_tracked("lseek", base_lseek))
    patcher.replace(os, "fsync", on_tracked("fsync", base_fsync))
    patcher.replace(os, "ftruncate", on_tracked("ftruncate", base_ftruncate))
    # What a server does to its descriptors (gunicorn: non-blocking pipes, close-on-exec,
    # its worker's heartbeat by fchmod): on a tracked descriptor a call, made when recording
    # and served on replay, where the descriptor may not exist or be another one.
    for name in _TRACKED_OS:
        base = getattr(os, name, None)
        if base is not None:
            patcher.replace(os, name, on_tracked(name, base))
    base_dup = os.dup

    def os_dup(fd: int) -> int:
        if fd not in tracked:
            return base_dup(fd)
        copy: int = rt.call("os.dup", (fd,), lambda: base_dup(fd))
        tracked.add(copy)
        return copy

    patcher.replace(os, "dup", os_dup)
    _install_fd_functions(rt, patcher, tracked)


# os functions whose first argument is a descriptor (beyond read, write, close, lseek, fsync,
# ftruncate and dup): calls when it is a tracked one.
_TRACKED_OS = (
    "fchmod",
    "fchown",
    "fdatasync",
    "set_blocking",
    "get_blocking",
    "set_inheritable",
    "get_inheritable",
)


def _install_fd_functions(rt: Runtime, patcher: Patcher, tracked: set[int]) -> None:
    """fcntl's functions and signal.set_wakeup_fd take a descriptor (or, fcntl's, an object
    with fileno()): on a tracked one they are calls."""
    import fcntl
    import signal

    def fd_of(target: Any) -> int | None:
        if isinstance(target, int):
            return target
        fileno = getattr(target, "fileno", None)
        try:
            return int(fileno()) if fileno is not None else None
        except (OSError, ValueError, TypeError):
            return None

    def on_fd(module: Any, name: str) -> None:
        base = getattr(module, name)
        where = f"{module.__name__}.{name}"

        def operation(target: Any, *args: Any, **kwargs: Any) -> Any:
            fd = fd_of(target)
            if fd is None or fd not in tracked or kwargs:
                return base(target, *args, **kwargs)
            return rt.call(where, (fd, *args), lambda: base(fd, *args))

        patcher.replace(module, name, operation)

    for name in ("fcntl", "flock", "lockf", "ioctl"):
        on_fd(fcntl, name)
    base_wakeup = signal.set_wakeup_fd

    def set_wakeup_fd(fd: int, /, **kwargs: Any) -> int:
        if fd not in tracked:
            return base_wakeup(fd, **kwargs)
        old: int = rt.call(
            "signal.set_wakeup_fd", (fd, *kwargs.items()), lambda: base_wakeup(fd, **kwargs)
        )
        return old

    patcher.replace(signal, "set_wakeup_fd", set_wakeup_fd)


def _entry_fields(entry: os.DirEntry[Any]) -> tuple[Any, ...]:
    def probe(fn: Any) -> Any:
        try:
            return fn()
        except OSError as exc:
            return exc

    return (
        entry.name,
        entry.path,
        entry.inode(),
        entry.is_symlink(),
        probe(lambda: entry.is_dir()),
        probe(lambda: entry.is_dir(follow_symlinks=False)),
        probe(lambda: entry.is_file()),
        probe(lambda: entry.is_file(follow_symlinks=False)),
    )


class DirEntry:
    """os.DirEntry as it was when the directory was listed."""

    def __init__(
        self,
        rt: Runtime,
        name: Any,
        path: Any,
        inode: int,
        symlink: bool,
        is_dir: Any,
        is_dir_nofollow: Any,
        is_file: Any,
        is_file_nofollow: Any,
    ) -> None:
        self._rt = rt
        self.name, self.path = name, path
        self._inode, self._symlink = inode, symlink
        self._dir = (is_dir, is_dir_nofollow)
        self._file = (is_file, is_file_nofollow)

    def inode(self) -> int:
        return self._inode

    def is_symlink(self) -> bool:
        return self._symlink

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return _answer(self._dir[0 if follow_symlinks else 1])

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return _answer(self._file[0 if follow_symlinks else 1])

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        path = self.path
        base = inspect.unwrap(os.stat)  # the real one, under the boundary's wrapper
        result: os.stat_result = self._rt.call(
            "os.DirEntry.stat",
            (path, follow_symlinks),
            lambda: base(path, follow_symlinks=follow_symlinks),
        )
        return result

    def __fspath__(self) -> Any:
        return self.path

    def __repr__(self) -> str:
        return f"<DirEntry {self.name!r}>"


def _answer(value: Any) -> bool:
    if isinstance(value, OSError):
        raise value
    return bool(value)


class ScandirIterator:
    def __init__(self, entries: list[DirEntry]) -> None:
        self._it: Iterator[DirEntry] = iter(entries)

    def __iter__(self) -> ScandirIterator:
        return self

    def __next__(self) -> DirEntry:
        return next(self._it)

    def close(self) -> None:
        self._it = iter(())

    def __enter__(self) -> ScandirIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


STDIO = (("stdin", 0, "rb"), ("stdout", 1, "wb"), ("stderr", 2, "wb"))


def describe_stdio() -> dict[str, Any]:
    """How the interpreter set up its standard streams (recorded, then rebuilt on replay)."""
    config: dict[str, Any] = {}
    for name, fd, _ in STDIO:
        stream = getattr(sys, name, None)
        if not isinstance(stream, io.TextIOWrapper):
            continue
        try:
            if stream.fileno() != fd:
                continue
            blksize = os.fstat(fd).st_blksize
            isatty = os.isatty(fd)
        except (OSError, ValueError):
            continue
        config[name] = {
            "encoding": stream.encoding,
            "errors": stream.errors,
            "line_buffering": stream.line_buffering,
            "write_through": stream.write_through,
            "buffered": not isinstance(stream.buffer, io.RawIOBase),
            "blksize": blksize,
            "isatty": isatty,
        }
    return config


def install_stdio(rt: Runtime, patcher: Patcher) -> None:
    # Rebuilt the way the interpreter builds them (Python/pylifecycle.c create_stdio).
    config: dict[str, Any] = getattr(rt, "stdio", {})
    for name, fd, mode in STDIO:
        cfg = config.get(name)
        if cfg is None:
            continue
        current = getattr(sys, name)
        if current is not None and not rt.replaying:
            current.flush()
        real = io.FileIO(fd, mode, closefd=False) if not rt.replaying else None
        raw = BoundaryRaw(
            rt,
            real,
            oid=rt.new_oid(),
            label=name,
            name=f"<{name}>",
            mode=mode,
            fd=fd,
            isatty=cfg["isatty"],
            closefd=False,
        )
        buffer: Any = raw
        if cfg["buffered"]:
            size = cfg["blksize"] if cfg["blksize"] > 1 else io.DEFAULT_BUFFER_SIZE
            buffer = (io.BufferedReader if name == "stdin" else io.BufferedWriter)(raw, size)
        stream = io.TextIOWrapper(
            buffer,
            cfg["encoding"],
            cfg["errors"],
            "\n",
            cfg["line_buffering"],
            write_through=cfg["write_through"],
        )
        stream.mode = mode[0]  # type: ignore[misc]
        patcher.replace(sys, name, stream)
        patcher.replace(sys, f"__{name}__", stream)
