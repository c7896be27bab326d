"""What a view of the walk shows, worked out from the answers (plain data for the templates,
which escape every string they print: recorded values and recorded source are hostile).

A step shows the recorded source around its line, the line marked; the values of the frame's
locals; the stack; and, when a trace led there, the operation that produced the value and
its operands. Operands computed on the same line are folded into the line (the `-` of
`subtotal * (1 - discount)` is shown with the `*`), so the operands listed are the values
that came from elsewhere: another line, an input, a constant. An operand that is the value a
local holds there is named after it (the stack answer gives each local's producing step).

In the source, the expressions of the step's own function that start at one of its locals
(`order.total_price`, `payload["email"]`) are buttons that trace that expression at this
step.
"""

from __future__ import annotations

import ast
import io
import keyword
import os
import tokenize
from dataclasses import dataclass, field
from typing import Any

from ._trail import Flow, Step, Trail
from ._walk import matched, show

__all__ = ["Operand", "Segment", "SourceLine", "describe_flow", "describe_step", "short_path"]

_CONTEXT = 6  # lines shown around the marked one, at least
_WINDOW = 24  # and at most this many either side


def short_path(path: str) -> str:
    """The last two parts of a recorded path (the page shows the whole one on hover)."""
    if not path:
        return "library code"
    parts = path.replace(os.sep, "/").split("/")
    return "/".join(parts[-2:])


@dataclass(frozen=True)
class Segment:
    text: str
    expr: str | None = None  # a button tracing this expression at the step


@dataclass(frozen=True)
class SourceLine:
    number: int
    segments: list[Segment]
    marked: bool


@dataclass(frozen=True)
class Operand:
    path: str  # the trace path that reaches it, "0.1.0" (the form's field)
    value: str
    type: str
    op: str
    where: str
    origin: str  # "" or how it entered the run: an external call, a constant, argv...
    name: str  # the local that holds it there, if one does
    followable: bool
    shown: bool  # its text is shown (else its type and digest only)


@dataclass
class StepView:
    title: str
    counter: int
    file: str
    where: str
    line: int
    function: str
    lines: list[SourceLine]
    recorded: bool
    frames: list[dict[str, Any]]
    frame: int
    locals: list[dict[str, Any]]
    traceable: bool  # the selected frame is the innermost: its locals can be traced
    exception: dict[str, Any] | None
    node: dict[str, Any] | None
    computed: list[Operand] = field(default_factory=list)
    operands: list[Operand] = field(default_factory=list)


def describe_step(
    trail: Trail, step: Step, sources: dict[str, list[str] | None], frame: int = 0
) -> StepView:
    frames = list((step.stack or {}).get("frames") or [])
    frame = frame if 0 <= frame < len(frames) else 0
    node = trail.node(step)
    top = frames[frame] if frames else {}
    # The line: the trace step's own where a trace led here, else the selected frame's.
    if node is not None and frame == 0 and node.get("line"):
        file, line, function = node["file"], int(node["line"]), node["function"]
    else:
        file, line, function = (
            top.get("file", ""),
            int(top.get("line") or 0),
            top.get("function", ""),
        )
    shown = frames[frame]["locals"] if frames else []
    names = {local["name"] for local in shown} if frame == 0 else set()
    text = sources.get(file)
    view = StepView(
        title=step.label,
        counter=step.counter,
        file=file,
        where=f"{short_path(file)}:{line}" if line else short_path(file),
        line=line,
        function=function,
        lines=_lines(text, line, names) if text is not None and line else [],
        recorded=text is not None,
        frames=[{"index": i, "function": f["function"] or "?",
                 "where": f"{short_path(f['file'])}:{f['line']}"} for i, f in enumerate(frames)],
        frame=frame,
        locals=[{"name": v["name"], "value": show(v["value"]), "type": v["value"]["type"],
                 "shown": matched(v["value"])} for v in shown],
        traceable=frame == 0 and bool(frames),
        exception=(step.stack or {}).get("exception"),
        node=None,
    )  # fmt: skip
    if node is not None:
        tags = {local["tag"]: local["name"] for local in (frames[0]["locals"] if frames else [])}
        view.node = {"op": node["op"], "value": show(node["value"]), "type": node["value"]["type"],
                     "origin": _origin(node), "name": tags.get(node["counter"], ""),
                     "shown": matched(node["value"])}  # fmt: skip
        view.computed, view.operands = _operands(node, step.path, tags)
    return view


def _origin(node: dict[str, Any]) -> str:
    origin = node.get("origin") or {}
    kind = origin.get("kind")
    if kind == "external":
        return f"external input: {origin.get('call')} (event {origin.get('event')})"
    if kind in ("argv", "env"):
        return f"{'command-line argument' if kind == 'argv' else 'environment'}: {node['op']}"
    if kind == "constant":
        return "a constant in the source"
    if kind == "unknown":
        return "made by code the engine does not trace"
    if kind == "cut":
        return "not followed: more items than one pass reads"
    return ""


def _operand(node: dict[str, Any], path: tuple[int, ...], tags: dict[int, str]) -> Operand:
    return Operand(
        path=".".join(map(str, path)),
        value=show(node["value"]),
        type=str(node["value"].get("type") or "?"),
        op=node["op"],
        where=f"{short_path(node['file'])}:{node['line']}" if node.get("line") else "",
        origin=_origin(node),
        name=tags.get(node["counter"], "") if node["counter"] else "",
        followable=node["counter"] > 0,
        shown=matched(node["value"]),
    )


