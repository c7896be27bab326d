"""The record token's custody in `sealtrace record`: where the token may come from, and how it
is kept from the program being recorded (issue 21, finding 4).

The program runs as the recorder's user, as the recorder's child. Whatever that user can read,
the program can read: every process's command line (/proc/PID/cmdline is world-readable), and
the environment, memory, descriptors and maps of every dumpable process of the same user.
So the token never goes on a command line (`--token` is refused, see cli.py), and the
recorder, as its first act (`take_custody`, called by `main()` before the command line is
even parsed):

- marks itself non-dumpable (PR_SET_DUMPABLE 0): its /proc/PID files then belong to root,
  and a process of the same user without CAP_SYS_PTRACE can neither read its environ, mem,
  maps or fd table nor attach to it; and lowers its own core limit to 0 (the program gets
  the limit it was started with back: `restore_in_child`);
- takes SEALTRACE_TOKEN out of its environment and overwrites the value in the initial
  environment block, which is what /proc/PID/environ shows (`os.environ.pop` and unsetenv do
  not change it), so not even root finds it there;
- or, with `--token-fd N`, reads the token from descriptor N and closes it. A regular file
  behind N that this user could open again is refused: the program could open it too.

The token is not handed to the program by any path: before the program starts,
`refuse_if_visible` refuses (usage error) when the token can still be seen where the program
could look (an ancestor's environment or command line that this user can read, the
recorder's own command line, the program's arguments or environment); the program inherits
stdio only and an environment without SEALTRACE_TOKEN.

What this cannot do (docs/platform.md says the same): a program running as root or with
CAP_SYS_PTRACE reads the recorder's memory, where the token lives while the run is
registered and finished; a process of the same user that is already running when the
recorder starts can read the recorder's environment, or attach to it, in the fraction of a
second before its first act; an ancestor holding the token in its memory (a shell that
exported it) is not detected. Hence: record services as an unprivileged user of their own,
started from systemd (EnvironmentFile= is read by PID 1) or with `exec`.

Standard library only: the recorder is imported into production processes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import stat
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from ._errors import UsageError

__all__ = ["TOKEN_ENV", "refuse_if_visible", "restore_in_child", "take_custody", "take_token"]

TOKEN_ENV = "SEALTRACE_TOKEN"  # noqa: S105 - the variable's name, not a token
_PR_SET_DUMPABLE = 4
_TOKEN_MAX = 4096
_LINUX = sys.platform.startswith("linux")


@dataclass(frozen=True)
class _Custody:
    from_environment: str | None
    core_limit: tuple[int, int]  # before this process lowered it: the program's own


_custody: _Custody | None = None


def take_custody() -> None:
    """Harden this process and take the token out of its environment; idempotent. Called
    first thing by `sealtrace record`, before anything else reads the environment."""
    global _custody
    if _custody is not None:
        return
    core = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, core[1]))
    if _LINUX:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    token = os.environ.get(TOKEN_ENV)
    if token is not None:
        if _LINUX:
            _erase_from_initial_environment(TOKEN_ENV.encode())
        del os.environ[TOKEN_ENV]  # unsetenv: libc's environ no longer points at it
    _custody = _Custody(token or None, core)


def take_token(fd: int | None) -> str | None:
    """The token from descriptor `fd` (read to its end, then closed) or, without one, from
    SEALTRACE_TOKEN; None when neither gives one."""
    take_custody()
    assert _custody is not None
    if fd is None:
        return _custody.from_environment
    if _custody.from_environment is not None:
        raise UsageError(f"the record token came both in {TOKEN_ENV} and on --token-fd: "
                         "give it one way")  # fmt: skip
    return _read_descriptor(fd)


def restore_in_child() -> Callable[[], None] | None:
    """For Popen's preexec_fn: give the program the core limit this process started with.
    Call Popen with it only while this process has a single thread."""
    if _custody is None or _custody.core_limit == resource.getrlimit(resource.RLIMIT_CORE):
        return None
    core = _custody.core_limit
    return lambda: resource.setrlimit(resource.RLIMIT_CORE, core)


def refuse_if_visible(token: str, argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Raise UsageError when the program about to run with `argv` and `env` could read the
    token somewhere: in them, in this process's command line, or in the environment or
    command line of an ancestor that this user can read (the program can read them too)."""
    for name, value in env.items():
        if token in name or token in value:
            raise UsageError(f"the record token is in the environment variable {name}, which "
                             "the program would inherit: remove it from there")  # fmt: skip
    if any(token in arg for arg in argv):
        raise UsageError("the record token is in the program's command line: remove it")
    secret = token.encode()
    if secret in _read_proc(os.getpid(), "cmdline"):
        raise UsageError("the record token is in this command line, which every user of this "
                         f"host can read: give it in {TOKEN_ENV} or with --token-fd")  # fmt: skip
    for pid in _ancestors():
        for part, what in (("environ", "environment"), ("cmdline", "command line")):
            if secret in _read_proc(pid, part):
                raise UsageError(
                    f"the record token is in the {what} of process {pid} ({_name(pid)}), an "
                    "ancestor of this recorder that the recorded program could read: start "
                    "the recorder with exec, from systemd (EnvironmentFile=), or give it the "
                    "token with --token-fd (docs/platform.md)"
                )


