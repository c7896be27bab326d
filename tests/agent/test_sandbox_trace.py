"""A trace asked through the runner's fixed frames (the sandbox client, its runner in a local
process) is the tree the in-process answerer builds: the runner decides where the tree expands
each step and where it was cut, and the frames say so (protocol version 3), so the agent
rebuilds it without applying a depth rule of its own."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from sealtrace.agent._sandbox_client import LocalTransport, SandboxClient
from sealtrace.sandbox import Inquiry
from sealtrace.sandbox.questions import Trace

from ..conftest import KeyFiles
from ..sandbox.replaying import record, write_app

APP = """
import json
import operator
import sys

data = json.loads(sys.stdin.read())
row = tuple(data["row"])
price = operator.itemgetter(1)(row)
parts = []
for n in data["n"]:
    parts.append(price * n)
total = round(sum(parts) + price * 0.1, 2)
print(total)
"""


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, Any]:
    from sealtrace.proxy import write_keypair
    from sealtrace.sandbox._replay_process import load_recording

    work = tmp_path_factory.mktemp("sandbox-trace")
    keys = KeyFiles(*write_keypair(work / "keys", "t"))
    app = write_app(work / "app", APP)
    done = record(
        keys, work / "store", [sys.executable, str(app)], "--app-root", str(app.parent),
        stdin=b'{"row": ["widget", 19.99], "n": [1, 2, 3]}\n',
    )  # fmt: skip
    assert done.proc.returncode == 0, done.proc.stderr.decode()
    return load_recording(str(work / "store"), keys.identity)


def _shape(node: dict[str, Any]) -> tuple[Any, ...]:
    origin = node["origin"] or {}
    return (
        node["counter"],
        node["line"],
        node["op"].split(" ")[0],
        origin.get("kind"),
        tuple(_shape(child) for child in node["inputs"]),
    )


@pytest.mark.parametrize("depth", [1, 2, 64])
def test_the_sandboxed_tree_is_the_in_process_tree(
    recording: tuple[bytes, Any], depth: int
) -> None:
    data, parsed = recording
    question = Trace(at="app.py:13", var="total", depth=depth)
    with Inquiry(data, parsed) as inquiry:
        local = inquiry.trace(question)
        local_cuts = dict(inquiry.last_cuts)
    with SandboxClient(data, parsed, LocalTransport(), timeout=120.0) as session:
        remote = session.trace(question)
        remote_cuts = dict(session.last_cuts)
    assert _shape(remote["root"]) == _shape(local["root"])
    assert remote["query"]["truncated"] == local["query"]["truncated"] == (depth < 64)
    assert remote_cuts == local_cuts
    assert bool(local_cuts) == (depth < 64)
