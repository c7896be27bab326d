"""A hostile program, recorded here and replayed in a real session container, finds the
sandbox closed; what it found comes back only as the runner's fixed frames.

The program (HOSTILE_APP) goes behind the recorder's stubs: everything it tries is a libc
call through ctypes, which the boundary neither records nor serves. Replay stays faithful
while those calls really run, because the program's Python path depends on one of them only:
whether /run/.containerenv exists (Podman creates it in every container). No branch depends
on what the others find, so every replay pass runs the same instructions, as the agent
requires. Recorded on this host, the program only reads its own status; replayed in a
container, it attacks. Its
findings are plain ints in its `probe` function's locals. The test stops there with
inspect-stack, and each int travels as the int64 payload of a VALUE frame that the agent
checks like any other.

In the session container, the program:

- cannot connect to a listener on the host's loopback (ECONNREFUSED), but can connect to a
  listener it opens on the same port (its loopback is its own);
- cannot create a file in / or in /pipes (EROFS; nothing appears on the host), but can write
  into /tmp (the container's tmpfs);
- fills its 64 MiB /tmp and gets ENOSPC;
- cannot open the agent's channel: the FIFOs' names are gone once the runner holds both
  ends, and the runner is not dumpable, so its /proc fd links are closed to the program;
- reads CapEff 0 and NoNewPrivs 1 (replayed here, it reads this process's values);
- gets EPERM from unshare, mount, ptrace and keyctl (the session's seccomp profile), while a
  raw getpid syscall works;
- forks until the nproc limit stops it with EAGAIN (fewer than 256 children), and reaps them;
- cannot malloc 6 GiB under RLIMIT_AS (4 GiB), but can malloc 1 GiB. Rootless Podman gets no
  cgroup memory limit on these hosts, so the limit shows as a failed allocation, not a kill.

The same recording replayed here through the same protocol (LocalTransport) is the control:
there the program finds `inside` 0 and tries nothing.
"""

from __future__ import annotations

import errno
import platform
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sealtrace.agent._podman import PodmanTransport
from sealtrace.agent._sandbox_client import SandboxClient
from sealtrace.proxy._stream import ParsedStream
from sealtrace.sandbox._replay_process import load_recording
from sealtrace.sandbox.questions import InspectStack

from ..conftest import KeyFiles
from .replaying import PYTHON, assert_bit_exact, record, replay, write_app

