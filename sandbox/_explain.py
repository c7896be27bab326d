"""Text for people: provenance answers rendered the way the £0.00 walk-through reads.

A trace is shown as a tree from the value asked about back to its origins, each step with
its source line, operands by name and the value produced; then, for every origin reached
(an external input, an environment variable, a command-line argument), the chain of
source lines that led there: the provenance jumps.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Mapping
from typing import Any

from sealtrace.proxy.format import ParsedStream

from ._provenance import BEFORE_TAG, CUT_TAG, MARKER_OPS, UNKNOWN_TAG, origin_tag_kind

__all__ = ["SourceLines", "render_flows", "render_stack", "render_trace"]


class SourceLines:
    """The recorded application sources, to quote lines and shorten paths."""

    def __init__(self, parsed: ParsedStream) -> None:
        self._by_path: dict[str, list[str]] = {}
        for source in parsed.sources.values():
            blob = parsed.blobs.get(source.digest)
            if blob is not None and not source.path.endswith(os.sep):
                self._by_path[source.path] = blob.decode("utf-8", "replace").splitlines()
        roots = [r.rstrip(os.sep) + os.sep for r in parsed.meta.get("app_roots") or []]
        self._roots = sorted(roots, key=len, reverse=True)

    def line(self, path: str, number: int) -> str | None:
        lines = self._by_path.get(path)
        if lines is None or not 0 < number <= len(lines):
            return None
        return lines[number - 1].strip()

    def short(self, path: str) -> str:
        for root in self._roots:
            if path.startswith(root):
                return path[len(root) :]
        return path


def _value(v: Mapping[str, Any] | None) -> str:
    if not v:
        return "?"
    if v.get("repr") is not None:
        return str(v["repr"])
    return f"<{v.get('type')} {str(v.get('digest', ''))[:12]}>"


def _origin(origin: Mapping[str, Any] | None) -> str | None:
    if not origin:
        return None
    kind = origin.get("kind")
    if kind == "external":
        return f"◉ External input: {origin.get('call')} (event {origin.get('event')})"
    if kind == "env":
        return f"◉ Environment: {origin.get('call')}"
    if kind == "argv":
        return "◉ Command-line argument"
    if kind == "constant":
        return "◉ Constant in the code"
    return "◉ Origin unknown: the engine recorded no input for this step"


# Why a branch was not followed (Answerer.last_cuts).
_CUT_TEXT = {
    "depth": "the --depth bound ({depth} computations back)",
    "limit": "the slice's node or edge limit",
    "items": "more container items than one pass reads",
    "window": "made before the traced window opened (ask with --whole-run to follow them)",
}


def _key(node: Mapping[str, Any]) -> int:
    """The tag a node's cut is filed under: its counter, or a marker's tag."""
    if node.get("counter"):
        return int(node["counter"])
    if node.get("op") == MARKER_OPS["cut"]:
        return CUT_TAG
    if node.get("op") == MARKER_OPS["unknown"]:
        return UNKNOWN_TAG
    if node.get("op") == MARKER_OPS["window"]:
        return BEFORE_TAG
    return 0


def _where(node: Mapping[str, Any], src: SourceLines) -> str:
    if not node.get("file"):
        return str(node.get("op"))
    return (
        f"{src.short(node['file'])}:{node['line']} in {node['function']}, step {node['counter']:,}"
    )


def render_trace(
    doc: Mapping[str, Any],
    nodes: Mapping[int, Any],
    src: SourceLines,
    cuts: Mapping[int, str] | None = None,
) -> str:
    """`cuts`: where the answerer stopped following a branch, and why (Answerer.last_cuts)."""
    q = doc["query"]
    stop = q["stopped_at"]
    cuts = cuts or {}
    expanded: set[int] = set()

    def note_expanded(node: Mapping[str, Any]) -> None:
        if node["inputs"]:
            expanded.add(int(node["counter"]))
        for child in node["inputs"]:
            note_expanded(child)

    note_expanded(doc["root"])
    out = [
        f"{q['var']} = {_value(q['value'])}",
        f"  at {src.short(stop['file'] or '?')}:{stop['line']} in {stop['function']}, "
        f"step {stop['counter']:,}",
        *(
            [
                f"  traced in a window, from event {q['window']} (the request's connection) on: "
                "steps count from there, and what was made before is marked (--whole-run "
                "traces from the start)"
            ]
            if q.get("window") is not None
            else []
        ),
        "",
    ]

    def walk(node: Mapping[str, Any], prefix: str, last: bool) -> None:
        branch = "└─ " if last else "├─ "
        inner = prefix + ("   " if last else "│  ")
        if not node.get("counter") and node.get("op") in MARKER_OPS.values():
            # Items of a container that C code read: their producers are not known, or not read.
            text = {
                MARKER_OPS["unknown"]: "◉ Origin unknown: items put there by code the engine "
                "does not trace",
                MARKER_OPS["window"]: "◌ Made before the traced window: not followed (ask with "
                "--whole-run to follow it)",
            }.get(node["op"], f"⋯ not followed: {_CUT_TEXT['items']}")
            out.append(f"{prefix}{branch}{text}")
            return
        if not node.get("file") and node.get("op") == "?":
            # A step of the slice with no description: where it is, and why it stops here.
            cut = cuts.get(_key(node))
            why = (
                f"not followed: {_CUT_TEXT[cut].format(depth=q['depth'])}"
                if cut is not None
                else "not described: the pass that describes steps did not see it complete"
            )
            out.append(f"{prefix}{branch}step {node['counter']:,}: {why}")
            return
        out.append(f"{prefix}{branch}{_where(node, src)}")
        quoted = src.line(node["file"], node["line"]) if node.get("file") else None
        if quoted:
            out.append(f"{inner}  {node['line']:>4} │ {quoted}")
        captured = nodes.get(node["counter"], {})
        operands = [
            f"{o['name']} = {_value(o['value'])}" if o.get("name") else _value(o["value"])
            for o in captured.get("operands", [])
        ]
        detail = node["op"]
        if operands:
            detail += "(" + ", ".join(operands) + ")"
        out.append(f"{inner}  {detail} → {_value(node['value'])}")
        origin = _origin(node.get("origin"))
        if origin:
            out.append(f"{inner}  {origin}")
        cut = cuts.get(_key(node))
        if cut is not None and not node["inputs"]:
            out.append(f"{inner}  ⋯ not followed: {_CUT_TEXT[cut].format(depth=q['depth'])}")
        elif not node["inputs"] and node.get("counter") in expanded:
            out.append(f"{inner}  ↺ followed where it appears elsewhere in this tree")
        children = node["inputs"]  # every leaf, constants too: the JSON's tree, as it is
        for i, child in enumerate(children):
            walk(child, inner, i == len(children) - 1)

    walk(doc["root"], "", True)
    if q.get("truncated"):
        out.append("")
        reasons = sorted(set(cuts.values())) or ["limit"]
        why = "; ".join(_CUT_TEXT[r].format(depth=q["depth"]) for r in reasons)
        out.append(f"Truncated: some branches stop before their origins ({why}).")
    jumps = _jumps(doc, src)
    if jumps:
        out.append("")
        for chain, origin in jumps:
            out.append(f"{len(chain)} provenance jumps to {origin}:")
            out.append("  " + " → ".join(chain))
    return "\n".join(out)


def _jumps(doc: Mapping[str, Any], src: SourceLines) -> list[tuple[list[str], str]]:
    """For each non-constant origin reached: the distinct source lines from the symptom."""
    q = doc["query"]
    start = f"{src.short(q['stopped_at']['file'] or '?')}:{q['stopped_at']['line']}"
    found: list[tuple[list[str], str]] = []
    seen: set[tuple[str, ...]] = set()

    def walk(node: Mapping[str, Any], chain: list[str]) -> None:
        here = f"{src.short(node['file'])}:{node['line']}" if node.get("file") else node["op"]
        if chain[-1] != here:
            chain = [*chain, here]
        origin = node.get("origin") or {}
        if origin.get("kind") in ("external", "env", "argv"):
            label = (_origin(origin) or "").removeprefix("◉ ")
            key = (*chain, label)
            if key not in seen:
                seen.add(key)
                found.append((chain, label))
        for child in node["inputs"]:
            walk(child, chain)

    walk(doc["root"], [start])
    shortest: dict[str, list[str]] = {}
    for chain, label in found:
        if label not in shortest or len(chain) < len(shortest[label]):
            shortest[label] = chain
    return sorted(((c, label) for label, c in shortest.items()), key=lambda x: len(x[0]))


def render_flows(doc: Mapping[str, Any], src: SourceLines) -> str:
    q = doc["query"]
    if "event" in q:
        head = f"from event {q['event']['index']} ({q['event']['call']})"
    else:
        head = f"from {q['from']} = {_value(q.get('value'))} (step {q['counter']:,})"
    out = [head, ""]
    locations = doc["locations"]
    out.append(f"reached {len(locations)} location{'s' if len(locations) != 1 else ''}:")
    for loc in locations:
        quoted = src.line(loc["file"], loc["line"])
        out.append(
            f"  {src.short(loc['file'])}:{loc['line']} in {loc['function']} "
            f"(first at step {loc['counter']:,}, {loc['count']} times)"
            + (f"  │ {quoted}" if quoted else "")
        )
    outputs = doc["outputs"]
    out.append("")
    out.append(f"reached {len(outputs)} output{'s' if len(outputs) != 1 else ''}:")
    for o in outputs:
        out.append(f"  event {o['event']}: {o['call']} (step {o['counter']:,})")
    return "\n".join(out)


def _raised(raised: Mapping[str, Any]) -> str:
    """`Type: message` as a traceback's last line says it, or why part of it is not shown."""
    name = raised.get("type") or "an exception whose type the sandbox cannot name"
    message = raised.get("message")
    if message is None:
        return f"raised {name} (its message is not shown: making it runs the program's code)"
    if message.get("repr") is None:
        return f"raised {name}: {_value(message)} (a message the sandbox cannot show)"
    try:
        text = ast.literal_eval(message["repr"])
    except (ValueError, SyntaxError):  # clipped: shown as it is
        text = message["repr"]
    return f"raised {name}: {text}" if text != "" else f"raised {name}"


def render_stack(doc: Mapping[str, Any], src: SourceLines) -> str:
    out = [f"stopped before step {doc['query']['counter']:,} ({doc['query']['at']})"]
    if doc.get("exception") is not None:
        out.append(_raised(doc["exception"]))
    out.append("")
    for frame in doc["frames"]:
        out.append(f"{src.short(frame['file'])}:{frame['line']} in {frame['function']}")
        quoted = src.line(frame["file"], frame["line"])
        if quoted:
            out.append(f"  {frame['line']:>4} │ {quoted}")
        for local in frame["locals"]:
            seeded = origin_tag_kind(local["tag"])
            if seeded is not None:
                tag = f"{seeded[0]}[{seeded[1]}]"
            else:
                tag = f"step {local['tag']:,}" if local["tag"] else "no producer"
            out.append(f"    {local['name']} = {_value(local['value'])}   ({tag})")
        out.append("")
    return "\n".join(out).rstrip()
