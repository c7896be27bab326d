"""What one sandbox session can carry from the runner is bounded as a whole, not only per
answer: a number of questions and a number of frames (docs/protocol.md states the channel's
capacity from them). Past either, the session ends with exit 5."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sealtrace.agent import SandboxClient, SandboxError
from sealtrace.sandbox import load_recording
from sealtrace.sandbox.questions import InspectStack, Replay

from ..conftest import KeyFiles
from ..sandbox.replaying import record, write_app


@pytest.fixture
def recording(keys: KeyFiles, tmp_path: Path) -> tuple[bytes, object]:
    app = write_app(tmp_path / "app", "def f(a, b):\n    return a * b\n\nprint(f(6, 7))\n")
    recorded = record(keys, tmp_path / "rec", [sys.executable, str(app)])
    assert recorded.proc.returncode == 0, recorded.proc.stderr
    return load_recording(str(tmp_path / "rec"), keys.identity)


def test_a_session_asks_at_most_its_questions(recording: tuple[bytes, object]) -> None:
    data, parsed = recording
    with SandboxClient(data, parsed, questions=3) as box:  # LOAD is the first
        assert box.replay(Replay())["status"] == "bit-exact"
        assert box.replay(Replay())["status"] == "bit-exact"
        with pytest.raises(SandboxError, match="questions") as raised:
            box.replay(Replay())
        assert raised.value.exit_code == 5
        assert box.closed


def test_a_session_carries_at_most_its_frames(recording: tuple[bytes, object]) -> None:
    data, parsed = recording
    with SandboxClient(data, parsed) as box:  # negative control: the default bound
        frames = len(box._ask_question(InspectStack(at="app.py:2")))
    assert frames >= 3  # the frame of f and of the module, f's locals
    # LOAD's answer takes one frame of the session's: the stack's no longer fits.
    with (
        SandboxClient(data, parsed, session_frames=frames) as box,
        pytest.raises(SandboxError, match="frames"),
    ):
        box.inspect_stack(InspectStack(at="app.py:2"))
