"""A sandbox booted before its session: the runner started and waiting, its HELLO checked, no
recording and no key in it. A session takes it over once and starts at LOAD; an agent that
leaves without a session ends it; the answers are those of a sandbox started for the session.
(The runner here is a local child process; tests/e2e boots real containers.)"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from sealtrace.agent import SandboxClient, SandboxError
from sealtrace.agent._sandbox_client import BootedSandbox, LocalTransport
from sealtrace.sandbox import load_recording
from sealtrace.sandbox.questions import InspectStack

from ..conftest import KeyFiles
from ..sandbox.replaying import record, write_app


@pytest.fixture
def recording(keys: KeyFiles, tmp_path: Path) -> tuple[bytes, object]:
    app = write_app(tmp_path / "app", "def f(a, b):\n    return a * b\n\nprint(f(6, 7))\n")
    recorded = record(keys, tmp_path / "rec", [sys.executable, str(app)])
    assert recorded.proc.returncode == 0, recorded.proc.stderr
    return load_recording(str(tmp_path / "rec"), keys.identity)


def test_a_booted_sandbox_serves_one_session_as_a_fresh_one_would(
    recording: tuple[bytes, object],
) -> None:
    data, parsed = recording
    booted = BootedSandbox(LocalTransport())
    process = booted.transport.process  # type: ignore[attr-defined]
    assert process is not None and process.poll() is None  # started, waiting
    assert not list(booted.transport.directory.iterdir())  # the FIFOs' names are gone
    question = InspectStack(at="app.py:2")
    with SandboxClient(data, parsed, booted=booted) as box:
        warm = box.inspect_stack(question)
        assert box.transport is booted.transport
        with pytest.raises(SandboxError, match="already taken"):
            SandboxClient(data, parsed, booted=booted)  # one runner, one session
    assert process.poll() is not None  # the session's end ended it
    with SandboxClient(data, parsed) as fresh:  # control: started for the session
        assert _shown(fresh.inspect_stack(question)) == _shown(warm)


def _shown(stack: Any) -> Any:
    """Everything but the digests, which are keyed per session."""
    return [(f["file"], f["line"], f["function"],
             [(v["name"], v["tag"], v["value"]["type"], v["value"]["repr"]) for v in f["locals"]])
            for f in stack["frames"]]  # fmt: skip


def test_a_booted_sandbox_nobody_took_is_ended(recording: tuple[bytes, object]) -> None:
    booted = BootedSandbox(LocalTransport())
    process = booted.transport.process  # type: ignore[attr-defined]
    directory = booted.transport.directory
    booted.close()
    assert process.poll() is not None and not directory.exists()
    data, parsed = recording
    with pytest.raises(SandboxError):
        SandboxClient(data, parsed, booted=booted)
