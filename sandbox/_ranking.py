"""Candidate root causes of a traced value, ranked: the answer to "what made this value?".

A trace (sealtrace.sandbox._inquiry, `trace --json`) is the value's backward slice: every
step that produced it, back to where data came into the program. This module reads that
slice and ranks the places where a cause can enter.

Candidates. A candidate is a step of the trace where a value enters the program:

- An input: an external call's result, an environment variable, or a command-line argument.
  Such a step is a candidate even when it has inputs of its own. A read's inputs (the
  cursor, the connection, the path) say how the data was fetched, and are candidates
  further away in their own right.
- A named constant: a literal that is bound to a name, and so is configuration that someone
  chose. That is a literal on the right-hand side of an assignment to a module or class
  attribute, or a literal in a parameter's default value, run by that scope's own code.
  Other literals (the 1 in `1 - rate`, a dictionary key, the 2 in `round(x, 2)`, the
  `return None` a class body ends with) are incidental: they are how the code computes, not
  what it was told. This is decided from the recorded source of the code that ran: the
  step's line, its scope, and its value must match a literal bound there.

Ranking. Candidates are ordered by the fewest hops from the traced value. A hop is one edge
of the slice, from a value to an input of the step that produced it. A step reached along
several paths counts its shortest. The nearest origin passes through the fewest
transformations on its way to the value, so it is the most direct cause. The way an input
was fetched always ranks behind the input itself. Ties are broken as follows:

1. inputs before named constants, because an input can change between runs while the code
   stays the same;
2. the earlier step (instruction counter) first;
3. then by location, so the order is total.

The ranking reads only the trace, and works on a trace of any depth. A deeper trace adds
candidates further away; the ones found within the shallower depth keep their distances.
"""

from __future__ import annotations

import ast
import os
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sealtrace.proxy.format import ParsedStream

__all__ = ["INPUT_KINDS", "Candidate", "NamedConstants", "rank", "slice_origins"]

INPUT_KINDS = ("external", "env", "argv")


@dataclass(frozen=True)
class Candidate:
    kind: str
    where: str  # FILE:LINE (relative to the program's root when inside it), or argv[N] / env[N]
    hops: int
    counter: int
    op: str
    call: str | None
    value: str | None

    @property
    def is_input(self) -> bool:
        return self.kind in INPUT_KINDS

    def describe(self) -> str:
        return f"{self.kind} {self.where}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class NamedConstants:
    """The literals in each source that are bound to a name: assignments to module and class
    attributes, and parameter defaults. Each is known by its line, the scope whose code runs
    it, and the reprs of the constant values it can compile to."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        self._found: dict[str, dict[int, dict[str, set[str]]]] = {}
        for path, text in sources.items():
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            found: dict[int, dict[str, set[str]]] = {}
            _scan(tree.body, "<module>", "", True, found)
            self._found[path] = found

    @classmethod
    def from_recording(cls, parsed: ParsedStream) -> NamedConstants:
        sources = {}
        for source in parsed.sources.values():
            blob = parsed.blobs.get(source.digest)
            if blob is not None:
                sources[source.path] = blob.decode("utf-8", "replace")
        return cls(sources)

    def holds(self, file: str, line: int, function: str, value: str | None) -> bool:
        """Whether the constant `value` (a repr) loaded at file:line by `function` is one."""
        reprs = self._found.get(file, {}).get(line, {}).get(function)
        if not reprs or value is None:
            return False
        if value.endswith("…"):  # clipped by the engine's summary
            return any(r.startswith(value[:-1]) for r in reprs)
        return value in reprs


def _scan(
    body: Iterable[ast.stmt],
    scope: str,
    prefix: str,
    binds: bool,
    found: dict[int, dict[str, set[str]]],
) -> None:
    """Walk one scope's statements. `scope` is the qualname of the code object that runs
    them; `prefix` is what a class or function defined here prepends to its name; `binds`
    says whether an assignment here sets a module or class attribute."""

    def mark(line: int, reprs: Iterable[str]) -> None:
        found.setdefault(line, {}).setdefault(scope, set()).update(reprs)

    for stmt in body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            if binds and stmt.value is not None:
                for line, text in _literals(stmt.value):
                    mark(line, [text])
        elif isinstance(stmt, ast.ClassDef):
            name = prefix + stmt.name
            _scan(stmt.body, name, name + ".", True, found)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = stmt.args
            defaults = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
            for default in defaults:
                for line, text in _literals(default):
                    mark(line, [text])
            values = [_literal(d) for d in args.defaults]
            if args.defaults and all(v is not _NOT_LITERAL for v in values):
                # CPython folds literal positional defaults into one tuple on the `def` line.
                mark(stmt.lineno, [repr(tuple(values))])
            name = prefix + stmt.name
            _scan(stmt.body, name, name + ".<locals>.", False, found)
        else:
            for attr in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, attr, None)
                if isinstance(inner, list):
                    _scan(inner, scope, prefix, binds, found)
            for handler in getattr(stmt, "handlers", None) or []:
                _scan(handler.body, scope, prefix, binds, found)
            for case in getattr(stmt, "cases", None) or []:
                _scan(case.body, scope, prefix, binds, found)


_NOT_LITERAL = object()


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


def _literals(expr: ast.AST) -> list[tuple[int, str]]:
    """(line, repr) of every constant that `expr`'s literals can compile to: each literal,
    and a literal list or set as the tuple the compiler stores for it."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(expr):
        if not isinstance(node, ast.expr):
            continue
        value = _literal(node)
        if value is _NOT_LITERAL:
            continue
        out.append((node.lineno, repr(value)))
        if isinstance(value, (list, set)):
            out.append((node.lineno, repr(tuple(value))))
    return out


