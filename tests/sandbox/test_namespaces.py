"""A program replayed in a real session container cannot create or join a namespace
(security issue 21, finding 2), while fork and threads keep working there.

The program (NAMESPACE_APP) is recorded here and replayed by the runner in a session
container, as in test_hostile_program.py: what it tries are raw syscalls through ctypes,
which the boundary neither records nor serves, and only where /run/.containerenv exists.
Everything runs in a forked child of its own (the attacker), which sends its findings back
through a pipe as a fixed array of ints: whatever the attacks find, the replaying process
runs the same instructions in every pass. The findings end up as ints in `probe`'s locals;
the test reads them with inspect-stack, as VALUE frames.

The attacker tries to get a user and network namespace by every path: raw clone with
CLONE_NEWUSER|CLONE_NEWNET|SIGCHLD, clone3 with the same flags, unshare, and setns on its own
/proc/self/ns/net. A clone that succeeds returns 0 in a child that now holds every capability
in its own namespaces; that child only tries to open a NETLINK_NETFILTER socket (the
nf_tables surface) and exits, its status telling the attacker what it got. The attacker
also tries the new mount API and the calls that move a root (fsopen, fspick, open_tree,
mount_setattr, pivot_root, chroot) and sethostname.

Controls, in the same container: a fork (glibc's fork is clone with SIGCHLD and no namespace
flags) and a thread (pthread_create: clone3, and clone with CLONE_VM|CLONE_THREAD|... once
clone3 says ENOSYS) both work.
"""

from __future__ import annotations

import errno
import platform
from dataclasses import dataclass
from typing import Any

import pytest

from sealtrace.agent._podman import PodmanTransport
from sealtrace.agent._sandbox_client import SandboxClient
from sealtrace.proxy._stream import ParsedStream
from sealtrace.sandbox._replay_process import load_recording
from sealtrace.sandbox.questions import InspectStack

from ..conftest import KeyFiles
from .replaying import PYTHON, record, write_app