HOSTILE_APP = """
import ctypes
import sys

AF_INET, SOCK_STREAM = 2, 1
O_RDONLY, O_WRONLY, O_CREAT, O_TRUNC, O_NONBLOCK = 0, 0o1, 0o100, 0o1000, 0o4000
CLONE_NEWUSER, PTRACE_ATTACH, KEY_SPEC_SESSION_KEYRING = 0x10000000, 16, -3
SYS_GETPID, SYS_KEYCTL = 39, 250  # x86-64
RLIMIT_NPROC, RLIMIT_AS = 6, 9

libc = ctypes.CDLL(None, use_errno=True)


class Address(ctypes.Structure):  # struct sockaddr_in
    _fields_ = [("family", ctypes.c_ushort), ("port", ctypes.c_uint16),
                ("host", ctypes.c_uint32), ("zero", ctypes.c_char * 8)]


class Limit(ctypes.Structure):  # struct rlimit
    _fields_ = [("soft", ctypes.c_ulong), ("hard", ctypes.c_ulong)]


def errno_of(function, *args):
    # Without a branch on the result: this process must run the same instructions in every
    # replay pass, whatever the calls find (see fork_bomb).
    ctypes.set_errno(0)
    function(*args)
    return ctypes.get_errno()


def status():
    fd = libc.open(b"/proc/self/status", 0)
    buffer = ctypes.create_string_buffer(1 << 14)
    size = libc.read(fd, buffer, len(buffer))
    libc.close(fd)
    fields = dict(line.split(":", 1) for line in buffer.raw[:size].decode().splitlines())
    return int(fields["CapEff"], 16), int(fields["NoNewPrivs"]), int(fields["Seccomp"])


def connect(port):
    address = Address(AF_INET, libc.htons(port), libc.inet_addr(b"127.0.0.1"))

    def attempt():
        fd = libc.socket(AF_INET, SOCK_STREAM, 0)
        found = errno_of(libc.connect, fd, ctypes.byref(address), ctypes.sizeof(address))
        libc.close(fd)
        return found

    host = attempt()
    listener = libc.socket(AF_INET, SOCK_STREAM, 0)
    libc.bind(listener, ctypes.byref(address), ctypes.sizeof(address))
    libc.listen(listener, 1)
    own = attempt()
    libc.close(listener)
    return host, own


def create(path):
    return errno_of(libc.open, path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)


def reopen(path, flags):
    # The agent's channel, by its path or through the runner's /proc fd links.
    ctypes.set_errno(0)
    fd = libc.open(path, flags | O_NONBLOCK)
    found = ctypes.get_errno()
    libc.close(fd)
    return found


def runner_fds():
    # How many of the runner's (PID 1's) descriptors this process could open: each would
    # be a way to write frames as the runner, or read the agent's questions.
    return sum(reopen(b"/proc/1/fd/%d" % fd, O_RDONLY) == 0 for fd in range(3, 12))


def fill(path, mib):
    # Write `mib` MiB, a MiB at a time, counting what went in; the last errno says why not.
    block = ctypes.create_string_buffer(1 << 20)
    fd = libc.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    ctypes.set_errno(0)
    written = sum(max(0, libc.write(fd, block, 1 << 20)) for _ in range(mib))
    found = ctypes.get_errno()
    libc.close(fd)
    libc.unlink(path)
    return written >> 20, found


def write(path):
    fd = libc.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    written = libc.write(fd, b"x", 1)
    libc.close(fd)
    return int(written == 1)


def limit(resource):
    found = Limit()
    libc.getrlimit(resource, ctypes.byref(found))
    return min(found.soft, 1 << 62)  # RLIM_INFINITY would not fit a frame's int64


def fork_bomb():
    # How many forks succeed differs from one replay pass to the next (the runner's own
    # processes count against nproc too), so the bomb goes off in a child of its own: this
    # process runs the same instructions in every pass, as the agent requires of the run.
    found = (ctypes.c_int * 3)(-1, -1, -1)  # children, errno, reaped
    pipe = (ctypes.c_int * 2)()
    libc.pipe(pipe)
    bomber = libc.fork()
    if bomber == 0:
        pids = []
        while len(pids) < 5000 and (pid := libc.fork()) > 0:
            pids.append(pid)
        if pid == 0:
            libc._exit(0)
        found[0], found[1] = len(pids), ctypes.get_errno()
        # By pid, never waitpid(-1): the replaying process has checkpoints of its own.
        found[2] = sum(libc.waitpid(child, None, 0) == child for child in pids)
        libc.write(pipe[1], found, ctypes.sizeof(found))
        libc._exit(0)
    libc.close(pipe[1])
    libc.waitpid(bomber, None, 0)
    libc.read(pipe[0], found, ctypes.sizeof(found))
    libc.close(pipe[0])
    return tuple(found)


def allocate(size):
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    block = libc.malloc(size)
    libc.free(block)
    return int(block is not None)


def probe(port):
    capeff, nonewprivs, seccomp = status()
    inside = int(libc.access(b"/run/.containerenv", 0) == 0)
    connect_errno = own_connect_errno = -1
    write_root_errno = write_pipes_errno = write_tmp_ok = -1
    tmp_filled_mib = tmp_fill_errno = -1
    pipe_out_errno = pipe_in_errno = runner_fds_open = own_fd_errno = -1
    unshare_errno = mount_errno = ptrace_errno = keyctl_errno = getpid_ok = -1
    nproc_limit = children = fork_errno = reaped = -1
    as_limit = malloc_1g_ok = malloc_6g_ok = -1
    if inside:
        connect_errno, own_connect_errno = connect(port)
        write_root_errno = create(b"/hostile")
        write_pipes_errno = create(b"/pipes/hostile")
        write_tmp_ok = write(b"/tmp/hostile")
        tmp_filled_mib, tmp_fill_errno = fill(b"/tmp/filler", 100)
        pipe_out_errno = reopen(b"/pipes/out", O_WRONLY)
        pipe_in_errno = reopen(b"/pipes/in", O_RDONLY)
        runner_fds_open = runner_fds()
        own_fd_errno = reopen(b"/proc/self/fd/0", O_RDONLY)
        unshare_errno = errno_of(libc.unshare, CLONE_NEWUSER)
        mount_errno = errno_of(libc.mount, b"none", b"/tmp", b"tmpfs", 0, None)
        ptrace_errno = errno_of(libc.ptrace, PTRACE_ATTACH, 1, None, None)
        keyctl_errno = errno_of(libc.syscall, SYS_KEYCTL, 0, KEY_SPEC_SESSION_KEYRING, 0)
        getpid_ok = int(libc.syscall(SYS_GETPID) > 0)
        nproc_limit = limit(RLIMIT_NPROC)
        children, fork_errno, reaped = fork_bomb()
        as_limit = limit(RLIMIT_AS)
        malloc_1g_ok = allocate(1 << 30)
        malloc_6g_ok = allocate(6 << 30)
    done = 1
    return done  # the test stops here and reads every local above


probe(int(sys.argv[1]))
"""
STOP = "return done"
PROBES = (
    "connect_errno", "own_connect_errno", "write_root_errno", "write_pipes_errno",
    "write_tmp_ok", "pipe_out_errno", "pipe_in_errno", "runner_fds_open", "own_fd_errno",
    "tmp_filled_mib", "tmp_fill_errno",
    "unshare_errno", "mount_errno", "ptrace_errno", "keyctl_errno",
    "getpid_ok", "nproc_limit", "children", "fork_errno", "reaped", "as_limit",
    "malloc_1g_ok", "malloc_6g_ok",
)  # fmt: skip
HOSTILE_CALLS = {"socket", "connect", "unshare", "mount", "ptrace", "syscall", "fork", "malloc"}


