"""Describing a value runs none of the program's code, so a pass that describes values runs the
program exactly as one that does not.

Every pass of a question must number the run the same way: the answers of a locate pass, a
slice pass and a capture pass are joined by step number, and a pass from a checkpoint is
checked against the pass it stands for. A capture describes each step's value; if that ran
code of the program's (a `__repr__`, a property, a metaclass's attribute lookup), the code
could change the program's state, and the program would then take another path in that pass
only. pathlib did exactly that: its repr() caches the path's string in the path, so the
program's later str() ran fewer instructions in a pass that had described the path, and the
Flask + SQLAlchemy request (whose importlib.metadata lookups build paths) was numbered
differently from the capture on (docs/provenance.md, "Found: the passes that ran a finalizer
twelve steps apart").
"""

from __future__ import annotations

import contextlib
import fractions
import pathlib
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ..conftest import KeyFiles
from .replaying import line_of, record, walk, write_app

pytestmark = pytest.mark.integration

# Each of the three values at the top of main() counts, in the program's own state, every time
# code of the program's runs on it: pathlib caches its string when asked for it, the class's
# metaclass counts lookups of its names, and the proxy counts lookups of its __class__ (what
# isinstance() asks an object of another type for).
PROGRAM = """\
import pathlib


class Counted(type):
    seen = 0

    def __getattribute__(cls, name):
        if name in ("__qualname__", "__module__", "__name__"):
            Counted.seen += 1
        return super().__getattribute__(name)


class Shape(metaclass=Counted):
    pass


class Proxy:
    looked = 0

    @property
    def __class__(self):
        Proxy.looked += 1
        return Proxy


def main():
    here = pathlib.PurePosixPath("orders", "2026", "12.csv")
    kind = Shape
    proxy = Proxy()
    name = str(here)
    touched = Counted.seen + Proxy.looked
    extra = [kind, proxy] * touched
    for _ in extra:
        pass
    return len(name) + touched


RESULT = main()
"""


@contextlib.contextmanager
def _every_step(tmp: pathlib.Path, program: str, name: str) -> Iterator[tuple[Any, dict[int, Any]]]:
    """`program` recorded, an inquiry on it, and every step of its run described."""
    from sealtrace.proxy import write_keypair
    from sealtrace.sandbox import Inquiry, load_recording

    keys = KeyFiles(*write_keypair(tmp / "keys", "test"))
    app = write_app(tmp / "app", program, name)
    done = record(keys, tmp / "rec", [sys.executable, str(app)])
    assert done.proc.returncode == 0, done.proc.stderr.decode()
    data, parsed = load_recording(str(tmp / "rec"), keys.identity)
    with Inquiry(data, parsed) as inquiry:
        total = inquiry.survey()["instructions"]
        yield inquiry, inquiry.capture(set(range(1, total + 1)))


@pytest.fixture(scope="module")
def described(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[int, Any], dict[int, Any]]:
    """(every step of the run described, the steps from `name = str(here)` on described by a
    pass that described nothing before them)."""
    with _every_step(tmp_path_factory.mktemp("describing"), PROGRAM, "shapes.py") as (
        inquiry,
        every,
    ):
        total = max(every)
        first = min(
            c
            for c, node in every.items()
            if str(node["file"]).endswith("shapes.py")
            and node["line"] == line_of(PROGRAM, "name = str(here)")
        )
        late = inquiry.capture(set(range(first, total + 1)))
    return every, late


def _shown(node: dict[str, Any]) -> tuple[str, int, str | None]:
    return node["op"], node["line"], (node["value"] or {}).get("repr")


def test_the_values_are_described(described: tuple[dict[int, Any], dict[int, Any]]) -> None:
    every, _ = described
    lines = {line_of(PROGRAM, text) for text in ("here = ", "kind = ", "proxy = ")}
    shown = {_shown(n)[0]: _shown(n)[2] for n in every.values() if n["line"] in lines}
    assert shown["CALL PurePosixPath"] == "PurePosixPath('orders/2026/12.csv')"
    assert shown["LOAD_GLOBAL Shape"] == "<Counted Shape>"
    assert shown["CALL Proxy"] == "Proxy()"


def test_a_pass_that_describes_values_runs_the_program_as_one_that_does_not(
    described: tuple[dict[int, Any], dict[int, Any]],
) -> None:
    every, late = described
    assert late, "the late capture described nothing"
    differ = [c for c in late if _shown(late[c]) != _shown(every[c])]
    assert not differ, [(c, _shown(every[c]), _shown(late[c])) for c in differ[:3]]
    # And neither pass ran the program's code: nothing was counted, so `touched` is 0.
    touched = line_of(PROGRAM, "touched = Counted.seen")
    sums = [n for n in every.values() if n["line"] == touched and n["op"] == "BINARY_OP +"]
    assert [_shown(n)[2] for n in sums] == ["0"]


