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
    # What entering and leaving a scope costs by itself, then the same with a lot kept inside.
    empty = [gc.get_count()[0]]
    with quiet():
        pass
    empty.append(gc.get_count()[0])
    full = [gc.get_count()[0]]
    with quiet():
        kept = _kept(5000)  # far past the young generation's threshold
    full.append(gc.get_count()[0])
    assert full[1] - full[0] == empty[1] - empty[0]
    assert [s["collections"] for s in gc.get_stats()] == collections
    # What it kept is out of the program's generations, not lost.
    assert kept[0]["k"][1] == "000"
    assert gc.is_tracked(kept[0]) and kept[0] not in gc.get_objects(0)


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
