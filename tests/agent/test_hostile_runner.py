"""A runner that breaks the protocol is killed at its first bad frame: one test each, run
twice, as a child process and inside a real rootless Podman session container.

The runner here is a hostile script (`python -c HOSTILE MODE IN OUT`, so the container needs
nothing but the image's interpreter and sealtrace): it says HELLO, takes the recording,
answers LOAD, and then misbehaves the way each case names. The agent must kill it, remove
the pipe directory and raise exit 5; in a container, the container must be gone too.
"""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from sealtrace.agent import SandboxError
from sealtrace.agent._podman import PodmanTransport
from sealtrace.agent._sandbox_client import LocalTransport, SandboxClient

from ..conftest import KeyFiles
from ..sandbox.replaying import record, write_app

HOSTILE = textwrap.dedent(
    """
    import dataclasses, os, struct, sys, time
    from sealtrace.sandbox.protocol import FRAME_SIZE, Frame, Op, decode, encode
    mode = sys.argv[1]
    inp = os.open(sys.argv[2], os.O_RDONLY)
    out = os.open(sys.argv[3], os.O_WRONLY)
    seq = 0
    def send(frame, raw=None):
        global seq
        seq += 1
        data = raw if raw is not None else encode(dataclasses.replace(frame, seq=seq))
        os.write(out, data)
    def read(n):
        data = b""
        while len(data) < n:
            chunk = os.read(inp, n - len(data))
            if not chunk:
                sys.exit(0)
            data += chunk
        return data
    send(Frame(Op.HELLO, a=1, d=FRAME_SIZE))
    load = decode(read(FRAME_SIZE))
    read(load.f)
    send(Frame(Op.LOADED, a=1000, b=900, d=1))
    send(Frame(Op.DONE, a=1, b=load.seq))
    request = decode(read(FRAME_SIZE))
    read(request.f)
    if mode == "wrong-size":
        os.write(out, encode(Frame(Op.STATS, seq=seq + 1, a=1))[:60])
        sys.exit(0)
    elif mode == "misaligned":
        os.write(out, bytes([255]) * 30 + encode(Frame(Op.STATS, seq=seq + 1, a=1)))
    elif mode == "unknown-opcode":
        raw = bytearray(encode(Frame(Op.STATS, seq=seq + 1, a=1)))
        raw[3] = 250
        os.write(out, bytes(raw))
    elif mode == "unrequested-answer":
        send(Frame(Op.EDGE, a=5, b=4))
    elif mode == "backwards-counter":
        os.write(out, encode(Frame(Op.STATS, seq=seq, a=1)))
    elif mode == "budget":
        for _ in range(50):
            send(Frame(Op.STATS, a=1))
    elif mode == "silence":
        time.sleep(60)
    elif mode == "passes-parted":  # not hostile: ERROR PASSES at one of the run's steps
        send(Frame(Op.ERROR, e=10, a=812, b=request.seq))
    elif mode == "passes-beyond-the-run":
        send(Frame(Op.ERROR, e=10, a=5000, b=request.seq))
    time.sleep(60)  # whatever happens, wait to be killed
    """
)
TIMEOUT = 3.0  # the silence case waits this long; a container opens its pipes in about 1 s


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, object]:
    from sealtrace.proxy import write_keypair
    from sealtrace.sandbox._replay_process import load_recording

    work = tmp_path_factory.mktemp("hostile")
    keys = KeyFiles(*write_keypair(work / "keys", "h"))
    app = write_app(work / "app", "print(sum(range(10)))\n")
    done = record(keys, work / "store", [sys.executable, str(app)], "--app-root", str(app.parent))
    assert done.proc.returncode == 0, done.proc.stderr.decode()
    return load_recording(str(work / "store"), keys.identity)


@dataclass
class Place:
    """Where a runner runs: `transport(mode)` gives a fresh transport running the hostile
    script (the real runner when mode is None); `running` lists what is still alive of it
    (the child process, or every container carrying the session's label or id)."""

    transport: Callable[[str | None], Any]
    running: Callable[[Any], list[str]]


