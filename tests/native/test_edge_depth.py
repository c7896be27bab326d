"""A depth bound on the edges a pass keeps: a compaction drops every edge further than the
bound from all live values (moves counting no level, as a slice counts them). No slice within
the bound can read a dropped edge: every opcode case slices the same at the bound whether
the edges were kept whole or bounded, packed after every 8 edges (a compaction at each); and
an accumulator, whose ancestry is the whole run, keeps only its last levels' worth."""

from __future__ import annotations

from typing import Any

import pytest

from .opcode_cases import OpcodeCase
from .test_eval_loop import ALL_CASES, recorded_slices


def _slices(case: OpcodeCase, depth: int, bound: int) -> tuple[dict[int, Any], int]:
    """The slices at `depth` at the end of the run, its edges packed after every 8 and kept
    within `bound` levels (0: none); and how many input tags were kept."""
    return recorded_slices(case, eval_loop=True, batch=8, depth=depth, bound=bound)


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
@pytest.mark.parametrize("depth", [1, 3])
def test_a_slice_within_the_bound_is_the_same_as_over_every_edge(
    case: OpcodeCase, depth: int
) -> None:
    whole, _ = _slices(case, depth, 0)
    assert _slices(case, depth, depth)[0] == whole


ACCUMULATOR = OpcodeCase(
    "accumulator",
    """
    prices = [round(1 + (i * 37 % 101) / 10, 2) for i in range(100)]
    total = 0
    for i in range(3000):
        total += prices[i % 100] * (i % 3)
    answer = round(total / 3000, 4)
    """,
    frozenset(),
    (),
)


def test_an_accumulator_keeps_only_the_levels_a_slice_can_reach() -> None:
    # Without the bound every edge of the run stays (each iteration's total is made from the
    # one before); with it, what is kept no longer grows with the run.
    whole, kept_whole = _slices(ACCUMULATOR, 64, 0)
    bounded, kept = _slices(ACCUMULATOR, 64, 64)
    assert bounded == whole
    assert kept * 5 < kept_whole, (kept, kept_whole)
    deepest = max(level for nodes, _truncated in bounded.values() for _tag, level in nodes)
    assert deepest == 64  # the slice reaches the bound: the kept edges hold it whole


@pytest.mark.parametrize("bound", [1, 3])
def test_a_slice_deeper_than_the_bound_is_refused(bound: int) -> None:
    # The values at the bound lost the edges that made them: a deeper slice would show them as
    # origins, so the engine refuses it; at the bound it answers.
    assert _slices(ACCUMULATOR, bound, bound)[0]
    with pytest.raises(ValueError, match=f"levels deep over edges kept within {bound}"):
        _slices(ACCUMULATOR, bound + 1, bound)
