"""`--at crash`: the instruction that raised the exception a run died of, its frames, the
exception's type and message (issue 22, item 5), and the provenance of the value that made it
fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import KeyFiles, run_cli
from .replaying import record, write_app

APP = """
import os, sys

def ratio(total, parts):
    share = total / parts
    return share

def main():
    parts = int(sys.argv[1]) - len(os.environ["SHARE_OFFSET"])
    print(ratio(100, parts))

main()
"""


def test_crash_stops_at_the_raising_instruction_and_traces_its_operand(
    tmp_path: Path, keys: KeyFiles
) -> None:
    app = write_app(tmp_path / "app", APP)
    recorded = record(
        keys, tmp_path / "store", [sys.executable, str(app), "3"], "--app-root", str(app.parent),
        env={"SHARE_OFFSET": "abc"},
    )  # fmt: skip
    assert recorded.proc.returncode == 1 and b"ZeroDivisionError" in recorded.proc.stderr
    base = [str(tmp_path / "store"), "--identity", str(keys.identity_path), "--in-process"]

    stack = run_cli("inspect-stack", *base, "--at", "crash", "--json")
    assert stack.returncode == 0, stack.stderr.decode()
    frames = json.loads(stack.stdout)["frames"]
    assert [f["function"] for f in frames[:2]] == ["ratio", "main"]
    assert frames[0]["line"] == 5
    parts = {v["name"]: v for v in frames[0]["locals"]}["parts"]
    assert parts["value"]["repr"] == "0" and parts["tag"] > 0

    trace = run_cli("trace", *base, "--at", "crash", "--var", "parts", "--depth", "8", "--json")
    assert trace.returncode == 0, trace.stderr.decode()
    root = json.loads(trace.stdout)["root"]
    assert root["op"] == "BINARY_OP -" and root["value"]["repr"] == "0"
    kinds = set()

    def walk(node: dict[str, object]) -> None:
        origin = node["origin"]
        if isinstance(origin, dict):
            kinds.add(origin["kind"])
        for child in node["inputs"]:  # type: ignore[attr-defined]
            walk(child)

    walk(root)
    # 3 came from the command line, 3 from the length of an environment variable.
    assert {"argv", "env"} <= kinds

    # Negative control: a run that ends normally has no crash to stop at.
    ok = write_app(tmp_path / "ok", "print(1)\n")
    fine = record(keys, tmp_path / "fine", [sys.executable, str(ok)], "--app-root", str(ok.parent))
    assert fine.proc.returncode == 0
    none = run_cli(
        "inspect-stack", str(tmp_path / "fine"), "--identity", str(keys.identity_path),
        "--at", "crash", "--in-process",
    )  # fmt: skip
    assert none.returncode == 2 and "did not crash" in none.stderr.decode()


RAISES = """
import sys


class PricingError(Exception):
    pass


class Loud(Exception):
    def __str__(self):
        return "made by the program"


def check(discount):
    if discount > 50:
        raise PricingError("discount too large")
    return 100 / discount


def main():
    mode = sys.argv[1]
    if mode == "zero":
        print(check(0))
    elif mode == "custom":
        print(check(80))
    elif mode == "loud":
        raise Loud()
    else:
        raise ValueError(f"unknown mode {mode}")