def _operands(
    node: dict[str, Any], path: tuple[int, ...], tags: dict[int, str]
) -> tuple[list[Operand], list[Operand]]:
    """(what the step's line computed on the way, the operands that came from elsewhere)."""
    here = (node.get("file"), node.get("line"), node.get("function"))
    computed: list[Operand] = []
    came: list[Operand] = []
    seen: set[int] = set()

    def visit(parent: dict[str, Any], at: tuple[int, ...]) -> None:
        for index, child in enumerate(parent["inputs"]):
            where = (*at, index)
            counter = int(child["counter"])
            if counter and counter in seen:
                continue
            seen.add(counter)
            same = (child.get("file"), child.get("line"), child.get("function")) == here
            if same and child["inputs"] and not child.get("origin") and counter:
                computed.append(_operand(child, where, tags))
                visit(child, where)
            else:
                came.append(_operand(child, where, tags))

    visit(node, path)
    return computed, came


def describe_flow(flow: Flow) -> dict[str, Any]:
    answer = flow.answer
    query = answer.get("query") or {}
    locations = [
        {"where": f"{short_path(p['file'])}:{p['line']}", "file": p["file"],
         "function": p["function"], "counter": p["counter"], "count": p["count"]}
        for p in answer.get("locations", [])
    ]  # fmt: skip
    outputs = [
        {"event": o["event"], "call": o["call"], "counter": o["counter"]}
        for o in answer.get("outputs", [])
    ]
    source = str(query.get("from", flow.source))
    expression, _, at = source.rpartition("@") if "@" in source else (source, "", "")
    return {
        "title": flow.label,
        "source": source,
        "expression": expression,
        "at": at,
        "value": show(query.get("value")) if query.get("value") else "",
        "locations": locations,
        "outputs": outputs,
        "counter": flow.counter,
    }


# -- the recorded source --------------------------------------------------------------------


def _lines(text: list[str], line: int, names: set[str]) -> list[SourceLine]:
    first, last = _function_span(text, line)
    start = max(1, min(first, line - _CONTEXT), line - _WINDOW)
    end = min(len(text), max(last, line + _CONTEXT), line + _WINDOW)
    clickable = _expressions(text, names, first, last) if names else {}
    return [
        SourceLine(number, _segments(text[number - 1], clickable.get(number, [])), number == line)
        for number in range(start, end + 1)
    ]


def _function_span(text: list[str], line: int) -> tuple[int, int]:
    """The lines of the innermost function holding `line` (a module's own lines: just the
    statement); a source that does not parse: the line alone."""
    try:
        tree = ast.parse("\n".join(text))
    except (SyntaxError, ValueError):
        return line, line
    best = (line, line)
    found = False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            end = node.end_lineno or node.lineno
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if first <= line <= end and (not found or end - first <= best[1] - best[0]):
                best, found = (first, end), True
    if not found:
        for statement in tree.body:
            end = statement.end_lineno or statement.lineno
            if statement.lineno <= line <= end and not isinstance(
                statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            ):
                return statement.lineno, end
    return best


def _expressions(
    text: list[str], names: set[str], first: int, last: int
) -> dict[int, list[tuple[int, int, str]]]:
    """Per line, the (start, end, expression) of each `name(.attr | [literal])*` that starts
    at one of `names`, on lines first..last, longest first where they nest."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO("\n".join(text) + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return {}
    found: dict[int, list[tuple[int, int, str]]] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        previous = tokens[i - 1] if i else None
        starts = (
            tok.type == tokenize.NAME
            and tok.string in names
            and not keyword.iskeyword(tok.string)
            and first <= tok.start[0] <= last
            and not (
                previous is not None and previous.type == tokenize.OP and previous.string == "."
            )
        )
        if not starts:
            i += 1
            continue
        parts, j = [tok.string], i + 1
        end = tok.end
        while j + 1 < len(tokens):
            a, b = tokens[j], tokens[j + 1]
            if a.type == tokenize.OP and a.string == "." and b.type == tokenize.NAME:
                parts += [".", b.string]
                end, j = b.end, j + 2
                continue
            closing = tokens[j + 2] if j + 2 < len(tokens) else None
            if (a.string == "[" and b.type in (tokenize.STRING, tokenize.NUMBER)
                    and closing is not None and closing.string == "]"):  # fmt: skip
                parts += ["[", b.string, "]"]
                end, j = closing.end, j + 3
                continue
            break
        # A method being called is not a value (order.items.append(...)): stop before it.
        if (
            j < len(tokens)
            and tokens[j].type == tokenize.OP
            and tokens[j].string == "("
            and len(parts) > 1
            and parts[-2] == "."
        ):
            parts, end = parts[:-2], tokens[j - 3].end
        if tok.start[0] == end[0]:
            found.setdefault(tok.start[0], []).append((tok.start[1], end[1], "".join(parts)))
        i = max(j, i + 1)
    return found


def _segments(line: str, spans: list[tuple[int, int, str]]) -> list[Segment]:
    segments: list[Segment] = []
    at = 0
    for start, end, expr in sorted(spans):
        if start < at:
            continue
        if start > at:
            segments.append(Segment(line[at:start]))
        segments.append(Segment(line[start:end], expr))
        at = end
    if at < len(line) or not segments:
        segments.append(Segment(line[at:]))
    return segments
