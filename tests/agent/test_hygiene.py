"""The processes that hold keys dump no core and cannot be read by another process of their
user: harden_process(), which `sealtrace agent` and `sealtrace server serve` call first. And
the keys an agent holds are wiped after use (issue 21, finding 10): the session's recording
key once the reader has its body cipher, whatever happens next, and the session's digest key
(and the LOAD frame that carried it) when the sandbox client closes. Every Secret made is kept
alive by the `secrets_made` fixture, so only an explicit wipe can have zeroed it."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sealtrace.agent._sandbox_client import SandboxClient
from sealtrace.agent._serving import Assignment, serve
from sealtrace.proxy.format import (
    LocalDirStore,
    generate_identity,
    read_header,
    seal_session_key,
    unwrap_recording_key,
)

from ..conftest import KeyFiles, wiped
from ..sandbox.replaying import record, write_app

PROBE = """
import ctypes, resource
{call}
libc = ctypes.CDLL(None, use_errno=True)
print(libc.prctl(3, 0, 0, 0, 0), resource.getrlimit(resource.RLIMIT_CORE)[1])
"""  # 3 is PR_GET_DUMPABLE


def _probe(call: str) -> str:
    code = PROBE.format(call=call)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.split()  # type: ignore[return-value]  # fmt: skip


def test_a_hardened_process_is_not_dumpable_and_dumps_no_core() -> None:
    assert _probe("from sealtrace.agent import harden_process; harden_process()") == ["0", "0"]


def test_negative_control_an_ordinary_process_is_dumpable() -> None:
    dumpable, _core = _probe("")
    assert dumpable == "1"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, KeyFiles]:
    """A real recording of a small program, and the run's keys."""
    from sealtrace.proxy import write_keypair

    work = tmp_path_factory.mktemp("hygiene")
    keys = KeyFiles(*write_keypair(work / "keys", "run"))
    app = write_app(work / "app", "import time\nprint(time.time() > 0)\n")
    done = record(keys, work / "store", [sys.executable, str(app)], "--app-root", str(app.parent))
    assert done.proc.returncode == 0, done.proc.stderr.decode()
    return work / "store", keys


class _Server:
    def __init__(self) -> None:
        self.states: list[str] = []

    def state(self, agent: str, session: str, status: str, detail: str | None = None) -> None:
        self.states.append(status)

    def next(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"id": 0, "request": {"kind": "close"}}


class _Sandbox:
    def __init__(self, data: bytes, parsed: Any) -> None:
        self.events = len(parsed.events)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("fails", [False, True], ids=["served", "sandbox-fails"])
def test_serving_a_session_wipes_the_recording_key(
    recorded: tuple[Path, KeyFiles], secrets_made: list[Any], fails: bool
) -> None:
    store, keys = recorded
    source = LocalDirStore(store)
    header, _ = read_header(source, source.list())
    agent = generate_identity()
    with unwrap_recording_key(header.wrapped_key, keys.identity, header.run_id) as key:
        blob = seal_session_key(key, agent.recipient, session_id="sess-1", run_id=header.run_id,
                                store=str(store), wrapped_key=header.wrapped_key)  # fmt: skip
    assignment = Assignment.parse({"session_id": "sess-1", "run_id": header.run_id,
                                   "store": str(store),
                                   "sealed_key": base64.b64encode(blob).decode()})  # fmt: skip
    opened: list[_Sandbox] = []

    def open_sandbox(data: bytes, parsed: Any) -> _Sandbox:
        if fails:
            raise RuntimeError("the sandbox would not start")
        opened.append(_Sandbox(data, parsed))
        return opened[-1]

    server = _Server()
    secrets_made.clear()
    ended = serve(assignment, agent, "agent-1", server, open_sandbox)  # type: ignore[arg-type]
    assert ended == ("failed" if fails else "closed"), server.states
    assert (opened[0].events > 0) if not fails else not opened  # the recording was read
    # The recording key from the sealed blob, and the reader's body key.
    assert [len(secret) for secret in secrets_made] == [32, 32]
    assert wiped(secrets_made)


def test_the_digest_key_is_wiped_when_the_sandbox_client_closes(
    recorded: tuple[Path, KeyFiles], secrets_made: list[Any]
) -> None:
    from sealtrace.sandbox._replay_process import load_recording

    store, keys = recorded
    data, parsed = load_recording(str(store), keys.identity)
    secrets_made.clear()
    with SandboxClient(data, parsed, timeout=60.0) as client:  # the real runner, a child
        key = client.key
        assert any(key.view())  # in use: the runner's digests match the agent's dictionary
        frames = [secret for secret in secrets_made if secret is not key]
        assert frames and wiped(frames)  # the LOAD frame that carried it, wiped once written
        stack = client.stats()
        assert stack["instructions"] > 0
    assert wiped(secrets_made)
