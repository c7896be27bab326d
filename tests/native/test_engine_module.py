from __future__ import annotations

import sys

import pytest

from sealtrace import _engine


def test_built_for_this_interpreter() -> None:
    assert sys.version.split()[0] == _engine.PY_VERSION_BUILT
    assert sys.hexversion == _engine.PY_VERSION_HEX_BUILT


def test_counter_is_monotonic_and_refuses_to_wrap() -> None:
    counter = _engine.InstructionCounter()
    assert counter.value == 0
    assert [counter.tick() for _ in range(3)] == [1, 2, 3]
    assert counter.advance(0) == 3
    assert counter.advance(2**64 - 4) == 2**64 - 1
    with pytest.raises(OverflowError):
        counter.tick()
    assert counter.value == 2**64 - 1
