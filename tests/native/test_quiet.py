"""Quiet scopes: sealtrace's own work inside a replayed program leaves the program's heaps,
free lists and garbage collection as they were (native/src/quiet.h). Every pass of a query
must run the program identically, whatever it asks; a program's control flow can depend on
its objects' addresses (a set of objects iterates in id order) and on when the collector runs.
"""

from __future__ import annotations

import gc
from typing import Any

from sealtrace._engine import instance_fields, quiet


def _next_address(make: Any) -> int:
    obj = make()
    address = id(obj)
    del obj
    return address


def _kept(n: int) -> list[Any]:
    return [{"k": [i, str(i) * 3, float(i)]} for i in range(n)] + [object() for _ in range(n)]


def _counted_in_scope(n: int) -> tuple[int, list[Any]]:
    """What the young generation counted across a scope that kept _kept(n), beyond what
    entering and leaving an empty one costs by itself; and what it kept."""
    empty = [gc.get_count()[0]]
    with quiet():
        pass
    empty.append(gc.get_count()[0])
    full = [gc.get_count()[0]]
    with quiet():
        kept = _kept(n)
    full.append(gc.get_count()[0])
    return (full[1] - full[0]) - (empty[1] - empty[0]), kept


def test_what_a_quiet_scope_keeps_does_not_move_the_programs_next_objects() -> None:
    for make in (object, lambda: [1, 2], lambda: (1.5, "x" * 40), lambda: 12345.5):
        before = _next_address(make)
        with quiet():
            kept = _kept(200)
        assert _next_address(make) == before
        del kept


def test_negative_control_without_a_quiet_scope_the_next_object_moves() -> None:
    before = _next_address(object)
    kept = _kept(200)
    assert _next_address(object) != before
    del kept


def test_a_quiet_scope_neither_collects_nor_counts_towards_a_collection() -> None:
    gc.collect()
    collections = [s["collections"] for s in gc.get_stats()]
    counted, kept = _counted_in_scope(5000)  # far past the young generation's threshold
    assert counted == 0
    assert [s["collections"] for s in gc.get_stats()] == collections
    # What it kept is out of the program's generations, not lost.
    assert kept[0]["k"][1] == "000"
    assert gc.is_tracked(kept[0]) and kept[0] not in gc.get_objects(0)


def test_a_quiet_scope_inside_a_collection_keeps_out_of_it_too() -> None:
    """A finalizer the collector calls runs while the collection holds the garbage in lists
    of its own, and the young generation holds what was made since it began: what a scope
    there keeps must leave it too, or it counts towards the program's next collection (a
    checkpoint taken inside a finalizer moved every later one)."""
    seen: dict[str, Any] = {}

    class Cycle:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            # The collection zeroed the count (a deallocation never takes it below zero), and
            # what making the first scope object costs varies: measured from the second.
            seen["warm"] = [[] for _ in range(10)]
            with quiet():
                pass
            seen["counted"], kept = _counted_in_scope(50)
            seen["young"] = any(o is kept[0] for o in gc.get_objects(0))
            seen["kept"] = kept

    gc.collect()
    Cycle()
    gc.collect()  # finds the cycle and calls its finalizer
    assert seen["counted"] == 0
    assert not seen["young"]
    assert gc.is_tracked(seen["kept"][0]) and seen["kept"][0]["k"][1] == "000"


def test_quiet_scopes_nest() -> None:
    before = _next_address(object)
    with quiet():
        outer = _kept(10)
        with quiet():
            inner = _kept(10)
        more = _kept(10)
    assert _next_address(object) == before
    del outer, inner, more


def test_reading_an_instances_fields_gives_it_no_dict() -> None:
    class Point:
        def __init__(self) -> None:
            self.x = 1
            self.y = "two"

    def has_dict(obj: Any) -> bool:
        return any(type(r) is dict for r in gc.get_referents(obj))

    p = Point()
    assert instance_fields(p) == {"x": 1, "y": "two"}
    assert not has_dict(p)
    # Negative control: reading __dict__ builds one and attaches it for good.
    assert p.__dict__ == {"x": 1, "y": "two"} and has_dict(p)
    assert instance_fields(p) is p.__dict__

    class Slotted:
        __slots__ = ("v",)

    assert instance_fields(Slotted()) is None
    assert instance_fields(42) is None
