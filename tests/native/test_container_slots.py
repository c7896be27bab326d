"""Items keep their tags in the containers C code fills and reorders: a defaultdict's item
written by `+=` (its __missing__ filled the slot first), a deque's and a set's members, a list
after sort(), an attribute set through object.__setattr__ (frozen dataclasses, ORMs), a value
read back from a dict's items() or from enumerate()."""

from __future__ import annotations

from typing import Any

from sealtrace._engine import Engine


def _not_own(filename: str) -> bool:
    return False


def _run(source: str) -> tuple[Engine, dict[str, Any]]:
    code = compile(source, "/container-slots/app.py", "exec")
    namespace: dict[str, Any] = {"__name__": "__main__"}
    engine = Engine(_not_own)
    engine.attach()
    try:
        exec(code, namespace)  # noqa: S102 - running the snippet under the engine is the test
    finally:
        engine.detach()
    return engine, namespace


def _tag(engine: Engine, ns: dict[str, Any], name: str) -> int:
    return engine.item_tag(ns, name, ns[name])


def test_an_augmented_item_of_a_defaultdict_keeps_its_tag() -> None:
    engine, ns = _run(
        "import collections\n"
        "v = 1.5 * 2\n"
        "d = collections.defaultdict(float)\n"
        "d['k'] += v\n"
        "got = d['k']\n"
    )
    tag = engine.item_tag(ns["d"], "k", ns["d"]["k"])
    assert tag not in (0, _tag(engine, ns, "v"))  # the += made it
    assert _tag(engine, ns, "got") == tag


def test_a_value_keeps_its_tag_through_a_deque_and_a_set() -> None:
    engine, ns = _run(
        "import collections\n"
        "v = 2.5 * 3\n"
        "q = collections.deque()\n"
        "q.append(v)\n"
        "w = q.popleft()\n"
        "s = set()\n"
        "s.add(v)\n"
        "(m,) = s\n"
    )
    assert _tag(engine, ns, "w") == _tag(engine, ns, "v") != 0
    assert _tag(engine, ns, "m") == _tag(engine, ns, "v")


def test_sorting_a_list_keeps_its_items_tags() -> None:
    engine, ns = _run("a = 3.5 * 1\nb = 1.5 * 1\nxs = [a, b]\nxs.sort()\nfirst = xs[0]\n")
    assert _tag(engine, ns, "first") == _tag(engine, ns, "b") != 0


def test_object_setattr_writes_an_attribute_slot() -> None:
    engine, ns = _run("class F:\n    pass\nv = 0.5 * 3\nf = F()\nobject.__setattr__(f, 'x', v)\n")
    assert engine.attr_tag(ns["f"], "x", ns["v"]) == _tag(engine, ns, "v") != 0


def test_values_unpacked_from_items_and_enumerate_keep_their_tags() -> None:
    engine, ns = _run(
        "v = 0.25 * 3\n"
        "d = {'k': v}\n"
        "for key, got in d.items():\n"
        "    pass\n"
        "for i, listed in enumerate([v]):\n"
        "    pass\n"
    )
    assert _tag(engine, ns, "got") == _tag(engine, ns, "v") != 0
    assert _tag(engine, ns, "listed") == _tag(engine, ns, "v")


def test_negative_control_a_value_made_by_c_code_has_its_own_tag() -> None:
    engine, ns = _run("v = 0.25 * 3\nw = float(str(v))\n")
    assert _tag(engine, ns, "w") not in (0, _tag(engine, ns, "v"))