@dataclass(frozen=True)
class Hostile:
    keys: KeyFiles
    store: Path
    data: bytes
    parsed: ParsedStream
    listener: socket.socket  # on the host's loopback; its port is the program's argv[1]
    stop: str  # app.py:LINE of STOP


@dataclass(frozen=True)
class Boxed:
    found: dict[str, int]  # the probe's int locals, rebuilt by the agent from frames
    pipes: list[str]  # the host side of /pipes while the session ran
    listed: bool  # the session container was there while the session ran
    logs: bytes  # what the container wrote to its stdout and stderr
    gone: bool  # and was gone after
    directory: Path  # the transport's pipe directory


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    from sealtrace.proxy import write_keypair

    assert platform.machine() == "x86_64", "HOSTILE_APP calls syscalls by their x86-64 numbers"
    work = tmp_path_factory.mktemp("hostile")
    keys = KeyFiles(*write_keypair(work / "keys", "hostile"))
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        app = write_app(work / "app", HOSTILE_APP)
        port = str(listener.getsockname()[1])
        recorded = record(keys, work / "store", [PYTHON, str(app), port])
        assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
        data, parsed = load_recording(str(work / "store"), keys.identity)
        line = next(i for i, text in enumerate(app.read_text().splitlines(), 1) if STOP in text)
        yield Hostile(keys, work / "store", data, parsed, listener, f"app.py:{line}")
    finally:
        listener.close()


def _findings(box: SandboxClient, stop: str) -> dict[str, int]:
    frames = box.inspect_stack(InspectStack(at=stop))["frames"]
    probe = next(f for f in frames if f["function"] == "probe")
    return {
        local["name"]: int(local["value"]["repr"])
        for local in probe["locals"]
        if local["value"]["type"] == "int" and local["value"]["repr"] is not None
    }


def _status_field(name: str) -> int:
    text = Path("/proc/self/status").read_text()
    value = next(line.split(":", 1)[1] for line in text.splitlines() if line.startswith(name))
    return int(value, 16) if name == "CapEff" else int(value)


@pytest.fixture(scope="module")
def on_host(hostile: Hostile) -> dict[str, int]:
    """The same recording through the same protocol, its runner a child process here."""
    with SandboxClient(hostile.data, hostile.parsed) as box:
        return _findings(box, hostile.stop)


@pytest.fixture(scope="module")
def boxed(hostile: Hostile, podman_service: tuple[Any, Any, str], replay_image: str) -> Boxed:
    client, user, _socket = podman_service
    transport = PodmanTransport(client, replay_image, uid=user.pw_uid, gid=user.pw_gid)
    with SandboxClient(hostile.data, hostile.parsed, transport, timeout=120) as box:
        found = _findings(box, hostile.stop)
        pipes = sorted(p.name for p in transport.directory.iterdir())
        container = transport.container.id
        listed = any(c.id == container for c in client.containers.list(all=True))
        logs = b"".join(client.containers.get(container).logs())
    gone = not any(c.id == container for c in client.containers.list(all=True))
    return Boxed(found, pipes, listed, logs, gone, transport.directory)


def test_recorded_here_it_tried_nothing_and_replays_here_without_trying(
    hostile: Hostile, on_host: dict[str, int]
) -> None:
    # The recorder notes every libc function the program looked up: here, only the ones
    # that read its status and look for /run/.containerenv.
    noted = {
        n["detail"].split(":", 1)[1].split()[0]
        for n in hostile.parsed.notes
        if n["what"] == "ctypes"
    }
    assert {"open", "read", "close", "access"} <= noted
    assert not noted & HOSTILE_CALLS, noted
    assert_bit_exact(*replay(hostile.keys, hostile.store))
    # Replayed here, the program reads this process's real status and stays out of it.
    assert on_host["inside"] == 0 and on_host["done"] == 1
    assert on_host["capeff"] == _status_field("CapEff")
    assert on_host["nonewprivs"] == _status_field("NoNewPrivs") == 0
    assert {name: on_host[name] for name in PROBES} == dict.fromkeys(PROBES, -1)


