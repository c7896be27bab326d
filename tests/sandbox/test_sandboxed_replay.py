"""`sealtrace replay --sandbox`: the receipt comes back as fixed frames and says what the
in-process replay says.

- a bit-exact run gets the same receipt (only the timing differs), through the runner's
  frames locally and from a hardened rootless Podman container through the CLI;
- a run that diverges (a file's existence read through ctypes and printed) names the same event,
  expected call, location and first differing byte; only the program's own output bytes
  stay inside (null), and the exit status is 3 either way;
- a runner that claims another event stream, or a divergence without its location, is
  killed (exit 5); a missing Podman service is exit 5.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sealtrace.agent import SandboxError
from sealtrace.agent._sandbox_client import LocalTransport, SandboxClient
from sealtrace.sandbox._replay_process import load_recording, replay_location
from sealtrace.sandbox.questions import InspectStack, Replay

from ..conftest import KeyFiles, run_cli
from .replaying import PYTHON, record, replay, write_app

EXACT_APP = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
(count,) = db.execute("select count(*) from items where price > ?", (2,)).fetchone()
print("items over 2:", count, "at", time.time_ns() > 0)
"""
# Behind the boundary, and the same in every replay: the file is gone after the run.
BEHIND_APP = """
import ctypes, sys
libc = ctypes.CDLL(None)
print("recorded argv", sys.argv[1])
print("behind the boundary", libc.access(sys.argv[1].encode(), 0))
"""


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeyFiles, Path, Path]:
    from sealtrace.proxy import write_keypair

    work = tmp_path_factory.mktemp("sandboxed-replay")
    keys = KeyFiles(*write_keypair(work / "keys", "replay"))
    db = work / "items.db"
    with sqlite3.connect(db) as conn:
        conn.execute("create table items (price real)")
        conn.executemany("insert into items values (?)", [(1.5,), (2.5,), (9.0,)])
    conn.close()
    exact = record(keys, work / "exact", [PYTHON, str(write_app(work / "a", EXACT_APP)), str(db)])
    assert exact.proc.returncode == 0, exact.proc.stderr.decode()
    db.unlink()  # nothing the run read is left
    marker = work / "marker"
    marker.write_text("here during the run")
    app = write_app(work / "c", BEHIND_APP)
    behind = record(keys, work / "behind", [PYTHON, str(app), str(marker)])
    assert behind.proc.returncode == 0, behind.proc.stderr.decode()
    marker.unlink()
    return keys, work / "exact", work / "behind"


def _without_timing(receipt: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in receipt.items() if k != "seconds"}


def test_a_bit_exact_receipt_through_the_frames_is_the_in_process_one(
    recordings: tuple[KeyFiles, Path, Path],
) -> None:
    keys, exact, _behind = recordings
    plain = replay_location(str(exact), keys.identity).data
    data, parsed = load_recording(str(exact), keys.identity)
    with SandboxClient(data, parsed, receipt_only=True) as box:
        boxed = box.replay(Replay())
    assert plain["status"] == "bit-exact" and plain["events_replayed"] > 3
    assert _without_timing(boxed) == _without_timing(plain)
    assert boxed["seconds"] > 0


def test_a_divergence_through_the_frames_names_what_the_in_process_one_names(
    recordings: tuple[KeyFiles, Path, Path],
) -> None:
    keys, _exact, behind = recordings
    plain = replay_location(str(behind), keys.identity).data
    data, parsed = load_recording(str(behind), keys.identity)
    with SandboxClient(data, parsed, receipt_only=True) as box:
        boxed = box.replay(Replay())
    assert plain["status"] == boxed["status"] == "diverged"
    div, boxed_div = plain["divergence"], boxed["divergence"]
    assert div["app_location"].endswith("c/app.py:5") and div["expected"].startswith("stdout.write")
    # What only the running program knew stays in the sandbox.
    assert boxed_div.pop("actual_bytes") is None and div.pop("actual_bytes")
    assert boxed_div == div
    assert _without_timing(boxed) == _without_timing(plain)


