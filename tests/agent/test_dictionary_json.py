"""The agent shows a string the sandbox sends only when it can match its keyed digest to
something the recording holds. A file read as bytes holds the text its reader decodes; a
JSON document an input carries (a file's body here, an HTTP response's body in the pricing
story) holds the strings a program parses out of it: those are shown; a string the program
made itself from them stays a digest."""

from __future__ import annotations

import sys
from pathlib import Path

from sealtrace.agent import SandboxClient
from sealtrace.sandbox import load_recording
from sealtrace.sandbox.questions import InspectStack

from ..conftest import KeyFiles
from ..sandbox.replaying import record, write_app

APP = """import json, sys

def main(path):
    with open(path) as f:
        text = f.read()
    order = json.loads(text)
    code = order["promo"]
    email = order["customer"]["email"]
    shouted = code.lower() + "!"
    with open(path + "l") as f:
        for line in f.read().splitlines():
            entry = json.loads(line)
            amount = entry["amount"]
            first = line
            break
    return len(shouted) + amount

print(main(sys.argv[1]))
"""


def test_strings_parsed_from_an_input_are_shown_and_made_ones_are_not(
    keys: KeyFiles, tmp_path: Path
) -> None:
    document = tmp_path / "order.json"
    document.write_text('{"promo": "STAFF100", "customer": {"email": "jo@example.com"}}')
    Path(str(document) + "l").write_text('{"amount": 12, "memo": "first"}\n{"amount": 30}\n')
    app = write_app(tmp_path / "app", APP)
    recorded = record(keys, tmp_path / "rec", [sys.executable, str(app), str(document)])
    assert recorded.proc.returncode == 0, recorded.proc.stderr
    data, parsed = load_recording(str(tmp_path / "rec"), keys.identity)
    with SandboxClient(data, parsed) as box:
        stack = box.inspect_stack(InspectStack(at="app.py:16"))
    shown = {v["name"]: v["value"]["repr"] for v in stack["frames"][0]["locals"]}
    assert shown["code"] == "'STAFF100'" and shown["email"] == "'jo@example.com'"
    assert shown["text"] == repr(document.read_text())  # the file's bytes, decoded
    assert shown["first"] == repr('{"amount": 12, "memo": "first"}')  # a line of a file
    assert shown["entry"] == repr({"amount": 12, "memo": "first"})  # and its JSON
    assert shown["shouted"] is None  # made by the program: its digest only
