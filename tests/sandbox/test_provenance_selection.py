"""What chooses a value is not where it came from; what compares values made the result
(issue 22, item 1, and the precision the ground-truth corpus measures).

One recorded program reads a JSON document from stdin and two environment variables, and
uses each idiom whose answer once named the wrong ancestors: the key or index of a subscript
(a selector, never an origin), min() and max() (every item compared decided the result, not
only the one returned), a generator's yields taken by unpacking (small ints that identity
alone cannot tell apart), dict.update() overwriting a default equal to the new value, an
exception's attributes, dict() of pairs, and readlines() (the read that brought the data, not
the empty read that ended it). Each answer must name its real inputs and nothing else.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ..conftest import KeyFiles
from .replaying import record, trace_json, walk, write_app

APP = """
import copy
import dataclasses
import io
import json
import os
import sys
from collections import OrderedDict

DEFAULTS = OrderedDict(timeout=30, retries=3)


@dataclasses.dataclass
class Terms:
    days: int
    rate: float


class Stamped:
    def __init__(self, msg, stamp):
        self.msg = msg
        self.stamp = stamp


class Over(Exception):
    def __init__(self, amount, limit):
        super().__init__("over the limit")
        self.amount = amount
        self.limit = limit


def running(values):
    total = 0
    for v in values:
        total += v
        yield total


data = json.loads(sys.stdin.read())
ceiling = int(os.environ["CEILING"])
floor = float(os.environ["FLOOR"])
with open("lines.txt") as fh:
    lines = fh.readlines()

picked = data["rows"][1][1]
tail = data["rows"][1:][0][0]
highest = max([floor, data["rows"][0][1]])
*_, last = running(data["small"])
settings = OrderedDict(DEFAULTS)
settings.update(data["cfg"])
retries = settings["retries"]
try:
    if picked > ceiling:
        raise Over(picked, ceiling)
    charged = picked
except Over as exc:
    charged = exc.amount
paired = dict([("a", data["rows"][0][1]), ("b", 2)])
from_pairs = paired["a"]
first_line = lines[0]
fixed_pick = [4.5, 5.5][1]
note = Stamped(data["rows"][0][0], ceiling)
rendered = "%(msg)s!" % note.__dict__
doubled = [v * 2 for v in data["small"]]
over = any(v > 7 for v in doubled)
terms = dataclasses.asdict(copy.deepcopy(Terms(len(data["small"]), floor)))
days = terms["days"]
gen_total = sum(int(s) * 2 for s in data["strs"])
sink = io.StringIO()
sink.write(data["rows"][1][0])
written = sink.getvalue()
print("done")
"""

DOC = {
    "rows": [["xray", 1500.5], ["yank", 9000]],
    "small": [3, 4, 5],
    "cfg": {"retries": 3},
    "strs": ["12", "30"],
}
READ = ("external", "stdin.readall")
CEILING = ("env", "os.environ['CEILING']")
FLOOR = ("env", "os.environ['FLOOR']")


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, KeyFiles, int]:
    from sealtrace.proxy import write_keypair

    work = tmp_path_factory.mktemp("selection")
    keys = KeyFiles(*write_keypair(work / "keys", "selection"))
    app = write_app(work / "app", APP)
    cwd = work / "cwd"
    cwd.mkdir()
    (cwd / "lines.txt").write_text("alpha\\nbeta\\n")
    recorded = record(
        keys, work / "store", [sys.executable, str(app)], "--app-root", str(app.parent),
        stdin=json.dumps(DOC).encode(), cwd=cwd, env={"CEILING": "5000", "FLOOR": "12.5"},
    )  # fmt: skip
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    line = next(i for i, text in enumerate(APP.splitlines(), 1) if text == 'print("done")')
    return work / "store", keys, line


def _trace(recording: tuple[Path, KeyFiles, int], var: str) -> dict[str, Any]:
    store, keys, line = recording
    doc = trace_json(store, keys, f"app.py:{line}", var)
    assert not doc["query"]["truncated"]
    return doc


_nodes = walk


def _origins(doc: dict[str, Any]) -> set[tuple[str, str | None]]:
    found = set()
    for n in _nodes(doc["root"]):
        if n["origin"]:
            call = n["origin"]["call"]
            if n["origin"]["kind"] == "env" and call is not None and "[" not in call:
                call = n["op"]  # os.environ.__getitem__ answers name the variable in op
            found.add((n["origin"]["kind"], call))
    return found


def _constants(doc: dict[str, Any]) -> list[str]:
    """The program's own constants the answer names (a library's, json's idx=0, are not judged)."""
    return [
        n["value"]["repr"]
        for n in _nodes(doc["root"])
        if (n["origin"] or {}).get("kind") == "constant" and str(n.get("file")).endswith("app.py")
    ]


@pytest.mark.parametrize("var", ["picked", "tail"])
def test_a_subscript_key_or_slice_is_not_an_origin(
    recording: tuple[Path, KeyFiles, int], var: str
) -> None:
    doc = _trace(recording, var)
    assert READ in _origins(doc)
    assert _constants(doc) == [], _constants(doc)  # not 'rows', 1, nor the slice's 1 or None


