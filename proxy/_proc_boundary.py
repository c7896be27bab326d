"""Adapter for subprocess: a child process is external, its results are recorded.

`subprocess.Popen` becomes a proxy. When recording, the real child runs with unbuffered binary
pipes underneath; the proxy builds the application-visible pipe objects itself (buffered, text
when asked) over boundary raw files, so what the application reads from the child and writes
to it crosses the boundary exactly once. communicate(), wait(), poll() and signals are boundary
calls. Replay never starts a process.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import types
from typing import Any

from ._boundary import Patcher
from ._io_boundary import BoundaryRaw, _layers
from ._runtime import Runtime, args_digest

__all__ = [
    "Popen",
    "SemLockProxy",
    "install_children",
    "install_semaphores",
    "install_subprocess",
]

_BasePopen = subprocess.Popen


def _translate(data: bytes | None, encoding: str | None, errors: str | None) -> Any:
    if data is None:
        return None
    return (
        data.decode(encoding or "utf-8", errors or "strict")
        .replace("\r\n", "\n")
        .replace("\r", "\n")
    )


class Popen:
    _rt: Runtime
    __class_getitem__: Any = classmethod(types.GenericAlias)  # subprocess.Popen[bytes]

    @property
    def universal_newlines(self) -> bool:
        return self.text_mode

    @universal_newlines.setter
    def universal_newlines(self, value: bool) -> None:
        self.text_mode = bool(value)

    def __init__(
        self,
        args: Any,
        bufsize: int = -1,
        executable: Any = None,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        *,
        text: bool | None = None,
        encoding: str | None = None,
        errors: str | None = None,
        universal_newlines: bool | None = None,
        **kwargs: Any,
    ) -> None:
        self.args = args
        self.text_mode = bool(encoding or errors or text or universal_newlines)
        if self.text_mode and encoding is None:
            import locale

            encoding = locale.getencoding()
        self.encoding, self.errors = encoding, errors
        self.returncode: int | None = None
        self.stdin: Any = None
        self.stdout: Any = None
        self.stderr: Any = None
        holder: list[Any] = []

        def start() -> tuple[int, list[int | None]]:
            real = _BasePopen(args, 0, executable, stdin, stdout, stderr, text=False, **kwargs)
            holder.append(real)
            pipes = [
                p.fileno() if p is not None else None
                for p in (real.stdin, real.stdout, real.stderr)
            ]
            return real.pid, pipes

        env = kwargs.get("env")
        key = (
            args,
            executable,
            kwargs.get("cwd"),
            None if env is None else args_digest(sorted(env.items())),
        )
        self.pid, fds = self._rt.call("subprocess.Popen", key, start)
        self._real: Any = holder[0] if holder else None
        self._oid = self._rt.new_oid()
        for index, (name, mode) in enumerate((("stdin", "wb"), ("stdout", "rb"), ("stderr", "rb"))):
            fd = fds[index]
            if fd is None:
                continue
            real_pipe = getattr(self._real, name) if self._real is not None else None
            raw = BoundaryRaw(
                self._rt,
                real_pipe,
                oid=self._rt.new_oid(),
                label=f"subprocess.{name}",
                name=fd,
                mode=mode,
                fd=fd,
                isatty=False,
            )
            stream = _layers(
                raw,
                mode=mode,
                text=self.text_mode,
                buffering=bufsize,
                blksize=io.DEFAULT_BUFFER_SIZE,
                isatty=False,
                encoding=encoding,
                errors=errors,
                newline=None,
                write_through=name == "stdin",
            )
            setattr(self, name, stream)

    def _call(self, op: str, key: tuple[Any, ...], fn: Any) -> Any:
        return self._rt.call(f"subprocess.Popen.{op}", (self._oid, *key), fn)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        if input is not None and self.text_mode:
            input = input.encode(self.encoding, self.errors or "strict")
        real = self._real
        for stream in (self.stdin,):
            if stream is not None and not stream.closed:
                with contextlib.suppress(BrokenPipeError):
                    stream.flush()

        def communicate() -> tuple[bytes | None, bytes | None, int | None]:
            out, err = real.communicate(input, timeout)
            return out, err, real.returncode

        payload = bytes(input) if input is not None else b""
        out, err, code = self._rt.output(
            "subprocess.Popen.communicate", (self._oid, timeout), payload, communicate
        )
        self.returncode = code
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None and not stream.closed:
                _quiet_close(stream)
        if self.text_mode:
            out = _translate(out, self.encoding, self.errors)
            err = _translate(err, self.encoding, self.errors)
        return out, err

    def wait(self, timeout: float | None = None) -> int:
        real = self._real
        self.returncode = self._call("wait", (timeout,), lambda: real.wait(timeout))
        return self.returncode

    def poll(self) -> int | None:
        real = self._real
        self.returncode = self._call("poll", (), lambda: real.poll())
        return self.returncode

    def send_signal(self, sig: int) -> None:
        real = self._real
        self._call("send_signal", (sig,), lambda: real.send_signal(sig))

    def terminate(self) -> None:
        real = self._real
        self._call("terminate", (), lambda: real.terminate())

    def kill(self) -> None:
        real = self._real
        self._call("kill", (), lambda: real.kill())

    def __enter__(self) -> Popen:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                _quiet_close(stream)
        if self.stdin is not None:
            _quiet_close(self.stdin)
        self.wait()

    def __repr__(self) -> str:
        return f"<Popen: returncode: {self.returncode} args: {self.args!r}>"


def _quiet_close(stream: Any) -> None:
    with contextlib.suppress(BrokenPipeError):
        stream.close()


def install_subprocess(rt: Runtime, patcher: Patcher) -> None:
    proxy = type("Popen", (Popen,), {"_rt": rt, "__module__": "subprocess"})
    patcher.replace(subprocess, "Popen", proxy)


# -- multiprocessing's semaphores --------------------------------------------------------------


class SemLockProxy:
    """_multiprocessing.SemLock: a POSIX semaphore the processes of a multiprocessing program
    share (its locks, semaphores and the bound of a Queue). What another process did to it is
    an input of this one, so every operation is a boundary call whose result is recorded, and
    replay serves it without a semaphore: a replay runs one process of the run, and the
    others' acquires and releases are not there to balance its own.

    Made when the program makes one (multiprocessing.synchronize.SemLock calls the module's
    class); one made by the recorder itself or inside another call is the real class's."""

    __slots__ = ("__weakref__", "_oid", "_real", "_rt", "handle", "kind", "maxvalue", "name")
    runtime: Runtime  # set on the class install_semaphores makes for its runtime
    real_class: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if not cls.runtime.intercepting():
            return cls.real_class(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, kind: int, value: int, maxvalue: int, name: str, unlink: bool) -> None:
        self._rt = rt = type(self).runtime
        self._oid = rt.new_oid()
        made: list[Any] = []
        base = type(self).real_class

        def make() -> tuple[int, int, int, str | None]:
            real = base(kind, value, maxvalue, name, unlink)
            made.append(real)
            return real.handle, real.kind, real.maxvalue, real.name

        key = (kind, value, maxvalue, name, unlink)
        self.handle, self.kind, self.maxvalue, self.name = rt.call(
            "multiprocessing.SemLock", key, make
        )
        self._real = made[0] if made else None

    def _op(self, op: str, *args: Any) -> Any:
        real = self._real
        return self._rt.call(f"semlock.{op}", (self._oid, *args), lambda: getattr(real, op)(*args))

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        return bool(self._op("acquire", block, timeout))

    def release(self) -> None:
        self._op("release")

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def _count(self) -> int:
        return int(self._op("_count"))

    def _is_mine(self) -> bool:
        return bool(self._op("_is_mine"))

    def _get_value(self) -> int:
        return int(self._op("_get_value"))

    def _is_zero(self) -> bool:
        return bool(self._op("_is_zero"))

    def _after_fork(self) -> None:
        # This process's count of its own acquires starts again at 0 (what _count and
        # _is_mine then answer is recorded like the rest).
        if self._real is not None:
            self._real._after_fork()

    @classmethod
    def _rebuild(cls, *state: Any) -> Any:
        """A semaphore a spawned process was given by its parent (unpickled): a proxy like
        one the program made, its operations recorded calls; replay rebuilds no semaphore."""
        rt = cls.runtime
        if not rt.intercepting():
            return cls.real_class._rebuild(*state)
        self = object.__new__(cls)
        self._rt, self._oid = rt, rt.new_oid()
        made: list[Any] = []

        def rebuild() -> tuple[int, int, int, str | None]:
            real = cls.real_class._rebuild(*state)
            made.append(real)
            return real.handle, real.kind, real.maxvalue, real.name

        # (handle, kind, maxvalue, name): the handle is a descriptor number, not in the key
        self.handle, self.kind, self.maxvalue, self.name = rt.call(
            "multiprocessing.SemLock._rebuild", tuple(state[1:]), rebuild
        )
        self._real = made[0] if made else None
        return self


