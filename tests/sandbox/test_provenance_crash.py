"""`--at crash`: the instruction that raised the exception a run died of, its frames, and the
provenance of the value that made it fail."""

from __future__ import annotations

import json
import sys
from pathlib import Path

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