def test_max_has_every_item_compared_as_input(recording: tuple[Path, KeyFiles, int]) -> None:
    doc = _trace(recording, "highest")
    assert doc["root"]["value"]["repr"] == "1500.5"
    assert doc["root"]["op"] == "CALL max"  # a computation, not a move of the winner
    kinds = {kind for kind, _call in _origins(doc)}
    assert READ in _origins(doc) and "env" in kinds  # the loser, FLOOR, decided it too


def test_unpacking_a_generator_takes_each_yield(recording: tuple[Path, KeyFiles, int]) -> None:
    root = _trace(recording, "last")["root"]
    # 12 is a shared small int: the last yield, found by position, not the UNPACK_EX.
    assert root["value"]["repr"] == "12" and root["op"] == "BINARY_OP +="


def test_update_overwrites_a_default_equal_to_the_new_value(
    recording: tuple[Path, KeyFiles, int],
) -> None:
    doc = _trace(recording, "retries")
    assert READ in _origins(doc)
    assert "3" not in _constants(doc)  # DEFAULTS' 3 is the same object, and no ancestor


def test_an_exception_attribute_keeps_its_own_tag(recording: tuple[Path, KeyFiles, int]) -> None:
    doc = _trace(recording, "charged")
    assert doc["root"]["value"]["repr"] == "9000"
    kinds = {kind for kind, _call in _origins(doc)}
    assert READ in _origins(doc) and "env" not in kinds  # the limit was stored beside it


def test_dict_of_pairs_keeps_each_value_tag(recording: tuple[Path, KeyFiles, int]) -> None:
    doc = _trace(recording, "from_pairs")
    assert READ in _origins(doc)
    assert _constants(doc) == [], _constants(doc)  # not the keys, not the other pair's 2


def test_readlines_names_the_read_that_brought_the_data(
    recording: tuple[Path, KeyFiles, int],
) -> None:
    from sealtrace.proxy import Identity
    from sealtrace.sandbox._replay_process import load_recording

    doc = _trace(recording, "first_line")
    events = {
        n["origin"]["event"]
        for n in _nodes(doc["root"])
        if (n["origin"] or {}).get("kind") == "external"
    }
    store, keys, _line = recording
    _data, parsed = load_recording(str(store), Identity.load(keys.identity_path))
    reads = [e for e in parsed.events if e.callee == "file.read"]
    assert len(reads) >= 2  # the data, then the empty read that ends readlines()
    carried = {e.index for e in reads if parsed.decode(e)}
    assert events & carried and not events - carried, (events, carried)


def test_percent_formatting_a_mapping_reads_only_the_named_fields(
    recording: tuple[Path, KeyFiles, int],
) -> None:
    # A logging formatter's `fmt % record.__dict__`: the stamp beside the message is no input.
    doc = _trace(recording, "rendered")
    assert doc["root"]["value"]["repr"] == "'xray!'"
    kinds = {kind for kind, _call in _origins(doc)}
    assert READ in _origins(doc) and "env" not in kinds


def test_a_loop_over_a_filled_list_reads_its_items_not_the_empty_literal(
    recording: tuple[Path, KeyFiles, int],
) -> None:
    doc = _trace(recording, "over")
    assert READ in _origins(doc)
    assert "[]" not in _constants(doc)  # the comprehension's list started empty


def test_a_deep_copy_and_asdict_keep_each_field_tag(
    recording: tuple[Path, KeyFiles, int],
) -> None:
    # The copy's state is the instance's __dict__, handed out by C (__reduce_ex__); its
    # fields are 3 (a shared small int, no identity to follow) and the FLOOR variable.
    doc = _trace(recording, "days")
    assert doc["root"]["value"]["repr"] == "3"
    kinds = {kind for kind, _call in _origins(doc)}
    assert READ in _origins(doc) and "env" not in kinds
    assert _constants(doc) == [], _constants(doc)  # not the field names, not the class


def test_what_a_generator_computes_while_c_drives_it_is_traced(
    recording: tuple[Path, KeyFiles, int],
) -> None:
    # sum() runs the generator: its steps come after sum's own by counter, and are its inputs.
    doc = _trace(recording, "gen_total")
    assert doc["root"]["op"] == "CALL sum" and doc["root"]["value"]["repr"] == "84"
    ops = {(n["op"], n["value"]["repr"]) for n in _nodes(doc["root"])}
    assert {("CALL int", "12"), ("CALL int", "30")} <= ops
    assert READ in _origins(doc)
    assert not any(n["op"] == "?" for n in _nodes(doc["root"]))


def test_a_c_object_made_empty_is_no_origin_of_what_filled_it(
    recording: tuple[Path, KeyFiles, int],
) -> None:
    # io.StringIO() holds only what was written: the write is the input, not the empty buffer.
    doc = _trace(recording, "written")
    assert doc["root"]["value"]["repr"] == "'yank'"
    assert READ in _origins(doc)
    assert _constants(doc) == [], _constants(doc)


def test_negative_control_a_literal_still_traces_to_its_constant(
    recording: tuple[Path, KeyFiles, int],
) -> None:
    doc = _trace(recording, "fixed_pick")
    assert {kind for kind, _call in _origins(doc)} == {"constant"}
    assert "5.5" in _constants(doc)
