"""A name's slot is found through a hint: where that name was last found, in any namespace
(Tracer::name_slot, SlotMap::find with a hint). The hint is only a guess: two namespaces
holding the same names in other orders (a module's globals and an `exec`'s, each big enough
to be indexed, and small ones, scanned) must each read and write their own slot."""

from __future__ import annotations

import pytest

from sealtrace._engine import Engine

from .test_opcodes import _attached

NAMES = [f"n{i}" for i in range(12)]


def _namespace(order: list[str], base: int) -> dict[str, object]:
    ns: dict[str, object] = {"__name__": "hints"}
    # Values no other name holds (not small ints): a slot's tag is trusted only while it
    # holds the value it tagged.
    source = "\n".join(f"{n} = {base + 1000 * k}" for k, n in enumerate(order))
    exec(compile(source, "<hints>", "exec"), ns)  # noqa: S102 - the stores above
    return ns


@pytest.mark.parametrize("size", [4, 12])
@pytest.mark.parametrize("eval_loop", [True, False])
def test_each_namespace_reads_its_own_slot_of_a_name(size: int, eval_loop: bool) -> None:
    forward = NAMES[:size]
    spaces = [(forward, 10**9), (forward[::-1], 2 * 10**9), (forward[1:] + forward[:1], 3 * 10**9)]
    reads = compile("\n".join(f"y{n} = {n}" for n in forward), "<hints>", "exec")
    engine = Engine(lambda filename: filename != "<hints>", eval_loop=eval_loop)
    with _attached(engine):
        made = [_namespace(order, base) for order, base in spaces]
        for _ in range(2):  # each namespace after the others: the hints point elsewhere
            for ns in made:
                exec(reads, ns)  # noqa: S102 - the loads above
                ns["y" + forward[0]] = ns["y" + forward[0]]  # nothing the engine sees
    for ns in made:
        for n in forward:
            tag = engine.item_tag(ns, n, ns[n])
            assert tag != 0, n
            assert engine.item_tag(ns, "y" + n, ns["y" + n]) == tag, (n, ns[n])
