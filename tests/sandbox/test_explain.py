"""The text view of a trace (sealtrace.sandbox._explain) says what the JSON says (issue 22,
item 5): every leaf, constants too, and, where a branch stops short of its origins, which
step it stopped at and why, never a blanket "origin unknown"."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import KeyFiles, run_cli
from .replaying import record, write_app

# A fee from an input and two literals: the literals are leaves of the answer.
FEE = """
import sys


def main():
    amount = len(sys.argv[1]) * 100
    fee = amount * 0.025 + 30
    print(fee)


main()
"""

# Twenty sums of 250 products each: more steps within the bound than a slice pass keeps.
WIDE = """
import sys


def main():
    k = len(sys.argv[1])
    groups = []
    for g in range(20):
        groups.append(sum([i * k for i in range(250)]))
    total = sum(groups)
    print(total)


main()
"""


def _record(work: Path, keys: KeyFiles, name: str, source: str) -> Path:
    app = write_app(work / name, source)
    store = work / f"store-{name}"
    recorded = record(keys, store, [sys.executable, str(app), "abc"], "--app-root", str(app.parent))
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    return store


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], KeyFiles]:
    from sealtrace.proxy import write_keypair

    work = tmp_path_factory.mktemp("explain")
    keys = KeyFiles(*write_keypair(work / "keys", "explain"))
    return {"fee": _record(work, keys, "fee", FEE), "wide": _record(work, keys, "wide", WIDE)}, keys


def _trace(store: Path, keys: KeyFiles, *extra: str) -> str:
    proc = run_cli(
        "trace", str(store), "--identity", str(keys.identity_path), "--in-process",
        "--at", "return:main", *extra,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node["inputs"]:
        yield from _nodes(child)


def test_the_text_shows_every_leaf_the_json_has_constants_too(
    recorded: tuple[dict[str, Path], KeyFiles],
) -> None:
    stores, keys = recorded
    doc = json.loads(_trace(stores["fee"], keys, "--var", "fee", "--json"))
    constants = [n for n in _nodes(doc["root"]) if (n["origin"] or {}).get("kind") == "constant"]
    assert {n["value"]["repr"] for n in constants} >= {"100", "0.025", "30"}
    text = _trace(stores["fee"], keys, "--var", "fee")
    for node in constants:  # each leaf: where it is, what it is, and that it is a constant
        assert f"in main, step {node['counter']:,}" in text
        assert f"{node['op']} → {node['value']['repr']}" in text
    assert text.count("◉ Constant in the code") == len(constants)
    assert "◉ Command-line argument" in text


def test_a_cut_answer_says_at_which_step_and_why(
    recorded: tuple[dict[str, Path], KeyFiles],
) -> None:
    stores, keys = recorded
    doc = json.loads(_trace(stores["wide"], keys, "--var", "total", "--json"))
    assert doc["query"]["truncated"] is True
    undescribed = [n["counter"] for n in _nodes(doc["root"]) if n["op"] == "?"]
    assert undescribed  # the slice pass stopped keeping steps: these were left out
    text = _trace(stores["wide"], keys, "--var", "total")
    for counter in undescribed:
        assert f"step {counter:,}: not followed: the slice's node or edge limit" in text
    assert "? → ?" not in text and "Origin unknown" not in text
    assert "Truncated: some branches stop before their origins (the slice's node" in text
    # Negative control: the bound cuts another answer, and it says so, under the step it cut.
    short = _trace(stores["fee"], keys, "--var", "fee", "--depth", "1")
    assert "⋯ not followed: the --depth bound (1 computations back)" in short
    assert "slice's node or edge limit" not in short


def test_the_sandboxed_answer_reads_the_same(recorded: tuple[dict[str, Path], KeyFiles]) -> None:
    """The sandbox client's documents go through the same renderer: its leaves and cuts too."""
    from sealtrace.agent._sandbox_client import SandboxClient
    from sealtrace.sandbox import load_recording
    from sealtrace.sandbox._explain import SourceLines, render_trace
    from sealtrace.sandbox.questions import Trace

    stores, keys = recorded
    data, parsed = load_recording(str(stores["fee"]), keys.identity)
    with SandboxClient(data, parsed) as boxed:
        doc = boxed.trace(Trace(at="return:main", var="fee"))
        text = render_trace(doc, boxed.last_nodes, SourceLines(parsed), boxed.last_cuts)
    assert text.count("◉ Constant in the code") == 3
    assert "LOAD_CONST 0.025 → 0.025" in text