def install_semaphores(rt: Runtime, patcher: Patcher) -> None:
    import _multiprocessing  # type: ignore[import-not-found]

    real = _multiprocessing.SemLock
    proxy = type(
        "SemLock",
        (SemLockProxy,),
        {
            "__slots__": (),
            "runtime": rt,
            "real_class": real,
            "SEM_VALUE_MAX": real.SEM_VALUE_MAX,
            "__module__": "_multiprocessing",
        },
    )
    patcher.replace(_multiprocessing, "SemLock", proxy)


def install_children(rt: Runtime, patcher: Patcher) -> None:
    """`_posixsubprocess.fork_exec`, through which Python starts every program it runs
    (subprocess's Popen, inside its own boundary call; multiprocessing's spawn and forkserver
    starts and its resource tracker, directly): a start the program makes itself is a call
    that returned the child's pid, and replay starts nothing. When recording, a child that is
    this interpreter running Python is started under the recorder as a run of its own
    (`rt.python_child` rewrites its command line: _recorder.py's _child_command), and its
    parent's recording names it."""
    import _posixsubprocess

    real = _posixsubprocess.fork_exec

    def fork_exec(args: Any, executable_list: Any, *rest: Any) -> Any:
        def start() -> Any:  # (inside the call: the recorder's own calls are not recorded)
            child = getattr(rt, "python_child", None)
            command = (child(args, executable_list, rest) if child is not None else None) or args
            return real(command, executable_list, *rest)

        # The key is the command line's length only: the interpreter's path and the
        # descriptors named in it differ where the run replays.
        return rt.call(
            "_posixsubprocess.fork_exec",
            (len(args) if isinstance(args, list | tuple) else -1,),
            start,
        )

    patcher.replace(_posixsubprocess, "fork_exec", fork_exec)