HOSTILE_RECEIPT = textwrap.dedent(
    """
    import dataclasses, os, sys
    from sealtrace.sandbox.protocol import (
        FRAME_SIZE, DivergenceFlags, Frame, Op, ReplayStatus, decode, encode)
    from sealtrace.sandbox._provenance import keyed_digest
    from sealtrace.proxy._stream import parse_stream
    mode = sys.argv[1]
    inp, out = os.open(sys.argv[2], os.O_RDONLY), os.open(sys.argv[3], os.O_WRONLY)
    seq = 0
    def send(*frames):
        global seq
        for frame in frames:
            seq += 1
            os.write(out, encode(dataclasses.replace(frame, seq=seq)))
    def read(n):
        data = b""
        while len(data) < n:
            data += os.read(inp, n - len(data)) or sys.exit(0)
        return data
    send(Frame(Op.HELLO, a=1, d=FRAME_SIZE))
    load = decode(read(FRAME_SIZE))
    stream = parse_stream(read(load.f)).digest.hex().encode()
    genuine = bytes.fromhex(keyed_digest(load.digest, "stream", stream))
    send(Frame(Op.LOADED, d=1), Frame(Op.DONE, a=1, b=load.seq))
    request = decode(read(FRAME_SIZE))
    if mode == "other-stream":
        send(Frame(Op.RECEIPT, a=3, b=3, e=ReplayStatus.BIT_EXACT, digest=bytes(32)),
             Frame(Op.DONE, a=1, b=request.seq))
    else:  # "diverged-nowhere"
        send(Frame(Op.RECEIPT, a=3, b=3, e=ReplayStatus.DIVERGED, digest=genuine),
             Frame(Op.DIVERGENCE, a=1, e=DivergenceFlags.EXPECTED_EVENT),
             Frame(Op.DONE, a=2, b=request.seq))
    read(1)
    """
)


@pytest.mark.parametrize(
    ("mode", "why"),
    [("other-stream", "another event stream"), ("diverged-nowhere", "without its divergence")],
)
def test_a_runner_lying_about_the_replay_is_killed(
    recordings: tuple[KeyFiles, Path, Path], mode: str, why: str
) -> None:
    keys, exact, _behind = recordings
    data, parsed = load_recording(str(exact), keys.identity)
    transport = LocalTransport()
    transport.argv = [sys.executable, "-c", HOSTILE_RECEIPT, mode]
    box = SandboxClient(data, parsed, transport, timeout=20, receipt_only=True)
    with pytest.raises(SandboxError, match=why) as raised:
        box.replay(Replay())
    assert raised.value.exit_code == 5
    assert transport.process is not None and transport.process.poll() is not None
    assert not transport.directory.exists()


def test_a_receipt_only_session_answers_nothing_else(
    recordings: tuple[KeyFiles, Path, Path],
) -> None:
    from sealtrace.sandbox._errors import QueryError

    keys, exact, _behind = recordings
    data, parsed = load_recording(str(exact), keys.identity)
    with SandboxClient(data, parsed, receipt_only=True) as box:
        with pytest.raises(QueryError):
            box.inspect_stack(InspectStack(at="end"))
        assert box.replay(Replay())["status"] == "bit-exact"  # and the session goes on