NAMESPACE_APP = """
import ctypes

SIGCHLD = 17
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
SYS_CLONE, SYS_UNSHARE, SYS_SETNS, SYS_CLONE3 = 56, 272, 308, 435  # x86-64
SYS_FSOPEN, SYS_FSPICK, SYS_OPEN_TREE, SYS_MOUNT_SETATTR = 430, 433, 428, 442
SYS_PIVOT_ROOT, SYS_CHROOT, SYS_SETHOSTNAME = 155, 161, 170
AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER = 16, 3, 12
AT_FDCWD, OPEN_TREE_CLONE = -100, 1
NAMES = (
    "clone_errno", "clone_child", "clone3_errno", "clone3_child", "unshare_errno",
    "setns_errno", "fsopen_errno", "fspick_errno", "open_tree_errno", "mount_setattr_errno",
    "pivot_root_errno", "chroot_errno", "sethostname_errno", "fork_status", "thread_errno",
)

libc = ctypes.CDLL(None, use_errno=True)
long = ctypes.c_long


class CloneArgs(ctypes.Structure):  # struct clone_args, CLONE_ARGS_SIZE_VER0
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size",
        "tls")]


def in_new_namespaces():
    # The child of a clone that made namespaces: 0 if it could open a NETLINK_NETFILTER
    # socket, 1 if not. It must not return into the attacker's code.
    libc._exit(int(libc.socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER) < 0))


def exit_status(pid):
    # The exit status of child `pid`, or -1 if there is no child.
    status = ctypes.c_int(-1)
    reaped = pid > 0 and libc.waitpid(int(pid), ctypes.byref(status), 0) == pid
    return status.value >> 8 if reaped else -1


def spawn(number, *args):
    # A raw clone-like syscall: (errno, what its child, if any, found).
    ctypes.set_errno(0)
    pid = libc.syscall(long(number), *args)
    found = ctypes.get_errno()
    if pid == 0:
        in_new_namespaces()
    return found, exit_status(pid)


def errno_of(number, *args):
    ctypes.set_errno(0)
    libc.syscall(long(number), *args)
    return ctypes.get_errno()


def thread_errno():
    # pthread_create's error (0: the thread ran and was joined). Its start routine is libc's
    # getpid, so the thread runs no Python.
    thread = ctypes.c_ulong()
    start = ctypes.cast(libc.getpid, ctypes.c_void_p)
    failed = libc.pthread_create(ctypes.byref(thread), None, start, None)
    if failed == 0:
        libc.pthread_join(thread, None)
    return failed


def attack():
    libc.syscall.restype = ctypes.c_long
    found = []
    flags = CLONE_NEWUSER | CLONE_NEWNET
    found += spawn(SYS_CLONE, long(flags | SIGCHLD), long(0), long(0), long(0), long(0))
    args = CloneArgs(flags=flags, exit_signal=SIGCHLD)
    found += spawn(SYS_CLONE3, ctypes.byref(args), long(ctypes.sizeof(args)))
    found.append(errno_of(SYS_UNSHARE, long(flags)))
    ns = libc.open(b"/proc/self/ns/net", 0)
    found.append(errno_of(SYS_SETNS, long(ns), long(CLONE_NEWNET)))
    libc.close(ns)
    found.append(errno_of(SYS_FSOPEN, b"tmpfs", long(0)))
    found.append(errno_of(SYS_FSPICK, long(AT_FDCWD), b"/tmp", long(0)))
    found.append(errno_of(SYS_OPEN_TREE, long(AT_FDCWD), b"/tmp", long(OPEN_TREE_CLONE)))
    found.append(errno_of(SYS_MOUNT_SETATTR, long(-1), b"", long(0), None, long(0)))
    found.append(errno_of(SYS_PIVOT_ROOT, b"/tmp", b"/tmp"))
    found.append(errno_of(SYS_CHROOT, b"/tmp"))
    found.append(errno_of(SYS_SETHOSTNAME, b"hostile", long(7)))
    child = libc.fork()
    if child == 0:
        libc._exit(42)
    found.append(exit_status(child))
    found.append(thread_errno())
    return found


def attacked():
    # The attack runs in a child of its own; its findings come back through a pipe.
    found = (ctypes.c_int * len(NAMES))(*[-1] * len(NAMES))
    pipe = (ctypes.c_int * 2)()
    libc.pipe(pipe)
    attacker = libc.fork()
    if attacker == 0:
        found[:] = attack()
        libc.write(pipe[1], found, ctypes.sizeof(found))
        libc._exit(0)
    libc.close(pipe[1])
    libc.waitpid(attacker, None, 0)
    libc.read(pipe[0], found, ctypes.sizeof(found))
    libc.close(pipe[0])
    return list(found)


def probe():
    inside = int(libc.access(b"/run/.containerenv", 0) == 0)
    found = attacked() if inside else [-1] * len(NAMES)
    (clone_errno, clone_child, clone3_errno, clone3_child, unshare_errno, setns_errno,
     fsopen_errno, fspick_errno, open_tree_errno, mount_setattr_errno, pivot_root_errno,
     chroot_errno, sethostname_errno, fork_status, thread_errno) = found
    # The pass's persona, its layout fixed or not (an unsigned argument, as the kernel reads
    # it: a sign-extended -1 is another persona, which the profile refuses).
    layout = libc.personality(ctypes.c_ulong(0xFFFFFFFF))
    done = 1
    return done  # the test stops here and reads every local above


probe()
"""
STOP = "return done"
PROBES = (
    "clone_errno", "clone_child", "clone3_errno", "clone3_child", "unshare_errno",
    "setns_errno", "fsopen_errno", "fspick_errno", "open_tree_errno", "mount_setattr_errno",
    "pivot_root_errno", "chroot_errno", "sethostname_errno", "fork_status", "thread_errno",
)  # fmt: skip
ATTACK_CALLS = {"syscall", "fork", "pthread_create", "socket", "pipe"}


