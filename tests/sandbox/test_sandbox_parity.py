"""Sandbox parity (issue 22, item 6): a sandboxed replay sees the file-system facts the
recording served, and a divergence there names what an in-process one names.

- A Flask test-client request replays bit-exact in-process and in a session container.
  werkzeug's client looks its own version up (importlib.metadata), which stats each
  sys.path directory and lists it unless it listed one of the same mtime before. The
  replaying process had listed them itself, checking the manifest, on the container's file
  system, whose mtimes are not the recording's: it listed again where the recording did
  not (expected os.stat, got os.listdir). Both sides now forget those listings before the
  program starts. The negative control needs no container: a sys.path directory touched
  between the run and the replay is what the container's view is.
- A program that diverges inside library code gets the same text, exit 3, from `replay`
  and from `trace`, in-process and in the sandbox: the event, the expected call, the call
  made and its Python location, the application's and the innermost (a standard library
  file, named by the agent from its path's keyed digest).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from sealtrace.agent._sandbox_client import SandboxClient
from sealtrace.sandbox import DivergenceError
from sealtrace.sandbox._replay_process import load_recording, replay_location
from sealtrace.sandbox.questions import Replay, Trace

from ..conftest import KeyFiles, run_cli
from .replaying import PYTHON, assert_bit_exact, record, replay, write_app

FLASK_APP = """
import json
import sys

from flask import Flask, jsonify, request

app = Flask(__name__)


@app.post("/total")
def total():
    body = request.get_json()
    return jsonify({"total": sum(item["price"] * item["qty"] for item in body["items"])})


client = app.test_client()  # its requests carry werkzeug's version, from importlib.metadata
print(client.post("/total", json=json.loads(sys.stdin.read())).get_json()["total"])
"""

# The marker's existence is read behind the boundary (ctypes), so a replay after it is gone
# takes the other branch: importlib.metadata stats sys.path[0] where the run listed it.
DIVERGING_APP = """
import ctypes
import importlib.metadata
import os
import sys

libc = ctypes.CDLL(None)
marker = sys.argv[1]
present = libc.access(marker.encode(), 0) == 0
total = len(marker) * 2
if present:
    os.listdir(sys.path[0])
else:
    importlib.metadata.version("werkzeug")
print(total)
"""
STDIN = b'{"items": [{"price": 2.5, "qty": 4}, {"price": 1.25, "qty": 2}]}\n'


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from sealtrace.proxy import write_keypair

    work = tmp_path_factory.mktemp("parity")
    keys = KeyFiles(*write_keypair(work / "keys", "parity"))
    # A directory on sys.path that is not the interpreter's: it stands for the paths a
    # container sees with other mtimes (or not at all).
    extra = work / "extra"
    extra.mkdir()
    flask = record(
        keys, work / "flask", [PYTHON, str(write_app(work / "f", FLASK_APP))],
        env={"PYTHONPATH": str(extra)}, stdin=STDIN,
    )  # fmt: skip
    assert flask.proc.returncode == 0, flask.proc.stderr.decode()
    assert flask.proc.stdout == b"12.5\n"
    marker = work / "marker"
    marker.write_text("here during the run")
    app = write_app(work / "d", DIVERGING_APP)
    diverging = record(keys, work / "diverging", [PYTHON, str(app), str(marker)])
    assert diverging.proc.returncode == 0, diverging.proc.stderr.decode()
    marker.unlink()
    return {"keys": keys, "flask": work / "flask", "extra": extra,
            "diverging": work / "diverging", "app": str(app)}  # fmt: skip


def test_a_directory_seen_otherwise_here_does_not_change_the_replay(runs: dict[str, Any]) -> None:
    keys, location = runs["keys"], runs["flask"]
    callees = [e.callee for e in load_recording(str(location), keys.identity)[1].events]
    # The program stats and lists sys.path's directories itself: the recorder kept none.
    assert {"os.stat", "os.listdir"} <= set(callees)
    os.utime(runs["extra"], (1_000_000_000, 1_000_000_000))  # an mtime the run never saw
    assert_bit_exact(*replay(keys, location))


def _divergence_line(proc: Any) -> str:
    lines = [ln for ln in proc.stderr.decode().splitlines() if ln.startswith("sealtrace: error:")]
    assert len(lines) == 1, proc.stderr.decode()
    return lines[0]


def test_a_divergence_in_library_code_names_the_same_place_through_the_frames(
    runs: dict[str, Any],
) -> None:
    keys, location, app = runs["keys"], runs["diverging"], runs["app"]
    plain = replay_location(str(location), keys.identity).data["divergence"]
    assert plain["app_location"] == f"{app}:14"
    assert plain["location"].endswith(f"importlib{os.sep}metadata{os.sep}__init__.py:818")
    assert plain["expected"].startswith("os.listdir(args ")
    assert plain["actual"] == plain["expected"].replace("os.listdir", "os.stat")
    data, parsed = load_recording(str(location), keys.identity)
    with SandboxClient(data, parsed, receipt_only=True) as box:
        assert box.replay(Replay())["divergence"] == plain
    with pytest.raises(DivergenceError) as raised, SandboxClient(data, parsed) as box:
        box.trace(Trace(at=f"{app}:15", var="total"))
    assert raised.value.divergence == plain
    here = run_cli(
        "trace", str(location), "--identity", str(keys.identity_path), "--in-process",
        "--at", f"{app}:15", "--var", "total",
    )  # fmt: skip
    assert here.returncode == 3
    assert _divergence_line(here) == f"sealtrace: error: {raised.value}"


@pytest.mark.podman
def test_the_sandbox_replays_and_diverges_as_in_process(
    runs: dict[str, Any], podman_service: tuple[Any, Any, str], replay_image: str
) -> None:
    keys = runs["keys"]
    env = {"SEALTRACE_PODMAN_SOCKET": podman_service[2]}
    base = ["--identity", str(keys.identity_path)]
    # The Flask request: bit-exact in both, the same receipt.
    here_proc, here = replay(keys, runs["flask"])
    boxed_proc = run_cli("replay", str(runs["flask"]), *base, "--json", env=env)
    boxed = json.loads(boxed_proc.stdout)
    assert_bit_exact(here_proc, here)
    assert boxed_proc.returncode == 0, boxed_proc.stderr.decode()
    assert {k: v for k, v in boxed.items() if k != "seconds"} == {
        k: v for k, v in here.items() if k != "seconds"
    }
    # The diverging program: the same line, exit 3, from replay and from trace.
    at = ["--at", f"{runs['app']}:15", "--var", "total"]
    for command, question in (("replay", []), ("trace", at)):
        where = [command, str(runs["diverging"]), *base, *question]
        here_proc = run_cli(*where, "--in-process", env=env)
        boxed_proc = run_cli(*where, env=env, timeout=300)
        assert here_proc.returncode == boxed_proc.returncode == 3, boxed_proc.stderr.decode()
        line = _divergence_line(boxed_proc)
        assert line == _divergence_line(here_proc)
        assert "os.stat(args " in line and "importlib/metadata/__init__.py:818)" in line
