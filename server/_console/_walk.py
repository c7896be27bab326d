"""Each move of the console's provenance view, asked through the question contract: landing
on the run (its crash, else where it wrote its last output, else its end), tracing a value
from a step, following an operand of a trace to the step that produced it, the flows of a
value, and going to a step. `ask` is the session's one way to the sandbox
(sealtrace.server._session_actions.ask, audited there); questions are the contract's JSON
forms, built here from what the user chose and never spelled by the routes.

A click on a value asks `trace`, whose answer is the value's whole backward slice (up to
DEPTH computations); a click on one of its operands then follows that answer to the step
that produced the operand, and asks only for the stack there (`inspect-stack`). Recorded
source files are asked for once per walk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._errors import ActionRefused
from ._trail import Flow, Step, Trail

__all__ = ["DEPTH", "Ask", "flows", "follow", "goto", "land", "requests", "source", "trace"]

Ask = Callable[[dict[str, Any]], dict[str, Any]]
DEPTH = 64  # the contract's most: every branch followed to its inputs
UNPROCESSABLE = 422
_LANDINGS = {"crash": "The crash", "output": "The last output", "end": "The end of the run"}


def land(ask: Ask, trail: Trail, exit_status: int | None) -> int:
    """The first view: the crash for a run that exited with an error, else where it wrote its
    last output, else its end (a stop the run never reached is a 422, and the next is tried)."""
    order = ("crash", "output", "end") if exit_status not in (0, None) else ("output", "end")
    refused: ActionRefused | None = None
    for at in order:
        try:
            stack = ask({"kind": "inspect-stack", "at": at})
        except ActionRefused as exc:
            if exc.status != UNPROCESSABLE:
                raise
            refused = exc
            continue
        step = Step(int(stack["query"]["counter"]), stack, _LANDINGS[at], "landing")
        return trail.add(step, None)
    assert refused is not None
    raise refused


def _stack_at(ask: Ask, counter: int) -> dict[str, Any] | None:
    return ask({"kind": "inspect-stack", "at": str(counter)}) if counter > 0 else None


def trace(ask: Ask, trail: Trail, after: int, counter: int, var: str) -> int:
    """Trace `var` at the step `counter` (the view `after` shows): the view of the step that
    produced its value."""
    answer = ask({"kind": "trace", "at": str(counter), "var": var, "depth": DEPTH})
    trail.traces.append(answer)
    root = answer["root"]
    label = f"{var} = {show(answer['query']['value'])}"
    step = Step(int(root["counter"]), _stack_at(ask, int(root["counter"])), label, "trace",
                trace=len(trail.traces) - 1)  # fmt: skip
    return trail.add(step, after)


def follow(ask: Ask, trail: Trail, after: int, path: tuple[int, ...]) -> int:
    """Follow the trace the view `after` belongs to, to its step at `path` (indices of
    inputs from the trace's root): the step that produced that operand."""
    view = trail.views[after]
    if not isinstance(view, Step) or view.trace is None:
        raise ActionRefused(UNPROCESSABLE, "this view is not a step of a trace")
    node: dict[str, Any] = trail.traces[view.trace]["root"]
    try:
        for index in path:
            node = node["inputs"][index]
    except (IndexError, KeyError):
        raise ActionRefused(UNPROCESSABLE, "no such step in this trace") from None
    label = f"{show(node['value'])} ← {node['op']}"
    held = _held_in(view.stack, int(node["counter"]))
    if held:
        label = f"{held} = {show(node['value'])}"
    step = Step(int(node["counter"]), _stack_at(ask, int(node["counter"])), label, "operand",
                trace=view.trace, path=path)  # fmt: skip
    return trail.add(step, after)


def _held_in(stack: dict[str, Any] | None, counter: int) -> str:
    """The local of the innermost frame that holds the value made at `counter` (a stack
    answer gives each local's producing step), if one does."""
    frames = (stack or {}).get("frames") or []
    for local in frames[0]["locals"] if frames and counter else []:
        if int(local["tag"]) == counter:
            return str(local["name"])
    return ""


def flows(ask: Ask, trail: Trail, after: int, counter: int, source: str) -> int:
    """Where a value went: `source` is EXPR (at the step `counter`) or event:N."""
    where = source if source.startswith("event:") else f"{source}@{counter}"
    answer = ask({"kind": "flows", "from": where})
    label = f"flows of {source}"
    return trail.add(Flow(where, label, answer, counter), after)


def goto(ask: Ask, trail: Trail, after: int | None, at: str) -> int:
    """The step at `at` (a counter, FILE:LINE, return:FUNC, request:N, crash, output or
    end)."""
    stack = ask({"kind": "inspect-stack", "at": at})
    counter = int(stack["query"]["counter"])
    return trail.add(Step(counter, stack, f"step at {at}", "goto"), after)


def requests(ask: Ask, trail: Trail) -> list[dict[str, Any]]:
    """The run's request index (asked once a walk): each request a server in the run served,
    to go to with `request:N`. An agent that cannot answer it (an older one) shows none."""
    if trail.requests is None:
        try:
            trail.requests = list(ask({"kind": "requests"})["requests"])
        except ActionRefused as exc:
            if exc.status != UNPROCESSABLE:
                raise
            trail.requests = []
    return trail.requests


def source(ask: Ask, trail: Trail, path: str) -> list[str] | None:
    """A recorded source file's lines (asked once a walk); None for a file the recording does
    not hold (the replay image's libraries)."""
    if not path:
        return None
    if path not in trail.sources:
        try:
            trail.sources[path] = list(ask({"kind": "source", "file": path})["lines"])
        except ActionRefused as exc:
            if exc.status != UNPROCESSABLE:
                raise
            trail.sources[path] = None
    return trail.sources[path]


def matched(value: dict[str, Any] | None) -> bool:
    """Whether the value's text is shown (the agent matched it), not only its type and
    digest."""
    return bool(value) and value.get("repr") is not None  # type: ignore[union-attr]


def show(value: dict[str, Any] | None) -> str:
    """A value as the API shows it: its text where the agent could match it, else its type
    and the start of its digest."""
    if not value:
        return "?"
    if value.get("repr") is not None:
        return str(value["repr"])
    digest = str(value.get("digest") or "")[:8]
    kind = value.get("type") if value.get("type") not in (None, "", "?") else "value"
    return f"{kind} #{digest}" if digest else str(kind)
