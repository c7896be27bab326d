"""The boundary table: which calls are external, and how each one is recorded and replayed.

The table is data. Each `Library` groups `Entry` rows; an entry names the callee (the name
events carry), the attribute it replaces (`module:attr.path`), and its kind:

    call      a function whose result (or exception) is recorded and, on replay, served
              without calling it (time.time, os.urandom, socket.getaddrinfo, time.sleep ...)
    adapter   a function `install(runtime, patcher)` that installs something richer: proxy
              classes for external objects (sockets, files, connections, processes)

A library outside sealtrace adds its own rows with `register(Library(...))`, or by exposing a
`Library` under the `sealtrace.boundary` entry-point group. The names of the libraries in use
are stored in the recording, and replay refuses a recording whose libraries it cannot load.

Patches are applied to already-imported modules, and stale references to a replaced function
(`from time import time` done before the recorder was installed, `random._urandom`) are
rebound by scanning loaded modules, except sealtrace's own and the recorder's dependencies.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from ._errors import UsageError
from ._runtime import Runtime, native_function

__all__ = ["BUILTIN_LIBRARIES", "Entry", "Library", "Patcher", "install", "libraries", "register"]

# The recorder's own modules and its store's client keep the real functions.
_PRIVATE_PREFIXES = ("sealtrace", "boto3", "botocore", "s3transfer")
_IMPORT_SYSTEM = ("importlib._bootstrap", "_frozen_importlib")


@dataclass(frozen=True)
class Entry:
    name: str
    target: str
    kind: str = "call"  # "call" | "adapter"
    install: str | None = None  # adapter: "module:function"

    def __post_init__(self) -> None:
        if self.kind not in ("call", "adapter"):
            raise ValueError(f"unknown boundary kind {self.kind!r}")
        if self.kind == "adapter" and not self.install:
            raise ValueError(f"adapter entry {self.name} needs an install function")


@dataclass(frozen=True)
class Library:
    name: str
    entries: tuple[Entry, ...] = field(default_factory=tuple)


def _calls(*pairs: str) -> tuple[Entry, ...]:
    return tuple(Entry(name=p.replace(":", "."), target=p) for p in pairs)


def _adapter(name: str, install: str) -> Entry:
    return Entry(name=name, target=name, kind="adapter", install=install)


BUILTIN_LIBRARIES: tuple[Library, ...] = (
    Library(
        "time",
        _calls(
            "time:time",
            "time:time_ns",
            "time:monotonic",
            "time:monotonic_ns",
            "time:perf_counter",
            "time:perf_counter_ns",
            "time:process_time",
            "time:process_time_ns",
            "time:thread_time",
            "time:thread_time_ns",
            "time:clock_gettime",
            "time:clock_gettime_ns",
            "time:sleep",
            "time:localtime",
            "time:gmtime",
            "time:ctime",
            "time:asctime",
            "time:strftime",
        ),
    ),
    Library("datetime", (_adapter("datetime", "sealtrace.proxy._core_boundary:install_datetime"),)),
    Library(
        "random",
        (
            *_calls("os:urandom", "os:getrandom"),
            _adapter("random", "sealtrace.proxy._core_boundary:install_random"),
        ),
    ),
    Library("uuid", _calls("uuid:uuid1", "uuid:getnode")),
    Library(
        "process",
        (
            *_calls(
                "os:getpid",
                "os:getppid",
                "os:getuid",
                "os:geteuid",
                "os:getgid",
                "os:getegid",
                "os:getlogin",
                "os:cpu_count",
                "os:times",
                "os:uname",
                "os:get_terminal_size",
                "os:getloadavg",
                "os:system",
                # Other processes: their pids, their ends and signals to them (a forked child
                # is waited for and signalled through these; replay serves what they returned).
                "os:waitpid",
                "os:wait",
                "os:waitid",
                "os:kill",
                "os:killpg",
                "os:getpgrp",
                "os:getpgid",
                "os:getsid",
                "os:setsid",
                "os:setpgid",
            ),
            _adapter("children", "sealtrace.proxy._proc_boundary:install_children"),
        ),
    ),
    Library("environ", (_adapter("environ", "sealtrace.proxy._core_boundary:install_environ"),)),
    Library("signals", (_adapter("signals", "sealtrace.proxy._core_boundary:install_signals"),)),
    Library(
        "multiprocessing",
        (
            _adapter("semaphores", "sealtrace.proxy._proc_boundary:install_semaphores"),
            # A named semaphore's removal (a SemLock's finalizer): replay has none to remove.
            *_calls("_multiprocessing:sem_unlink"),
        ),
    ),
    Library(
        "concurrency",
        (
            _adapter("threads", "sealtrace.proxy._thread_boundary:install_threads"),
            _adapter("guard", "sealtrace.proxy._core_boundary:install_process_guard"),
        ),
    ),
    Library(
        "files",
        (
            *_calls(
                "os:stat",
                "os:lstat",
                "os:fstat",
                "os:isatty",
                "os:listdir",
                "os:access",
                "os:readlink",
                "os:getcwd",
                "os:getcwdb",
                # The working directory the program moves to (gunicorn's --chdir): the
                # recorded one may not exist where it replays, and is never needed there.
                "os:chdir",
                "os.path:realpath",
                # Directories made or removed by the program: on replay they are served,
                # never made (makedirs and Path.mkdir come through os.mkdir).
                "os:mkdir",
                "os:rmdir",
                # Other changes to the file system: made when recording, served on replay.
                "os:remove",
                "os:unlink",
                "os:rename",
                "os:replace",
                "os:chmod",
                "os:utime",
                "os:symlink",
                "os:link",
                "os:truncate",
            ),
            _adapter("files", "sealtrace.proxy._io_boundary:install_files"),
        ),
    ),
    Library("stdio", (_adapter("stdio", "sealtrace.proxy._io_boundary:install_stdio"),)),
    Library(
        "socket",
        (
            *_calls(
                "_socket:getaddrinfo",
                "_socket:gethostname",
                "_socket:gethostbyname",
                "_socket:gethostbyname_ex",
                "_socket:gethostbyaddr",
                "_socket:getnameinfo",
                "_socket:getservbyname",
                "_socket:getservbyport",
            ),
            _adapter("socket", "sealtrace.proxy._net_boundary:install_socket"),
        ),
    ),
    Library("select", (_adapter("select", "sealtrace.proxy._net_boundary:install_select"),)),
    Library("ssl", (_adapter("ssl", "sealtrace.proxy._net_boundary:install_ssl"),)),
    Library(
        "subprocess", (_adapter("subprocess", "sealtrace.proxy._proc_boundary:install_subprocess"),)
    ),
    Library("sqlite3", (_adapter("sqlite3", "sealtrace.proxy._sqlite_boundary:install_sqlite3"),)),
)

_REGISTERED: dict[str, Library] = {}


def register(library: Library) -> None:
    """Add a library's boundary entries (call before the recorder or replayer installs)."""
    if any(library.name == b.name for b in BUILTIN_LIBRARIES):
        raise ValueError(f"{library.name!r} is a built-in boundary library")
    _REGISTERED[library.name] = library


