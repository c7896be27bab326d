"""The session's digest key never appears on a command line (/proc/*/cmdline is readable by
every process on the machine): a replay pass receives its query through a pipe."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

import sealtrace.sandbox._replay_process as replay_process
from sealtrace.sandbox.questions import Trace

from ..conftest import KeyFiles
from .test_provenance_story import story

__all__ = ["story"]


def test_no_pass_carries_the_digest_key_in_its_argv(
    story: tuple[Path, KeyFiles], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sealtrace.sandbox import Inquiry, load_recording

    store, keys = story
    data, parsed = load_recording(str(store), keys.identity)
    key = bytes(range(32))
    argvs: list[list[str]] = []
    real = subprocess.Popen

    def spy(argv: list[str], *args: Any, **kwargs: Any) -> Any:
        argvs.append([str(a) for a in argv])
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(replay_process.subprocess, "Popen", spy)
    with Inquiry(data, parsed, digest_key=key) as inquiry:
        doc = inquiry.trace(Trace(at="routes/orders.py:4", var="order.total_price", depth=2))
    assert doc["query"]["value"]["repr"] == "0.0"  # the passes got their queries
    assert len(argvs) >= 2
    assert not [a for argv in argvs for a in argv if key.hex() in a]
