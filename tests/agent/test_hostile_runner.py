"""A runner that breaks the protocol is killed at its first bad frame: one test each.

The runner here is a hostile script in a child process (the same Transport the sandbox
uses, without the container): it says HELLO, takes the recording, answers LOAD, and then
misbehaves the way each case names. The agent must kill it and raise exit 5.
"""

from __future__ import annotations

import sys
import textwrap
import time

import pytest

from sealtrace.agent._sandbox import LocalTransport, SandboxError, SandboxSession

from ..conftest import KeyFiles
from ..sandbox.replaying import record, write_app

HOSTILE = textwrap.dedent(
    """
    import dataclasses, os, struct, sys, time
    from sealtrace.sandbox._protocol import FRAME_SIZE, Frame, Op, decode, encode
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
    time.sleep(60)  # whatever happens, wait to be killed
    """
)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, object]:
    from sealtrace.proxy import write_keypair
    from sealtrace.sandbox._session import load_recording

    work = tmp_path_factory.mktemp("hostile")
    keys = KeyFiles(*write_keypair(work / "keys", "h"))
    app = write_app(work / "app", "print(sum(range(10)))\n")
    done = record(keys, work / "store", [sys.executable, str(app)], "--app-root", str(app.parent))
    assert done.proc.returncode == 0, done.proc.stderr.decode()
    return load_recording(str(work / "store"), keys.identity)


class Hostile(LocalTransport):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.argv = [sys.executable, "-c", HOSTILE, mode]


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("wrong-size", "truncated frame"),
        ("misaligned", "bad magic"),
        ("unknown-opcode", "unknown opcode"),
        ("unrequested-answer", "does not answer"),
        ("backwards-counter", "seq"),
        ("budget", "more than 5 frames"),
        ("silence", "no frame from the runner"),
    ],
)
def test_a_hostile_runner_is_killed_at_its_first_bad_frame(
    recording: tuple[bytes, object], mode: str, why: str
) -> None:
    data, parsed = recording
    transport = Hostile(mode)
    session = SandboxSession(data, parsed, transport, timeout=3.0, budget=5)  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(SandboxError, match=why) as failure:
        session.stats()
    assert failure.value.exit_code == 5
    assert time.monotonic() - started < 10
    assert transport.process is not None and transport.process.poll() is not None  # killed
    assert not transport.directory.exists()  # its pipes are gone
    with pytest.raises(SandboxError, match="closed"):
        session.stats()


def test_negative_control_the_real_runner_answers(recording: tuple[bytes, object]) -> None:
    data, parsed = recording
    with SandboxSession(data, parsed, timeout=60.0) as session:  # type: ignore[arg-type]
        stats = session.stats()
    assert stats["instructions"] > 0 and stats["depth_mismatches"] == 0