Key = tuple[int, str]  # a trace node's identity: its counter, and its op for seeded origins


def rank(
    root: Mapping[str, Any], named: NamedConstants, program_root: Path | None = None
) -> list[Candidate]:
    """Every candidate root cause in the trace under `root` (a NODE of `trace --json`), best
    first. Locations inside `program_root` are shown relative to it."""
    prefix = str(program_root).rstrip(os.sep) + os.sep if program_root else None
    nodes, edges = _graph(root)
    found: list[Candidate] = []
    for key, hops in _hops(_key(root), edges).items():
        candidate = _as_candidate(nodes[key], hops, named, prefix)
        if candidate is not None:
            found.append(candidate)
    return sorted(found, key=lambda c: (c.hops, not c.is_input, c.counter, c.where, c.op))


def _key(node: Mapping[str, Any]) -> Key:
    return int(node["counter"]), str(node["op"])


def _graph(root: Mapping[str, Any]) -> tuple[dict[Key, Mapping[str, Any]], dict[Key, list[Key]]]:
    """The trace as a graph. A tree shows a step's inputs only once, wherever it was
    expanded first, and that need not be its nearest occurrence: distances come from here."""
    nodes: dict[Key, Mapping[str, Any]] = {}
    edges: dict[Key, list[Key]] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        key = _key(node)
        nodes.setdefault(key, node)
        out = edges.setdefault(key, [])
        for child in node.get("inputs") or []:
            if _key(child) not in out:
                out.append(_key(child))
            stack.append(child)
    return nodes, edges


def _hops(root: Key, edges: Mapping[Key, list[Key]]) -> dict[Key, int]:
    hops = {root: 0}
    queue = deque([root])
    while queue:
        key = queue.popleft()
        for child in edges.get(key, []):
            if child not in hops:
                hops[child] = hops[key] + 1
                queue.append(child)
    return hops


def _as_candidate(
    node: Mapping[str, Any], hops: int, named: NamedConstants, prefix: str | None
) -> Candidate | None:
    origin = node.get("origin") or {}
    kind = origin.get("kind")
    file = str(node.get("file") or "")
    line = int(node.get("line") or 0)
    op = str(node.get("op") or "")
    value = (node.get("value") or {}).get("repr")
    if kind == "constant":
        if not op.startswith("LOAD_CONST") or not named.holds(
            file, line, str(node.get("function")), value
        ):
            return None
    elif kind not in INPUT_KINDS:
        return None
    if not file:
        where = op  # a seeded origin: argv[N] or env[N]
    else:
        shown = file[len(prefix) :] if prefix and file.startswith(prefix) else file
        where = f"{shown}:{line}"
    return Candidate(
        kind=str(kind),
        where=where,
        hops=hops,
        counter=int(node["counter"]),
        op=op,
        call=origin.get("call"),
        value=value,
    )


def slice_origins(root: Mapping[str, Any]) -> tuple[set[str], bool]:
    """Every origin kind in a trace, and whether the trace is complete: no step was left
    unexpanded by the depth limit."""
    nodes, edges = _graph(root)
    kinds = {str(n["origin"]["kind"]) for n in nodes.values() if n.get("origin")}
    complete = all(n.get("origin") or edges[k] for k, n in nodes.items())
    return kinds, complete