# The young generation's count of allocations decides when the collector runs, and so when a
# finalizer runs, at which step: describing values must not move it. Slicing a list for its
# repr took the program's cached slice object (a free list of one) and left another: the
# program's next slice then skipped or made an allocation the count sees, and a finalizer
# (the served request's ZipFile.__del__, twelve steps) ran at another step in that pass.
COUNTED = """\
import contextvars
import gc


def firsts(rows):
    return ",".join(row for row in rows[0:2])


async def ticks():
    for n in range(3):
        yield n


def drained():
    # An async generator driven by hand, and contexts: the other free lists a scope sets aside.
    got, agen = [], ticks()
    while True:
        try:
            agen.asend(None).send(None)
        except StopIteration as step:
            got.append(step.value)
        except StopAsyncIteration:
            return got


def main():
    rows = ["session", "instance", "other"]
    joined = firsts(rows)
    made = [{"n": n, "f": n / 3, "t": (n, str(n))} for n in range(50)]
    ticked = [contextvars.copy_context().run(drained) for _ in range(3)]
    counts = gc.get_count()
    return joined, len(made), ticked, counts


RESULT = main()
"""


def test_describing_values_leaves_the_collector_s_count_as_it_was(tmp_path: pathlib.Path) -> None:
    with _every_step(tmp_path, COUNTED, "counted.py") as (inquiry, every):
        line = line_of(COUNTED, "counts = gc.get_count()")
        step = next(
            c
            for c, n in every.items()
            if n["line"] == line
            and str(n["file"]).endswith("counted.py")
            and n["op"].startswith("CALL ")
        )
        slicing = [c for c, n in every.items() if n["op"] == "BINARY_SUBSCR"]
        alone = inquiry.capture({step})[step]
        with_the_slice = inquiry.capture({*slicing, step})[step]
    assert slicing, "the program slices nothing"
    assert every[step]["value"]["repr"] == alone["value"]["repr"]
    assert with_the_slice["value"]["repr"] == alone["value"]["repr"]


@pytest.mark.parametrize(
    "value",
    [
        pathlib.PurePosixPath("a", "b.txt"),
        pathlib.Path("/srv", "orders"),
        pathlib.PurePosixPath(),
        pathlib.PureWindowsPath("C:/Users", "x"),
        fractions.Fraction(3, 4),
        uuid.UUID(int=0xAB54A98CEB1F0AD2),
    ],
    ids=repr,
)
def test_a_standard_library_value_is_shown_as_its_repr_without_calling_it(value: Any) -> None:
    from sealtrace.sandbox._provenance import _safe_repr

    fresh = type(value)(value) if isinstance(value, pathlib.PurePath) else value
    assert _safe_repr(fresh) == repr(value)
    if isinstance(fresh, pathlib.PurePath):  # its string is still not cached in it
        with pytest.raises(AttributeError):
            pathlib.PurePath.__dict__["_str"].__get__(fresh)


def test_an_int_too_long_for_a_decimal_string_is_shown_in_hexadecimal() -> None:
    # repr() of it raises (int-to-str conversion is limited to 4,300 digits): a capture's
    # description then failed, and the step had no value. Its digest stays its own.
    from sealtrace.sandbox._provenance import summarize

    big = summarize(10**5000)
    assert big["repr"] is not None and big["repr"].startswith("0x")
    assert big["digest"] != summarize(10**5000 + 1)["digest"]
    assert summarize(12)["repr"] == "12"


# `fmt % mapping` reads only the items the format names, which the engine finds by reading the
# format's UTF-8. PyUnicode_AsUTF8AndSize keeps that UTF-8 in a non-ASCII string, so the
# program saw its format string grow (sys.getsizeof) in a pass that had looked, and a capture
# described a value the run never had.
FORMATTED = """\
import sys

FMT = "total → %(total)s"


def main():
    row = {"total": 12.5, "unused": 3}
    before = sys.getsizeof(FMT)
    msg = FMT % row
    grown = sys.getsizeof(FMT) - before
    return msg, grown


RESULT = main()
"""


def test_reading_a_format_s_fields_leaves_the_format_as_it_was(tmp_path: pathlib.Path) -> None:
    from sealtrace.sandbox.questions import Trace

    with _every_step(tmp_path, FORMATTED, "formatted.py") as (inquiry, every):
        (grown,) = (n for n in every.values() if n["op"] == "BINARY_OP -")
        assert grown["value"]["repr"] == "0"
        at = f"formatted.py:{line_of(FORMATTED, 'return msg, grown')}"
        assert inquiry.trace(Trace(at=at, var="grown", depth=2))["root"]["value"]["repr"] == "0"
        # And the formatted message still comes from the one item its format names.
        doc = inquiry.trace(Trace(at=at, var="msg", depth=8))
    shown = {n["value"]["repr"] for n in walk(doc["root"]) if n["value"]}
    assert "12.5" in shown and "3" not in shown, shown
