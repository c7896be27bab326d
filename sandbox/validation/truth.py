"""The ground truth of a corpus program: where its traced value really came from.

A corpus program (sealtrace.sandbox.validation.corpus) marks its own lines with comments,
never with line numbers:

    row = db.execute(QUERY, (sku,)).fetchone()  # <- origin:price-row
    fee = FEE_CENTS                             # <- allow:fee
    banner = os.environ["BANNER"]               # <- decoy:banner
    print(json.dumps(report))                   # <- trace

A line may carry several markers (`# <- origin:rows allow:rows-sql`). Its manifest entry
turns markers into three sets of `Mark`s:

- origins: where the traced value's data came from, and so what its full backward slice
  must name as leaves. An input (an external read, an environment variable, a command-line
  argument) whose value flowed into the traced value by computation or by moves, and each
  named constant (a literal bound to a module or class attribute, or a parameter default)
  that did. Recall is measured on these.
- allowed: real ancestors that a correct answer may name but need not. Two sorts: how an
  input was fetched (the path of a file, the database connection, the query text and its
  parameters, the socket), and incidental literals that take part in the computation (the
  100 in `pence / 100`, the 2 in `round(x, 2)`). Naming them is never a mistake.
- decoys: inputs and constants read by the same program, often into the same containers,
  objects and closures, that do not reach the traced value. A decoy must not appear
  anywhere in the slice, as an origin or as any step on its line.

What is *not* an ancestor, by the same definition: the container an item was read from and
the key or index that selected it (an item's origin is what was stored in its slot), the
empty list or dict that a loop filled, and a default that was overwritten before the read.
An answer that names one of those as an origin is the confident wrong answer the corpus is
there to catch; the scoring (sealtrace.sandbox._scoring) counts it as a false positive.

An external origin is identified by the recorded events the marked line asked for: every
event served while that line was the innermost line of the program's own code (a read made
inside a library, an ORM's fetch or the socket read behind a web request, belongs to the
application line that called the library; a read made by an event loop while no application
frame ran belongs to the line that runs the loop). `value` keeps only the events whose
recorded result shows that text, `call` only those whose callee contains it; an event that
raised is never an origin. Each such event is one item of recall. The line's other events
(the statement behind a fetch, the open behind a read) are how the input was fetched: an
answer may name them.

A program may also carry a forward truth (`Flow`): the outputs a value reaches (`flows`),
named the same way, by the lines that made them (`output` marks: the writes a marked line
asked for, with `value` the text the written bytes show).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "INPUT_KINDS",
    "KINDS",
    "ROLES",
    "Flow",
    "Mark",
    "Truth",
    "argv",
    "constant",
    "env",
    "external",
    "line",
    "markers",
    "output",
    "resolve",
]

ROLES = ("origin", "allow", "decoy")
INPUT_KINDS = ("external", "env", "argv")
KINDS = (*INPUT_KINDS, "constant")
_COMMENT = "# <-"
_TOKEN = re.compile(r"(?<![\w-])(origin|allow|decoy):([A-Za-z0-9_.-]+)")


@dataclass(frozen=True)
class Mark:
    """One entry of a ground truth: a kind, and the marker naming its line (argv: its index).

    `kind` is one of KINDS, or "any" for a decoy line (whatever the answer shows there).
    """

    kind: str
    name: str = ""
    file: str = "app.py"
    argv: int | None = None
    value: str | None = None
    call: str | None = None

    def describe(self) -> str:
        where = f"argv[{self.argv}]" if self.kind == "argv" else f"{self.file}:{self.name}"
        extra = f" ~{self.value!r}" if self.value is not None else ""
        return f"{self.kind} {where}{extra}"


def external(
    name: str, value: str | None = None, *, call: str | None = None, file: str = "app.py"
) -> Mark:
    return Mark("external", name, file, value=value, call=call)


def env(name: str, value: str | None = None, *, file: str = "app.py") -> Mark:
    return Mark("env", name, file, value=value)


def argv(index: int) -> Mark:
    return Mark("argv", argv=index)


def constant(name: str, value: str | None = None, *, file: str = "app.py") -> Mark:
    """A literal at the marked line; `value` is its repr exactly, when the line has several."""
    return Mark("constant", name, file, value=value)


def line(name: str, value: str | None = None, *, file: str = "app.py") -> Mark:
    """A decoy line: nothing made there may appear in the slice (`value`: only what shows it)."""
    return Mark("any", name, file, value=value)


def output(name: str, value: str | None = None, *, file: str = "app.py") -> Mark:
    """The outputs (stdout, stderr, file and socket writes) the marked line made; `value`: only
    those whose written bytes show it."""
    return Mark("output", name, file, value=value)


@dataclass(frozen=True)
class Flow:
    """The forward truth of a program: `source`, an expression evaluated just before the
    line marked `at` first runs, reaches exactly the outputs of `reaches`, and none of
    `avoids` (or any other output)."""

    source: str
    at: str
    reaches: tuple[Mark, ...]
    avoids: tuple[Mark, ...] = ()
    file: str = "app.py"


@dataclass(frozen=True)
class Truth:
    origins: tuple[Mark, ...]
    allowed: tuple[Mark, ...] = ()
    decoys: tuple[Mark, ...] = ()

    def roles(self) -> list[tuple[str, Mark]]:
        return [
            *(("origin", m) for m in self.origins),
            *(("allow", m) for m in self.allowed),
            *(("decoy", m) for m in self.decoys),
        ]


def markers(path: Path) -> dict[str, tuple[str, int]]:
    """Every `role:NAME` marker in a program file: NAME -> (role, line). A name is marked
    once per file (a truth names one line). An allowed mark may name an origin's line: the
    other events that line asked for (the cursor behind a fetch) are how it was fetched."""
    found: dict[str, tuple[str, int]] = {}
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if _COMMENT not in text:
            continue
        for role, name in _TOKEN.findall(text.split(_COMMENT, 1)[1]):
            if name in found:
                raise ValueError(f"{path}: {name} is marked on two lines")
            found[name] = (role, number)
    return found


def resolve(mark: Mark, role: str, root: Path) -> str:
    """The mark's place as the scoring names places: FILE:LINE inside the program, or
    argv[N]. Checks that the marker exists and has a role this entry may use."""
    if mark.kind == "argv":
        if mark.argv is None:
            raise ValueError("an argv mark needs its index")
        return f"argv[{mark.argv}]"
    found = markers(root / mark.file).get(mark.name)
    if found is None:
        raise ValueError(f"{mark.file} has no marker named {mark.name!r}")
    marked_role, number = found
    allowed = {
        "origin": ("origin",),
        "decoy": ("decoy",),
        "allow": ("allow", "origin"),
        "flow": ROLES,  # a flow's source and outputs may be on any marked line
    }[role]
    if marked_role not in allowed:
        raise ValueError(f"{mark.file}: {mark.name} is marked {marked_role}, not {role}")
    return f"{mark.file}:{number}"
