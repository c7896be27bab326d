"""`--at return:FUNC[#N]` and `return:FILE:FUNC[#N]`: stop where a function returns, its frame
whole (issue 22, item 5). A `main()`-style program keeps its values in main's locals, which
`--at end` (the module's last instruction, after main's frame is gone) cannot see.

Each claim is asked of a program recorded with the real `sealtrace record`, in-process and
through the sandbox's fixed frames (a runner as a child process; the hardened container in
the podman tier).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sealtrace.sandbox.questions import InspectStack, Trace

from ..conftest import KeyFiles, run_cli
from .replaying import record, write_app

APP = """
import sys

from helpers import run


def scale(values, factor):
    out = []
    for v in values:
        out.append(v * factor)
    return out


def main():
    factor = len(sys.argv[1])
    prices = scale([10, 20], factor)
    extras = scale([5], factor + 1)
    total = sum(prices) + sum(extras)
    label = run(total)
    print(label)


main()
"""

HELPERS = """
def run(total):
    note = "total"
    return f"{note} {total}"


def scale(x):
    return x
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, KeyFiles]:
    from sealtrace.proxy import write_keypair

    work = tmp_path_factory.mktemp("returns")
    keys = KeyFiles(*write_keypair(work / "keys", "returns"))
    app = write_app(work / "app", APP)
    write_app(work / "app", HELPERS, "helpers.py")
    recorded = record(
        keys, work / "store", [sys.executable, str(app), "abc"], "--app-root", str(app.parent)
    )
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    assert recorded.proc.stdout == b"total 110\n"
    return work / "store", keys


def _ask(program: tuple[Path, KeyFiles], *args: str) -> Any:
    store, keys = program
    command, *rest = args
    proc = run_cli(
        command, str(store), "--identity", str(keys.identity_path), "--in-process", *rest
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout) if "--json" in rest else proc.stdout.decode()


def _locals(frame: dict[str, Any]) -> dict[str, Any]:
    return {v["name"]: v for v in frame["locals"]}


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node["inputs"]:
        yield from _nodes(child)


def test_return_main_sees_mains_locals_where_end_cannot(program: tuple[Path, KeyFiles]) -> None:
    stack = _ask(program, "inspect-stack", "--at", "return:main", "--json")
    top = stack["frames"][0]
    assert top["function"] == "main" and top["line"] == 20  # print(label): main's last line
    seen = _locals(top)
    assert {"factor", "prices", "extras", "total", "label"} <= set(seen)
    assert seen["total"]["value"]["repr"] == "110" and seen["total"]["tag"] > 0
    assert seen["label"]["value"]["repr"] == "'total 110'"
    # Negative control: at the end, main's frame is gone and its locals with it.
    end = _ask(program, "inspect-stack", "--at", "end", "--json")
    assert [f["function"] for f in end["frames"]] == ["<module>"]
    assert "total" not in _locals(end["frames"][0])


def test_trace_at_return_main_follows_a_local_to_its_origins(
    program: tuple[Path, KeyFiles],
) -> None:
    doc = _ask(program, "trace", "--at", "return:main", "--var", "total", "--json")
    assert doc["query"]["stopped_at"]["function"] == "main"
    assert doc["root"]["value"]["repr"] == "110" and doc["query"]["truncated"] is False
    origins = {(n["origin"] or {}).get("kind") for n in _nodes(doc["root"])}
    assert {"argv", "constant"} <= origins
    text = _ask(program, "trace", "--at", "return:main", "--var", "total")
    assert "◉ Command-line argument" in text
    # Negative control: the same question at the end names nothing.
    store, keys = program
    end = run_cli(
        "trace", str(store), "--identity", str(keys.identity_path), "--in-process",
        "--at", "end", "--var", "total",
    )  # fmt: skip
    assert end.returncode == 2 and b"total is not defined" in end.stderr


def test_hash_n_is_the_nth_return_and_a_file_narrows_the_function(
    program: tuple[Path, KeyFiles],
) -> None:
    first = _ask(program, "inspect-stack", "--at", "return:app.py:scale", "--json")
    second = _ask(program, "inspect-stack", "--at", "return:app.py:scale#2", "--json")
    assert _locals(first["frames"][0])["out"]["value"]["repr"] == "[30, 60]"
    assert _locals(second["frames"][0])["out"]["value"]["repr"] == "[20]"
    assert first["query"]["counter"] < second["query"]["counter"]
    # The short name of a function in another recorded file, and its locals there.
    helper = _ask(program, "inspect-stack", "--at", "return:helpers.py:run", "--json")
    assert helper["frames"][0]["file"].endswith("helpers.py")
    assert _locals(helper["frames"][0])["note"]["value"]["repr"] == "'total'"
    same = _ask(program, "inspect-stack", "--at", "return:run", "--json")
    assert same["query"]["counter"] == helper["query"]["counter"]