@pytest.mark.podman
def test_replay_sandbox_through_the_cli_agrees_with_in_process(
    recordings: tuple[KeyFiles, Path, Path],
    podman_service: tuple[Any, Any, str],
    replay_image: str,
) -> None:
    keys, exact, behind = recordings
    env = {"SEALTRACE_PODMAN_SOCKET": podman_service[2]}
    for location, code in ((exact, 0), (behind, 3)):
        plain_proc, plain = replay(keys, location)
        boxed = run_cli(
            "replay", str(location), "--identity", str(keys.identity_path), "--sandbox",
            "--json", env=env,
        )  # fmt: skip
        assert plain_proc.returncode == boxed.returncode == code, boxed.stderr.decode()
        boxed_receipt = json.loads(boxed.stdout)
        assert plain is not None
        if code:
            assert boxed_receipt["divergence"].pop("actual_bytes") is None
            plain["divergence"].pop("actual_bytes")
            assert boxed.stderr.decode().count("sealtrace: error:") == 1
            assert "app.py:5" in boxed.stderr.decode()
        assert _without_timing(boxed_receipt) == _without_timing(plain)
    text = run_cli("replay", str(exact), "--identity", str(keys.identity_path), "--sandbox",
                   env=env)  # fmt: skip
    assert text.returncode == 0 and b"replay      bit-exact" in text.stdout
    nowhere = run_cli(
        "replay", str(exact), "--identity", str(keys.identity_path), "--sandbox",
        env={"SEALTRACE_PODMAN_SOCKET": "unix:///nonexistent.sock"},
    )  # fmt: skip
    assert nowhere.returncode == 5 and b"no rootless Podman service" in nowhere.stderr
    assert os.listdir(exact)  # the stored recording is untouched


@pytest.mark.parametrize("command", ["replay", "trace", "flows", "inspect-stack"])
def test_every_replaying_command_goes_to_the_sandbox_by_default(
    recordings: tuple[KeyFiles, Path, Path], command: str
) -> None:
    """Without a flag, a command that replays uses the sandbox: with no Podman service to
    reach it fails there (exit 5) and never runs the recorded code here. --in-process runs
    it here (the negative control)."""
    keys, exact, _behind = recordings
    questions = {
        "replay": [],
        "trace": ["--at", "end", "--var", "x"],
        "flows": ["--from", "event:0"],
        "inspect-stack": ["--at", "end"],
    }
    question = questions[command]
    base = [command, str(exact), "--identity", str(keys.identity_path), *question]
    nowhere = {"SEALTRACE_PODMAN_SOCKET": "unix:///nonexistent.sock"}
    boxed = run_cli(*base, env=nowhere)
    assert boxed.returncode == 5, boxed.stderr.decode()
    assert b"no rootless Podman service" in boxed.stderr
    here = run_cli(*base, "--in-process", env=nowhere)
    assert here.returncode in (0, 2), here.stderr.decode()  # answered, or a bad question
    assert b"Podman" not in here.stderr


@pytest.mark.podman
def test_the_cli_starts_and_stops_a_podman_service_of_its_own(
    recordings: tuple[KeyFiles, Path, Path], podman_service: tuple[Any, Any, str],
    replay_image: str,
) -> None:  # fmt: skip
    """A new user with rootless Podman set up but no service running: the command starts the
    sandbox user's service for itself, replays, and leaves nothing running."""
    keys, exact, _behind = recordings
    _client, user, _socket = podman_service
    run_dir = Path(f"/run/user/{user.pw_uid}/podman")
    if (run_dir / "podman.sock").exists():
        pytest.fail("a Podman service runs on the default socket: this test needs none")
    env = {k: v for k, v in os.environ.items() if k != "SEALTRACE_PODMAN_SOCKET"}
    env["SEALTRACE_REPLAY_IMAGE"] = replay_image  # built once for the session
    with subprocess.Popen(
        [str(Path(sys.executable).with_name("sealtrace")), "replay", str(exact), "--identity",
         str(keys.identity_path), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    ) as cli:  # fmt: skip
        out, err = cli.communicate(timeout=300)
    assert cli.returncode == 0, err.decode()
    assert json.loads(out)["status"] == "bit-exact"
    # Its service is named for the command's process (other tests' commands may run beside it).
    mine = f"sealtrace-cli-{cli.pid}.sock"
    assert not (run_dir / mine).exists()
    services = subprocess.run(["pgrep", "-f", mine], capture_output=True, text=True)
    assert services.stdout.strip() == "", services.stdout
