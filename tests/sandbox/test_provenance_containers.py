"""Values C code makes from containers have the containers' items as inputs (issue 22, item 1).

One recorded program reads its only input from stdin and aggregates it with the common idioms:
a sum over a list built with .append, `d[k] += v` on a defaultdict, reductions and conversions
done in C, collections, in-place operators on attributes, frozen dataclasses, __slots__,
copy and a bytearray filled in place. Each aggregate must trace back to the stdin read,
never to the empty container it started from. A container filled by code the engine does not
trace says "unknown", and a value that depends on no input traces to constants only (the
negative control).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ..conftest import KeyFiles, run_cli
from .replaying import record, trace_json, walk, write_app

APP = """
import collections
import copy
import dataclasses
import json
import math
import statistics
import sys
from collections.abc import MutableSequence

rows = json.loads(sys.stdin.read())  # the one input

totals = []
for r in rows:
    totals.append(r["amount"] * 2)
grand = sum(totals)

by_cat = collections.defaultdict(float)
for r in rows:
    by_cat[r["cat"]] += r["amount"]
food = by_cat["food"]

amounts = [r["amount"] for r in rows]
biggest = max(amounts)
ordered = sorted(amounts)
first_sorted = ordered[0]
exact = math.fsum(amounts)
mean = statistics.mean(amounts)
names = [r["cat"] for r in rows]
joined = ",".join(names)
as_tuple = tuple(amounts)
tuple_total = sum(as_tuple)
pairs = dict(zip(names, amounts))
dumped = json.dumps({"total": grand})
shown = f"{amounts}"
formatted = "{}".format(names)
listed_total = sum(list(x * 3 for x in amounts))
indexed = [i * a for i, a in enumerate(amounts)]
indexed_total = sum(indexed)
item_total = sum(v for k, v in by_cat.items())

counts = collections.Counter(names)
n_food = counts["food"]
queue = collections.deque()
for a in amounts:
    queue.append(a)
queue_total = sum(queue)
od = collections.OrderedDict()
for r in rows:
    od[r["cat"]] = r["amount"]
rent = od["rent"]
unique = set()
for a in amounts:
    unique.add(a)
unique_total = sum(unique)


class Acc:
    def __init__(self):
        self.x = 1.0


acc = Acc()
for a in amounts:
    acc.x *= a
product = acc.x
groups = {}
for r in rows:
    groups.setdefault(r["cat"], []).append(r["amount"])
food_total = sum(groups["food"])


@dataclasses.dataclass(frozen=True)
class Line:
    amount: float


frozen_amount = Line(rows[0]["amount"]).amount


class Slotted:
    __slots__ = ("v",)


slotted = Slotted()
slotted.v = rows[1]["amount"] + 0.5
slot_amount = slotted.v
copied_x = copy.copy(acc).x


class Bag(MutableSequence):
    def __init__(self):
        self.data = []

    def __getitem__(self, i):
        return self.data[i]

    def __setitem__(self, i, v):
        self.data[i] = v

    def __delitem__(self, i):
        del self.data[i]

    def __len__(self):
        return len(self.data)

    def insert(self, i, v):
        self.data.insert(i, v)


bag = Bag()
bag.extend(a * 1.5 for a in amounts)  # MutableSequence.extend: a frozen module, not traced
outside_total = sum(bag.data)

buf = bytearray()
for r in rows:
    buf.extend(r["cat"].encode())
    buf += b","
blob = bytes(buf).decode()

fixed = [1.5, 2.5]
fixed.append(4.0)
fixed_total = sum(fixed)
print("done")
"""

ROWS = [
    {"amount": 3.5, "cat": "food"},
    {"amount": 4.25, "cat": "food"},
    {"amount": 10.0, "cat": "rent"},
]
READ = "stdin.readall"

# Every aggregate of the input: each must reach the stdin read.
FROM_INPUT = [
    "grand", "food", "biggest", "first_sorted", "exact", "mean", "joined", "tuple_total",
    "pairs", "dumped", "shown", "formatted", "listed_total", "indexed_total", "item_total",
    "n_food", "queue_total", "rent", "unique_total", "product", "food_total", "frozen_amount",
    "slot_amount", "copied_x", "blob",
]  # fmt: skip


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, KeyFiles, int]:
    from sealtrace.proxy import write_keypair

    work = tmp_path_factory.mktemp("containers")
    keys = KeyFiles(*write_keypair(work / "keys", "containers"))
    app = write_app(work / "app", APP)
    recorded = record(
        keys, work / "store", [sys.executable, str(app)], "--app-root", str(app.parent),
        stdin=json.dumps(ROWS).encode(),
    )  # fmt: skip
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    assert recorded.proc.stdout == b"done\n"
    line = next(i for i, text in enumerate(APP.splitlines(), 1) if text == 'print("done")')
    return work / "store", keys, line


def _trace(recording: tuple[Path, KeyFiles, int], var: str, *extra: str) -> dict[str, Any]:
    store, keys, line = recording
    return trace_json(store, keys, f"app.py:{line}", var, *extra)


_nodes = walk


def _origins(doc: dict[str, Any]) -> set[tuple[str, str | None]]:
    return {(n["origin"]["kind"], n["origin"]["call"]) for n in _nodes(doc["root"]) if n["origin"]}


@pytest.mark.parametrize("var", FROM_INPUT)
def test_an_aggregate_made_in_c_traces_to_the_input(
    recording: tuple[Path, KeyFiles, int], var: str
) -> None:
    doc = _trace(recording, var)
    assert ("external", READ) in _origins(doc), (var, _origins(doc))
    assert not doc["query"]["truncated"]
    assert "recording_end" not in doc["query"]  # the recording runs to the program's end


def test_a_sum_over_an_appended_list_has_the_items_as_inputs(
    recording: tuple[Path, KeyFiles, int],
) -> None:
    root = _trace(recording, "grand")["root"]
    assert root["op"] == "CALL sum" and root["value"]["repr"] == "35.5"
    # The three appended products, not the `[]` the list started as.
    assert sorted(n["value"]["repr"] for n in root["inputs"]) == ["20.0", "7.0", "8.5"]
    assert {n["op"] for n in root["inputs"]} == {"BINARY_OP *"}


def test_an_augmented_assignment_on_a_defaultdict_keeps_both_operands(
    recording: tuple[Path, KeyFiles, int],
) -> None:
    root = _trace(recording, "food")["root"]
    assert root["op"] == "BINARY_OP +=" and root["value"]["repr"] == "7.75"
    reprs = {n["value"]["repr"] for n in _nodes(root)}
    assert {"3.5", "4.25"} <= reprs


def test_items_put_there_by_untraced_code_are_unknown_not_constant(
    recording: tuple[Path, KeyFiles, int],
) -> None:
    doc = _trace(recording, "outside_total")
    kinds = {kind for kind, _call in _origins(doc)}
    assert "unknown" in kinds
    assert ("external", READ) not in _origins(doc)
    store, keys, line = recording
    text = run_cli(
        "trace", str(store), "--identity", str(keys.identity_path), "--in-process",
        "--at", f"app.py:{line}", "--var", "outside_total",
    ).stdout.decode()  # fmt: skip
    assert "Origin unknown: items put there by code the engine does not trace" in text


def test_negative_control_a_sum_of_literals_traces_to_constants_only(
    recording: tuple[Path, KeyFiles, int],
) -> None:
    doc = _trace(recording, "fixed_total")
    assert doc["root"]["value"]["repr"] == "8.0"
    assert {kind for kind, _call in _origins(doc)} == {"constant"}