# -- the pieces --------------------------------------------------------------------------


def _erase_from_initial_environment(name: bytes) -> None:
    """Overwrite NAME's value with zero bytes in the block the kernel shows as
    /proc/self/environ: the memory between mm->env_start and env_end (fields 50 and 51 of
    /proc/self/stat, Linux 3.5 and later), in this process's own stack."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rpartition(b")")[2].split()
    start, end = int(fields[47]), int(fields[48])  # fields 50, 51; this list starts at 3
    offset = 0
    for entry in ctypes.string_at(start, end - start).split(b"\0"):
        if entry.startswith(name + b"="):
            ctypes.memset(start + offset + len(name) + 1, 0, len(entry) - len(name) - 1)
        offset += len(entry) + 1


def _read_descriptor(fd: int) -> str:
    if fd in (0, 1, 2):
        raise UsageError("--token-fd names the program's stdin, stdout or stderr: use another")
    try:
        info = os.fstat(fd)
    except OSError:
        raise UsageError(f"--token-fd {fd} is not an open descriptor") from None
    try:
        if stat.S_ISREG(info.st_mode) and os.geteuid() != 0 and _reopens(fd, info):
            raise UsageError(
                f"the file behind --token-fd {fd} can be opened by this user, so the recorded "
                "program could read it too: make it readable by root only and open it in "
                "the process that starts the recorder (docs/platform.md)"
            )
        data = bytearray()
        while len(data) <= _TOKEN_MAX and (chunk := os.read(fd, _TOKEN_MAX + 1 - len(data))):
            data += chunk
    finally:
        os.close(fd)
    token = data.decode("ascii", "replace").strip()
    if len(data) > _TOKEN_MAX or not token or any(c.isspace() for c in token):
        raise UsageError(f"--token-fd {fd} did not give one token (one line, at most "
                         f"{_TOKEN_MAX} bytes)")  # fmt: skip
    return token


def _reopens(fd: int, info: os.stat_result) -> bool:
    """Whether this user could open the file again (its owner could also chmod it)."""
    if info.st_uid == os.geteuid():
        return True
    try:
        os.close(os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY))
    except OSError:
        return False
    return True


def _ancestors() -> Iterator[int]:
    pid, seen = os.getppid(), set()
    while pid > 0 and pid not in seen:
        seen.add(pid)
        yield pid
        stat_line = _read_proc(pid, "stat")
        try:
            pid = int(stat_line.rpartition(b")")[2].split()[1])
        except (IndexError, ValueError):
            return


def _read_proc(pid: int, part: str) -> bytes:
    """The file, or nothing when this user cannot read it (nor, then, can the program)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/{part}", "rb") as f:
        return f.read()
    return b""


def _name(pid: int) -> str:
    return _read_proc(pid, "comm").decode("utf-8", "replace").strip() or "?"