main()
"""


@pytest.fixture(scope="module")
def crashes(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], KeyFiles]:
    """One recording per way to die: a builtin error, a class of the program's with a
    constant message, a message formatted from data, a class with its own __str__."""
    from sealtrace.proxy import write_keypair

    work = tmp_path_factory.mktemp("crashes")
    keys = KeyFiles(*write_keypair(work / "keys", "crashes"))
    app = write_app(work / "app", RAISES)
    stores = {}
    for mode in ("zero", "custom", "other", "loud"):
        stores[mode] = work / f"store-{mode}"
        recorded = record(
            keys, stores[mode], [sys.executable, str(app), mode], "--app-root", str(app.parent)
        )
        assert recorded.proc.returncode == 1, recorded.proc.stderr.decode()
    return stores, keys


def _stack(store: Path, keys: KeyFiles, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return run_cli(
        "inspect-stack", str(store), "--identity", str(keys.identity_path), "--in-process",
        "--at", "crash", *extra,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "kind", "message", "line"),
    [
        ("zero", "ZeroDivisionError", "division by zero",
         "raised ZeroDivisionError: division by zero"),
        ("custom", "PricingError", "discount too large",
         "raised PricingError: discount too large"),
        ("other", "ValueError", "unknown mode other", "raised ValueError: unknown mode other"),
        ("loud", "Loud", None,
         "raised Loud (its message is not shown: making it runs the program's code)"),
    ],
)  # fmt: skip
def test_the_crash_shows_the_exceptions_type_and_message_in_process(
    crashes: tuple[dict[str, Path], KeyFiles],
    mode: str,
    kind: str,
    message: str | None,
    line: str,
) -> None:
    stores, keys = crashes
    proc = _stack(stores[mode], keys, "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    raised = json.loads(proc.stdout)["exception"]
    assert raised["type"] == kind
    if message is None:  # Loud.__str__ is the program's: never run by the engine
        assert raised["message"] is None
    else:
        assert raised["message"]["repr"] == repr(message)
    text = _stack(stores[mode], keys).stdout.decode()
    assert text.splitlines()[1] == line


def test_only_the_crash_says_what_was_raised(crashes: tuple[dict[str, Path], KeyFiles]) -> None:
    """Negative control: a stack at a line or a return has no exception to show."""
    stores, keys = crashes
    proc = run_cli(
        "inspect-stack", str(stores["zero"]), "--identity", str(keys.identity_path),
        "--in-process", "--at", "return:main#1", "--json",
    )  # fmt: skip
    assert proc.returncode == 2  # main never returned: it raised
    at_line = run_cli(
        "inspect-stack", str(stores["zero"]), "--identity", str(keys.identity_path),
        "--in-process", "--at", "app.py:22", "--json",
    )  # fmt: skip
    assert at_line.returncode == 0, at_line.stderr.decode()
    assert "exception" not in json.loads(at_line.stdout)
    text = run_cli(
        "inspect-stack", str(stores["zero"]), "--identity", str(keys.identity_path),
        "--in-process", "--at", "app.py:22",
    )  # fmt: skip
    assert "raised" not in text.stdout.decode()


@pytest.mark.parametrize(
    ("mode", "kind", "shown"),
    [
        ("zero", "ZeroDivisionError", "'division by zero'"),  # the interpreter's own message
        ("custom", "PricingError", "'discount too large'"),  # a constant of the source
        ("other", "ValueError", None),  # formatted from data: type and digest only
        ("loud", "Loud", None),
    ],
)
def test_the_sandbox_shows_what_it_can_match_of_the_exception(
    crashes: tuple[dict[str, Path], KeyFiles], mode: str, kind: str, shown: str | None
) -> None:
    """Strings never leave the sandbox: the type name travels as a digest the agent matches
    to builtin exception classes and the recorded source's classes, the message as a VALUE
    shown only when it matches something the agent holds."""
    from sealtrace.agent._sandbox_client import SandboxClient
    from sealtrace.sandbox import Inquiry, load_recording
    from sealtrace.sandbox.questions import InspectStack, check_answer

    stores, keys = crashes
    data, parsed = load_recording(str(stores[mode]), keys.identity)
    with Inquiry(data, parsed) as plain, SandboxClient(data, parsed) as boxed:
        mine = plain.inspect_stack(InspectStack("crash"))
        theirs = boxed.inspect_stack(InspectStack("crash"))
    assert check_answer("inspect-stack", theirs) == []
    assert theirs["query"]["counter"] == mine["query"]["counter"]
    raised = theirs["exception"]
    assert raised["type"] == kind
    if mode == "loud":
        assert raised["message"] is None
        return
    message = raised["message"]
    assert message is not None and message["type"] == "str"
    assert message["repr"] == shown
    if shown is None:  # not matched: shown as type and digest, like any other value
        assert len(message["digest"]) == 64
        from sealtrace.sandbox._explain import SourceLines, render_stack

        text = render_stack(theirs, SourceLines(parsed))
        assert f"raised {kind}: <str {message['digest'][:12]}>" in text
        assert "a message the sandbox cannot show" in text