@pytest.mark.podman
def test_replayed_in_a_session_container_that_is_gone_afterwards(boxed: Boxed) -> None:
    assert boxed.found["inside"] == 1 and boxed.found["done"] == 1
    assert boxed.listed and boxed.gone
    assert boxed.logs == b""  # the runner's and the program's output go nowhere
    assert not boxed.directory.exists()


@pytest.mark.podman
def test_it_cannot_reach_a_listener_on_the_hosts_loopback(hostile: Hostile, boxed: Boxed) -> None:
    assert boxed.found["connect_errno"] == errno.ECONNREFUSED
    # Control: the same connect reaches a listener on the container's own loopback.
    assert boxed.found["own_connect_errno"] == 0
    listener = hostile.listener
    listener.setblocking(False)
    with pytest.raises(BlockingIOError):
        listener.accept()
    # Control: a connection that did come would have been seen.
    with socket.create_connection(listener.getsockname(), timeout=5):
        accepted, _ = listener.accept()
        accepted.close()


@pytest.mark.podman
def test_it_cannot_create_a_file_on_the_host_or_in_the_containers_root(boxed: Boxed) -> None:
    assert boxed.found["write_root_errno"] == errno.EROFS
    assert boxed.found["write_pipes_errno"] == errno.EROFS
    assert boxed.pipes == []  # the FIFOs' names are gone too: a created file would show
    assert not Path("/hostile").exists()
    # Control: the same write path works where writing is allowed.
    assert boxed.found["write_tmp_ok"] == 1


@pytest.mark.podman
def test_its_tmp_is_capped(boxed: Boxed) -> None:
    # 100 MiB into the tmpfs with 64 MiB free: it fills, then ENOSPC. (Free space is 64 MiB
    # give or take a page per file of what the image holds under /tmp, if anything.)
    assert 48 <= boxed.found["tmp_filled_mib"] <= 72
    assert boxed.found["tmp_fill_errno"] == errno.ENOSPC


@pytest.mark.podman
def test_it_has_no_capabilities_and_cannot_gain_privileges(
    boxed: Boxed, on_host: dict[str, int]
) -> None:
    assert boxed.found["capeff"] == 0
    assert boxed.found["nonewprivs"] == 1
    assert boxed.found["seccomp"] == 2  # a filter (the profile; inspect does not show it)
    # Control: replayed here, the same read finds root's capabilities (the Podman fixture
    # needs root) and privileges it could still gain.
    assert on_host["capeff"] != 0 and on_host["nonewprivs"] == 0


@pytest.mark.podman
def test_unshare_mount_ptrace_and_keyctl_are_refused(boxed: Boxed) -> None:
    for call in ("unshare", "mount", "ptrace", "keyctl"):
        assert boxed.found[f"{call}_errno"] == errno.EPERM, call
    # Control: a raw syscall the profile allows goes through.
    assert boxed.found["getpid_ok"] == 1


@pytest.mark.podman
def test_a_fork_bomb_stops_at_the_pids_limit(boxed: Boxed) -> None:
    found = boxed.found
    assert found["nproc_limit"] == 256
    assert found["fork_errno"] == errno.EAGAIN
    # nproc counts every process of the sandbox user: the runner's too.
    assert 0 < found["children"] < 256
    assert found["reaped"] == found["children"]


@pytest.mark.podman
def test_a_huge_allocation_fails_at_the_address_space_limit(boxed: Boxed) -> None:
    # RLIMIT_AS, not a cgroup: rootless Podman gets no memory controller on these hosts, so
    # the hog is refused its allocation rather than killed.
    assert boxed.found["as_limit"] == 4 << 30
    assert boxed.found["malloc_6g_ok"] == 0
    # Control: an allocation under the limit succeeds.
    assert boxed.found["malloc_1g_ok"] == 1


@pytest.mark.podman
def test_it_cannot_reach_the_agents_channel(boxed: Boxed) -> None:
    # The agent removed the FIFOs' names once the runner had both ends open ...
    assert boxed.found["pipe_out_errno"] == errno.ENOENT
    assert boxed.found["pipe_in_errno"] == errno.ENOENT
    # ... and the runner is not dumpable: its /proc fd links are closed to the program.
    assert boxed.found["runner_fds_open"] == 0
    # Control: the same reopening works on a descriptor of the program's own.
    assert boxed.found["own_fd_errno"] == 0