def libraries(names: Iterable[str] | None = None) -> list[Library]:
    """The libraries in use: built-ins, registered ones and entry points; or exactly `names`."""
    found: dict[str, Library] = {lib.name: lib for lib in BUILTIN_LIBRARIES}
    found.update(_REGISTERED)
    if names is not None and all(n in found for n in names):
        # Replay names the recording's libraries: scanning every distribution's entry
        # points would list sys.path's directories, whose order and contents differ
        # between file systems (a container's), before the program runs.
        return [found[n] for n in names]
    for ep in entry_points(group="sealtrace.boundary"):
        try:
            lib = ep.load()
        except Exception:  # noqa: S112 - a broken plugin must not break the application
            continue
        if isinstance(lib, Library):
            found.setdefault(lib.name, lib)
    found.update(_REGISTERED)
    if names is None:
        return list(found.values())
    wanted = list(names)
    missing = [n for n in wanted if n not in found]
    if missing:
        raise UsageError(
            f"the recording uses boundary libraries this process cannot load: {', '.join(missing)}"
        )
    return [found[n] for n in wanted]


def _resolve(target: str) -> tuple[Any, str]:
    module_name, _, path = target.partition(":")
    owner: Any = importlib.import_module(module_name)
    *parents, attr = path.split(".")
    for part in parents:
        owner = getattr(owner, part)
    return owner, attr