@dataclass(frozen=True)
class Recording:
    keys: KeyFiles
    data: bytes
    parsed: ParsedStream
    stop: str  # app.py:LINE of STOP


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    from sealtrace.proxy import write_keypair

    assert platform.machine() == "x86_64", "the program calls syscalls by x86-64 numbers"
    work = tmp_path_factory.mktemp("namespaces")
    keys = KeyFiles(*write_keypair(work / "keys", "namespaces"))
    app = write_app(work / "app", NAMESPACE_APP)
    recorded = record(keys, work / "store", [PYTHON, str(app)])
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    data, parsed = load_recording(str(work / "store"), keys.identity)
    line = next(i for i, text in enumerate(app.read_text().splitlines(), 1) if STOP in text)
    return Recording(keys, data, parsed, f"app.py:{line}")


def _findings(box: SandboxClient, stop: str) -> dict[str, int]:
    frames = box.inspect_stack(InspectStack(at=stop))["frames"]
    probe = next(f for f in frames if f["function"] == "probe")
    return {
        local["name"]: int(local["value"]["repr"])
        for local in probe["locals"]
        if local["value"]["type"] == "int" and local["value"]["repr"] is not None
    }


@pytest.fixture(scope="module")
def boxed(recording: Recording, podman_service: tuple[Any, Any, str], replay_image: str) -> Any:
    client, user, _socket = podman_service
    transport = PodmanTransport(client, replay_image, uid=user.pw_uid, gid=user.pw_gid)
    with SandboxClient(recording.data, recording.parsed, transport, timeout=120) as box:
        return _findings(box, recording.stop)


def test_recorded_here_it_tried_nothing(recording: Recording) -> None:
    noted = {
        n["detail"].split(":", 1)[1].split()[0]
        for n in recording.parsed.notes
        if n["what"] == "ctypes"
    }
    assert "access" in noted
    assert not noted & ATTACK_CALLS, noted
    with SandboxClient(recording.data, recording.parsed) as box:
        on_host = _findings(box, recording.stop)
    assert on_host["inside"] == 0 and on_host["done"] == 1
    assert {name: on_host[name] for name in PROBES} == dict.fromkeys(PROBES, -1)


@pytest.mark.podman
def test_clone_cannot_make_a_user_and_network_namespace(boxed: dict[str, int]) -> None:
    assert boxed["inside"] == 1 and boxed["done"] == 1
    # -1: no child ran in new namespaces (it would have exited 0 or 1).
    assert (boxed["clone_errno"], boxed["clone_child"]) == (errno.EPERM, -1)


@pytest.mark.podman
def test_clone3_says_enosys_so_libc_falls_back_to_the_filtered_clone(
    boxed: dict[str, int],
) -> None:
    assert (boxed["clone3_errno"], boxed["clone3_child"]) == (errno.ENOSYS, -1)


@pytest.mark.podman
def test_unshare_and_setns_are_refused(boxed: dict[str, int]) -> None:
    assert boxed["unshare_errno"] == errno.EPERM
    assert boxed["setns_errno"] == errno.EPERM


@pytest.mark.podman
def test_the_mount_api_chroot_pivot_root_and_sethostname_are_refused(
    boxed: dict[str, int],
) -> None:
    for call in ("fsopen", "fspick", "open_tree", "mount_setattr", "pivot_root", "chroot"):
        assert boxed[f"{call}_errno"] == errno.EPERM, call
    assert boxed["sethostname_errno"] == errno.EPERM


@pytest.mark.podman
def test_fork_and_threads_still_work_in_the_same_container(boxed: dict[str, int]) -> None:
    assert boxed["fork_status"] == 42  # the forked child ran and exited with its own status
    assert boxed["thread_errno"] == 0  # pthread_create, then pthread_join


@pytest.mark.podman
def test_a_pass_runs_with_its_layout_fixed(boxed: dict[str, int]) -> None:
    """The profile lets a query pass fix its address-space layout (ADDR_NO_RANDOMIZE,
    sealtrace.sandbox._layout), so every pass of a session puts the program's objects at
    the same addresses; without that rule the container's passes ran randomised."""
    assert boxed["layout"] != -1 and boxed["layout"] & 0x0040000