def _local(mode: str | None) -> LocalTransport:
    transport = LocalTransport()
    if mode is not None:
        transport.argv = [sys.executable, "-c", HOSTILE, mode]
    return transport


def _child(transport: LocalTransport) -> list[str]:
    process = transport.process
    return [str(process.pid)] if process is not None and process.poll() is None else []


@pytest.fixture(params=["process", pytest.param("container", marks=pytest.mark.podman)])
def place(request: pytest.FixtureRequest) -> Place:
    if request.param == "process":
        return Place(_local, _child)
    client, user, _socket = request.getfixturevalue("podman_service")
    image = request.getfixturevalue("replay_image")
    seen: dict[int, tuple[str, str]] = {}  # transport → (session label, container id)

    def container(mode: str | None) -> PodmanTransport:
        transport = PodmanTransport(client, image, uid=user.pw_uid, gid=user.pw_gid)
        if mode is not None:
            transport.argv = [transport.argv[0], "-c", HOSTILE, mode]
        return transport

    def containers(transport: PodmanTransport) -> list[str]:
        if transport.container is not None:  # remember it: kill() forgets the container
            seen[id(transport)] = (transport.directory.name, transport.container.id)
        label, ident = seen[id(transport)]
        return [
            c.id
            for c in client.containers.list(all=True)
            if c.id == ident or (c.labels or {}).get("sealtrace.session") == label
        ]

    return Place(container, containers)


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("wrong-size", "truncated frame"),
        ("misaligned", "bad magic"),
        ("unknown-opcode", "unknown opcode"),
        ("unrequested-answer", "does not answer"),
        ("backwards-counter", "seq"),
        ("budget", "more than 5 frames"),
        ("silence", f"no frame from the runner for {TIMEOUT:g}s"),
        ("passes-beyond-the-run", "counter out of place"),
    ],
)
def test_a_hostile_runner_is_killed_at_its_first_bad_frame(
    recording: tuple[bytes, object], place: Place, mode: str, why: str
) -> None:
    data, parsed = recording
    transport = place.transport(mode)
    session = SandboxClient(data, parsed, transport, timeout=TIMEOUT, budget=5)  # type: ignore[arg-type]
    assert len(place.running(transport)) == 1  # the check below can see it
    started = time.monotonic()
    with pytest.raises(SandboxError, match=why) as failure:
        session.stats()
    assert failure.value.exit_code == 5
    # Killed at once: a container's PID 1 ignores SIGTERM, so a polite stop would take 10 s
    # more. The bound stays under that with room for a loaded machine (a CI run took 6.04 s
    # against a bound of TIMEOUT + 3 while other tests ran beside it).
    assert time.monotonic() - started < TIMEOUT + 7
    assert place.running(transport) == []  # killed (a container: removed)
    assert not transport.directory.exists()  # its pipes are gone
    with pytest.raises(SandboxError, match="closed"):
        session.stats()


def test_passes_that_parted_are_named_as_a_divergence(
    recording: tuple[bytes, object], place: Place
) -> None:
    """ERROR PASSES (the question's passes replayed the run differently, from checkpoints and
    again from the start) is no broken protocol: the question is refused with exit 3, naming
    the step, as in-process."""
    from sealtrace.sandbox import DivergenceError

    data, parsed = recording
    transport = place.transport("passes-parted")
    session = SandboxClient(data, parsed, transport, timeout=TIMEOUT)  # type: ignore[arg-type]
    try:
        with pytest.raises(DivergenceError, match="differently at step 812;") as refused:
            session.stats()
        assert refused.value.exit_code == 3
        assert len(place.running(transport)) == 1  # the session goes on
    finally:
        session.close()


def test_negative_control_the_real_runner_answers(
    recording: tuple[bytes, object], place: Place
) -> None:
    data, parsed = recording
    transport = place.transport(None)
    with SandboxClient(data, parsed, transport, timeout=60.0) as session:  # type: ignore[arg-type]
        assert len(place.running(transport)) == 1
        stats = session.stats()
    assert stats["instructions"] > 0 and stats["depth_mismatches"] == 0
    assert place.running(transport) == []
    assert not transport.directory.exists()