class Patcher:
    """Replaces attributes, remembers originals, and can put everything back."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any, bool]] = []
        self.replaced: dict[int, Any] = {}  # id(original) -> replacement, for alias rebinding
        self._originals: list[Any] = []  # keep originals alive so ids stay unique

    def replace(self, owner: Any, attr: str, new: Any) -> Any:
        original = getattr(owner, attr)
        if isinstance(owner, type) and not _is_heap_type(owner):
            _set_static_type_attr(owner, attr, new)
            self._undo.append((owner, attr, owner.__dict__.get(attr, original), True))
        else:
            setattr(owner, attr, new)
            self._undo.append((owner, attr, original, False))
        # Only functions are rebound where else they are bound: a replaced flag (True) or
        # class must not turn every other True or class reference into the replacement.
        if not isinstance(owner, type) and (_is_function(original) or original is os.environ):
            self.replaced[id(original)] = new
            self._originals.append(original)
        return original

    def rebind_aliases(self) -> None:
        """Point module-level names bound to a replaced function at its replacement."""
        if not self.replaced:
            return
        for name, module in list(sys.modules.items()):
            if module is None or name.startswith(_PRIVATE_PREFIXES):
                continue
            # Only Python modules: C modules (posix, _io, _socket) hold the originals the
            # import system and the replacements themselves rely on.
            origin = getattr(module, "__file__", None)
            if not origin or not origin.endswith(".py") or name.startswith(_IMPORT_SYSTEM):
                continue
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for attr, value in list(namespace.items()):
                new = self.replaced.get(id(value))
                if new is not None and new is not value:
                    namespace[attr] = new
                    self._undo.append((module, attr, value, False))

    def restore(self) -> None:
        for owner, attr, original, static in reversed(self._undo):
            if static:
                _set_static_type_attr(owner, attr, original)
            else:
                setattr(owner, attr, original)
        self._undo.clear()
        self.replaced.clear()


def _is_function(value: Any) -> bool:
    return isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType))


def _is_heap_type(cls: type) -> bool:
    return bool(cls.__flags__ & (1 << 9))  # Py_TPFLAGS_HEAPTYPE


def _set_static_type_attr(cls: type, attr: str, value: Any) -> None:
    # Built-in types (datetime.datetime) refuse setattr. Their dict is reachable through
    # the mappingproxy's referent; after writing it, the type's method cache must be told.
    import ctypes

    namespace = gc.get_referents(cls.__dict__)[0]
    namespace[attr] = value
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))


def install(
    runtime: Runtime, libs: Iterable[Library], entry_filter: Callable[[Entry], bool] | None = None
) -> Patcher:
    """Install every entry of `libs` against `runtime`; returns the Patcher to undo it."""
    patcher = Patcher()
    for lib in libs:
        for entry in lib.entries:
            if entry_filter is not None and not entry_filter(entry):
                continue
            if entry.kind == "call":
                try:
                    owner, attr = _resolve(entry.target)
                    original = getattr(owner, attr)
                except (ImportError, AttributeError):
                    continue  # not on this platform (os.getloadavg, ...): nothing to record
                patcher.replace(owner, attr, call_wrapper(runtime, entry.name, original))
            else:
                assert entry.install is not None
                module_name, _, func = entry.install.partition(":")
                getattr(importlib.import_module(module_name), func)(runtime, patcher)
    patcher.rebind_aliases()
    return patcher


def call_wrapper(runtime: Runtime, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    call = runtime.call

    def boundary(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            return call(name, (args, kwargs), lambda: original(*args, **kwargs))
        if args:
            return call(name, args, lambda: original(*args))
        return call(name, None, original)

    boundary.__name__ = getattr(original, "__name__", name)
    boundary.__qualname__ = getattr(original, "__qualname__", name)
    boundary.__doc__ = getattr(original, "__doc__", None)
    boundary.__wrapped__ = original  # type: ignore[attr-defined]
    twin = native_function(runtime, name, original, boundary)
    if twin is not None:
        found: Callable[..., Any] = twin  # (it binds as `original` does: a BoundaryFunction never)
        return found
    # Kept as a class attribute (logging.Formatter.converter = time.localtime), a builtin
    # is called without the instance: so is its wrapper, which would otherwise bind.
    # (inspect.unwrap() reaches `original` through either.)
    return boundary if isinstance(original, types.FunctionType) else staticmethod(boundary)