@pytest.mark.parametrize(
    ("at", "says"),
    [
        ("app.py:main", "write return:app.py:main"),  # the FILE:FUNC form: refused, pointed
        ("main", "return:FUNC"),
        ("return:", "expected return:FUNC"),
        ("return:main#0", "returns count from 1"),
        ("return:app.py:12", "expected return:FUNC"),
        ("return:nope", "no function nope in the recorded sources"),
        ("return:scale", "scale names several functions"),  # app.py's and helpers.py's
        ("return:helpers.scale", "no function helpers.scale"),
        ("return:main#2", "main returned fewer than 2 time(s)"),
        ("return:elsewhere.py:main", "not a recorded source file"),
    ],
)
def test_every_other_form_is_a_usage_error(
    program: tuple[Path, KeyFiles], at: str, says: str
) -> None:
    store, keys = program
    proc = run_cli(
        "inspect-stack", str(store), "--identity", str(keys.identity_path), "--in-process",
        "--at", at,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr.decode()
    assert says in proc.stderr.decode()
    assert b"Traceback" not in proc.stderr


def test_a_name_in_several_files_is_refused_with_each_choice(
    program: tuple[Path, KeyFiles],
) -> None:
    store, keys = program
    proc = run_cli(
        "trace", str(store), "--identity", str(keys.identity_path), "--in-process",
        "--at", "return:scale", "--var", "out",
    )  # fmt: skip
    said = proc.stderr.decode()
    assert proc.returncode == 2 and "app.py:scale" in said and "helpers.py:scale" in said


def test_the_sandbox_stops_at_the_same_return_with_the_same_locals(
    program: tuple[Path, KeyFiles],
) -> None:
    """Through the pipe protocol: the function's name travels in the request's text."""
    from sealtrace.agent._sandbox_client import SandboxClient
    from sealtrace.sandbox import Inquiry, QueryError, load_recording

    store, keys = program
    data, parsed = load_recording(str(store), keys.identity)
    with Inquiry(data, parsed) as plain, SandboxClient(data, parsed) as boxed:
        for at in ("return:main", "return:app.py:scale#2", "return:run"):
            mine, theirs = (
                plain.inspect_stack(InspectStack(at)),
                boxed.inspect_stack(InspectStack(at)),
            )
            assert theirs["query"]["counter"] == mine["query"]["counter"]
            assert [(v["name"], v["tag"]) for v in theirs["frames"][0]["locals"]] == [
                (v["name"], v["tag"]) for v in mine["frames"][0]["locals"]
            ]
        total = _locals(boxed.inspect_stack(InspectStack("return:main"))["frames"][0])["total"]
        assert total["value"]["repr"] == "110"
        traced = boxed.trace(Trace(at="return:main", var="total"))
        assert (
            traced["root"]["counter"]
            == plain.trace(Trace("return:main", "total"))["root"]["counter"]
        )
        assert traced["query"]["stopped_at"]["function"] == "main"
        with pytest.raises(QueryError, match="no function nope"):
            boxed.inspect_stack(InspectStack("return:nope"))
        # The session goes on answering after a refused question.
        assert boxed.inspect_stack(InspectStack("return:main"))["frames"][0]["function"] == "main"


@pytest.mark.podman
def test_return_main_from_the_hardened_container(
    program: tuple[Path, KeyFiles], podman_service: tuple[Any, Any, str], replay_image: str
) -> None:
    _client, _user, socket_url = podman_service
    store, keys = program
    env = {"SEALTRACE_PODMAN_SOCKET": socket_url}
    built = run_cli("sandbox", "build-image", "--json", env=env)  # found, not rebuilt
    assert built.returncode == 0 and json.loads(built.stdout)["image"] == replay_image
    base = [str(store), "--identity", str(keys.identity_path), "--sandbox"]
    stack = run_cli("inspect-stack", *base, "--at", "return:main", "--json", env=env)
    assert stack.returncode == 0, stack.stderr.decode()
    assert _locals(json.loads(stack.stdout)["frames"][0])["total"]["value"]["repr"] == "110"
    trace = run_cli("trace", *base, "--at", "return:main", "--var", "total", env=env)
    assert trace.returncode == 0, trace.stderr.decode()
    assert "Command-line argument" in trace.stdout.decode()
