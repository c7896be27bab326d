"""The engine's live state: tags never outlive their objects, and it stays O(live values)."""

from __future__ import annotations

import gc
from typing import Any

from sealtrace._engine import Engine


def _not_own(filename: str) -> bool:
    return False


def _run(source: str) -> tuple[Engine, dict[str, Any]]:
    code = compile(source, "/engine-state/app.py", "exec")
    namespace: dict[str, Any] = {"__name__": "__main__"}
    engine = Engine(_not_own)
    engine.attach()
    try:
        exec(code, namespace)  # noqa: S102 - running the snippet under the engine is the test
    finally:
        engine.detach()
    return engine, namespace


REUSE = """
marker = object()
def make():
    return [marker]        # BUILD_LIST: the item gets a tag
first = make()
first_id = id(first)
del first                  # the list dies; its address goes back to the free list
for _ in range(100):
    second = sorted((marker,))  # made by C (PyList_New): its items have no slot tags
    if id(second) == first_id:
        break
"""


def test_a_dead_lists_item_tags_do_not_pass_to_a_new_list_at_its_address() -> None:
    engine, ns = _run(REUSE)
    assert id(ns["second"]) == ns["first_id"], "the interpreter did not reuse the address"
    # The same object sits at the same index of a list at the same address: only the
    # deallocation hook tells the new list from the old one.
    assert engine.item_tag(ns["second"], 0, ns["marker"]) == 0


def test_negative_control_a_live_lists_item_keeps_its_tag() -> None:
    engine, ns = _run("marker = object()\nkept = [marker]\n")
    assert engine.item_tag(ns["kept"], 0, ns["marker"]) > 0


EXCEPTION_REUSE = """
import os
def fails(path):
    return os.stat(path)    # C raises the FileNotFoundError (OSError's own deallocation)
last_id = None
for _ in range(1000):
    before = [0]            # BUILD_LIST: a tag of its own, just before the raise
    try:
        fails("/nonexistent")
    except OSError as caught:
        second = caught
    if id(second) == last_id:
        break               # made where the one before, handled and freed, was
    last_id = id(second)
    del second              # freed: its address goes back
"""


def test_a_new_exception_at_a_dead_ones_address_has_its_own_tag() -> None:
    # The engine tells an exception still unwinding from a new one by its address; once the
    # one before is freed, the next made at its address must not take its tag (and origin).
    engine, ns = _run(EXCEPTION_REUSE)
    assert "second" in ns, "the interpreter never reused an exception's address"
    assert id(ns["second"]) == ns["last_id"]
    before = engine.item_tag(ns, "before", ns["before"])
    assert 0 < before < engine.item_tag(ns, "second", ns["second"])


def test_negative_control_an_exception_re_raised_keeps_its_tag() -> None:
    source = """
def fails():
    return int("x")
try:
    try:
        fails()
    except ValueError:
        after = [0]
        raise
except ValueError as caught:
    kept = caught
"""
    engine, ns = _run(source)
    # The same exception, re-raised after `after` was made: still the tag of where C raised it.
    assert 0 < engine.item_tag(ns, "kept", ns["kept"]) < engine.item_tag(ns, "after", ns["after"])


def test_dead_objects_leave_no_slots_behind() -> None:
    source = """
class Box:
    pass
for i in range(20000):
    b = Box()
    b.value = [i, i + 1]
    d = {"k": b.value}
"""
    engine, _ns = _run(source)
    gc.collect()
    stats = engine.stats()
    # 20,000 boxes, lists and dicts were made and tagged; only the last few are alive.
    assert stats["tracked_objects"] < 50, stats
    assert stats["depth_mismatches"] == 0 and stats["live_frames"] == 0


def test_a_class_attribute_keeps_the_tag_of_its_literal() -> None:
    source = """
class Tier:
    rate = 40.5
    other = 1.25
t = Tier()
via_instance = t.rate
via_class = Tier.rate
"""
    engine, ns = _run(source)
    tier = ns["Tier"]
    rate_tag = engine.attr_tag(tier, "rate", tier.rate)
    assert rate_tag > 0
    assert engine.attr_tag(tier, "other", tier.other) not in (0, rate_tag)
    assert engine.item_tag(ns, "via_instance", ns["via_instance"]) == rate_tag
    assert engine.item_tag(ns, "via_class", ns["via_class"]) == rate_tag


def test_an_item_read_back_by_c_code_keeps_its_tag_only_while_a_slot_holds_it() -> None:
    source = """
import sys
payload = {}
value = "x-" * 20          # not an identifier: never interned
payload["k"] = value
pairs = list(payload.items())
copied = pairs[0][1]
loose = "y-" * 20
alone = [loose][0:1][0]
"""
    engine, ns = _run(source)
    held = engine.item_tag(ns["payload"], "k", ns["value"])
    assert held > 0
    assert engine.item_tag(ns, "copied", ns["copied"]) == held
    # Negative control: the temporary list that held `loose` is gone, so the slice's item
    # gets the slice's own tag, not a stale one.
    assert engine.item_tag(ns, "alone", ns["alone"]) not in (0, held)


def test_wide_instructions_keep_the_stack_in_step() -> None:
    # 300 items: BUILD_TUPLE/BUILD_LIST/CALL take EXTENDED_ARG and move the stack by more
    # than a byte's worth.
    names = ", ".join(f"v{i}" for i in range(300))
    source = (
        "".join(f"v{i} = {i} * 2\n" for i in range(300))
        + f"t = ({names},)\nl = [{names}]\ndef f(*a):\n    return a\nr = f({names})\n"
    )
    engine, ns = _run(source)
    stats = engine.stats()
    assert stats["depth_mismatches"] == 0, stats
    assert engine.item_tag(ns["t"], 299, ns["t"][299]) == engine.item_tag(ns, "v299", ns["v299"])
