"""Provenance queries over one recording, answered by deterministic re-execution.

Each question is answered by one or more replays of the same recording with the engine
attached (sealtrace.sandbox._provenance does the work inside each replay). A replay is
deterministic, so instruction counters name the same instant in every pass:

    trace          one pass keeping every instruction's input tags up to where the value is
                   asked about, which locates it there and walks back its backward slice;
                   one more captures every step of the slice
    flows          locate the value (or take a recorded event), then one pass that
                   follows it forward
    inspect_stack  locate, and report the frames there

The JSON a `trace` returns is a public contract (docs/provenance.md):
{"query": {...}, "root": NODE}, NODE = {"counter", "file", "line", "function", "op",
"value": {"type", "repr", "digest"}, "origin", "inputs": [NODE, ...]}.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from sealtrace.proxy.format import ParsedStream, Request

from ._checkpoints import CheckpointedReplay, CheckpointPolicy, Unavailable
from ._errors import DivergenceError, PassesDisagreedError, QueryError
from ._provenance import (
    ARGV_TAG,
    BEFORE_TAG,
    input_tags,
    marker_node,
    origin_tag_kind,
    parse_expression,
    summarize,
)
from ._replay_process import Plaintext, Receipt, replay
from .protocol import source_texts
from .questions import (
    MAX_DEPTH,
    At,
    Flows,
    FlowsAnswer,
    InspectStack,
    ReceiptAnswer,
    Replay,
    Requests,
    RequestsAnswer,
    Source,
    SourceAnswer,
    StackAnswer,
    Trace,
    TraceAnswer,
    parse_at,
    parse_from,
    recording_end,
    requests_answer,
    resolve_function,
    resolve_source,
    source_answer,
)

__all__ = ["Inquiry", "request_window"]

_Answer = TypeVar("_Answer")


def request_window(parsed: ParsedStream, number: int) -> int:
    """Where a windowed inquiry into request `number` (from 1) opens: the event of the
    accept() that made its connection, so that the request (and any before it on that
    connection) lies inside."""
    return _indexed_request(parsed, number).accepted


def _indexed_request(parsed: ParsedStream, number: int) -> Request:
    """Request `number` (from 1) of the recording's index; a QueryError if there is none."""
    index = parsed.request_index()
    if not parsed.indexes_requests:
        raise QueryError("this recording keeps no request index (an older recorder made it)")
    if not 1 <= number <= len(index):
        plural = "" if len(index) == 1 else "s"
        raise QueryError(f"request:{number}: the run served {len(index)} indexed request{plural}")
    return index[number - 1]


# What a special stop the run never reached says (its survey holds no counter for it).
_NO_STOP = {
    "crash": "the recorded run did not crash",
    "output": "the recorded run wrote no output",
    "end": "the recorded run has no main-module instruction to stop at",
}


class Inquiry:
    """One verified recording, queried by as many replay passes as each question needs: the
    in-process `Answerer` of the question contract (sealtrace.sandbox.questions)."""

    def __init__(
        self,
        data: bytes,
        parsed: ParsedStream,
        *,
        timeout: float | None = None,
        checkpoints: CheckpointPolicy | None = None,
        digest_key: bytes | None = None,
        window: int | None = None,
        trace_callback: bool = False,
    ) -> None:
        """With a checkpoint policy, the first pass replays the whole run once taking
        checkpoints, and every later pass forks from the nearest one (close() ends them).

        With a window (an event index), every pass replays without the engine up to that
        event and traces from there on (`request_window`): counters count from the window,
        and an input made before it is a "made before the traced window" marker.

        The engine runs the replayed frames in its own evaluation loop; `trace_callback`
        asks for the trace callback instead (the reference the loop is held to: the same
        answers, slower)."""
        self.window = window
        self.trace_callback = trace_callback
        self.data = Plaintext(data)  # what every pass replays
        # What this process asks of the stream itself (sources, callees): not the recorded
        # data, which every pass decodes for itself from `data` (a second copy here would
        # count twice against the memory a session may use).
        self.parsed = dataclasses.replace(
            parsed,
            blobs={s.digest: parsed.blobs[s.digest] for s in parsed.sources.values()
                   if s.digest in parsed.blobs},
            texts={},
        )  # fmt: skip
        self.meta = parsed.meta
        self.timeout = timeout
        self.policy = checkpoints
        # Sandboxed sessions: every value summary also carries a digest keyed with this.
        self.digest_key = digest_key
        # In a checkpointed session, a trace at request:N follows the value back to where
        # that request's connection was accepted: (that accept() event, the counter of the
        # instruction that made the call). Steps before are "made before the traced window"
        # markers, and every pass starts at a checkpoint near the request, not at the start.
        self._since: tuple[int, int] | None = None
        self._replay: CheckpointedReplay | None = None
        self._survey: dict[str, Any] | None = None
        # In a session: the counter each line or return stop located was at (stop_spec).
        self._located: dict[tuple[tuple[str, Any], ...], int] = {}
        self._marked_events: dict[int, list[int]] | None = None
        # A question asked again because its passes from checkpoints disagreed: every pass
        # of it replays from the start (_agreeing).
        self._from_start = False
        self.passes = 0
        # The captured instructions of the last trace, with operand names (for text output).
        self.last_nodes: dict[int, dict[str, Any]] = {}
        # Where the last trace stopped following a branch, and why: "depth" (the bound),
        # "limit" (the slice's node or edge limit), "items" (more items than a pass reads).
        self.last_cuts: dict[int, str] = {}
        self.truncated = False
        # Each step of the last slice with the inputs its pass recorded for it.
        self.slice_inputs: dict[int, list[int]] = {}

    # -- passes ---------------------------------------------------------------------------

    def __enter__(self) -> Inquiry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._replay is not None:
            self._replay.close()
            self._replay = None

    def run(self, query: dict[str, Any], start: int = 0) -> dict[str, Any]:
        """One pass; `start` is the earliest counter the pass needs to run from."""
        self.passes += 1
        query = {**query, **self._settings()}
        server = self._server()
        # A slice going on from a checkpoint's edges: from one that holds them.
        edges = bool((query.get("slice") or {}).get("inherit"))
        data: dict[str, Any] | None = None
        if server is not None and server.nearest(start, edges) is not None:
            with contextlib.suppress(Unavailable):  # then from the start, as without it
                data, _code = server.ask(query, start, edges)
        if data is not None:
            receipt = Receipt(data)
        else:  # no checkpoints, or the pass starts before the first one
            receipt = replay(self.data, self.meta, timeout=self.timeout, query=query)
        if receipt.status != "query":
            if receipt.status == "bit-exact":
                raise QueryError("the replay ended without answering the query")
            raise DivergenceError(
                f"{receipt.message()}; provenance needs a faithful replay up to the point asked",
                receipt.data.get("divergence"),
            )
        result: dict[str, Any] = receipt.data["result"]
        return result

    @property
    def _passes_policy(self) -> CheckpointPolicy | None:
        """The checkpoints this question's passes start from: none while it is asked again
        from the start (_agreeing)."""
        return None if self._from_start else self.policy

    def _server(self) -> CheckpointedReplay | None:
        """The checkpoints this question's passes start from, if it uses any."""
        return None if self._passes_policy is None else self._checkpointed()

    def _agreeing(self, question: Callable[[], _Answer]) -> _Answer:
        """`question`'s answer; asked again, every pass from the start, if its passes from
        checkpoints replayed the run differently (PassesDisagreedError). Every pass forked
        from a checkpoint inherits that process's whole state, and one that differs from the
        others' in what no check of the recording sees (when the collector ran, where an
        object lives) would number the run otherwise from there: seen under load, rarely, in
        sandboxed sessions of a served request. Passes that all start from the start share
        nothing but the recording. Whatever they answer is checked as before, and refused in
        turn if they too disagree: an answer is given only from passes that agree."""
        try:
            return question()
        except PassesDisagreedError:
            if self._passes_policy is None:
                raise
        self._from_start = True
        self._located.clear()  # counters a disagreeing pass found
        try:
            return question()
        finally:
            self._from_start = False

    def _settings(self) -> dict[str, Any]:
        """What every pass of this inquiry is told besides its question: among it, how deep
        any of its slices can go (a pass keeping edges drops what no slice that deep reads)."""
        settings: dict[str, Any] = {"depth_bound": MAX_DEPTH}
        if self.digest_key is not None:
            settings["digest_key"] = self.digest_key.hex()
        if self.window is not None:
            settings["window"] = self.window
        if self.trace_callback:
            settings["trace_callback"] = True
        return settings

    def _checkpointed(self) -> CheckpointedReplay:
        if self._replay is None:
            assert self.policy is not None
            server = CheckpointedReplay(self.timeout, keep=self.policy.cap)
            fd = server.child_end.fileno()
            query = {
                "kind": "serve",
                "control_fd": fd,
                "interval": self.policy.interval,
                "cap": self.policy.cap,
                "budget": self.policy.budget,
                "marks": self._marks(),
                # Edges of the live values' ancestry, in every checkpoint: a question's slice
                # goes on from the nearest one (locate), not from the start.
                "edges": self.policy.edges,
                **self._settings(),
            }
            try:
                receipt = replay(
                    self.data, self.meta, timeout=self.timeout, query=query, pass_fds=(fd,)
                )
                if receipt.status != "query":
                    raise DivergenceError(
                        f"{receipt.message()}; provenance needs a faithful replay",
                        receipt.data.get("divergence"),
                    )
                server.collect()
            except BaseException:
                server.close()
                raise
            self._survey = receipt.data["result"]
            self._replay = server
        return self._replay

    def survey(self) -> dict[str, Any]:
        if self._survey is None:
            if self.policy is not None:
                self._checkpointed()
            else:
                self._survey = self.run({"kind": "survey", "marks": self._marks()})
        assert self._survey is not None
        return self._survey

    def _marks(self) -> list[int]:
        """The events whose instruction a survey notes: where each indexed request begins
        and ends."""
        return sorted({e for r in self.parsed.requests for e in (*self._ends(r), r.accepted)})

    def _ends(self, request: Request) -> tuple[int, int]:
        """The request's own first and last events: its thread's first read and last send
        within the span the index gives (which other threads' events may open or close)."""
        span = self.parsed.events[request.first : request.last + 1]
        mine = [e for e in span if e.thread == request.thread]
        reads = [e.index for e in mine if e.callee.startswith("socket.recv")]
        sends = [e.index for e in mine if e.data is not None and e.callee.startswith("socket.send")]
        return (reads[0] if reads else request.first), (sends[-1] if sends else request.last)

    def _request(self, number: int) -> tuple[list[int], list[int]]:
        """Where request `number` (from 1, in the order `sealtrace requests` lists them)
        begins and ends: [instructions run so far, the instruction making the call] at its
        first and at its last event."""
        begins, ends = self._ends(_indexed_request(self.parsed, number))
        marks = self._marked()
        first, last = marks.get(begins), marks.get(ends)
        if first is None or last is None or not last[1]:
            raise QueryError(f"request:{number} was not reached by the replay")
        return first, last

    def _marked(self) -> dict[int, list[int]]:
        """[instructions run so far, the instruction making the call] at each marked event
        (from the survey, made once: a worker's thousands of requests are not read again for
        each question)."""
        if self._marked_events is None:
            marks = self.survey().get("marks") or ()
            self._marked_events = {int(e): [int(c), int(i)] for e, c, i in marks}
        return self._marked_events

    def _request_window(self, at: At, question: Trace) -> tuple[int, int] | None:
        """Where a trace at request:N begins in a checkpointed session (see _since); None
        for the whole run: another stop, `whole_run` asked, no checkpoints, or an inquiry
        windowed already (in-process, from the start of its replay)."""
        if at.request is None or question.whole_run or self.policy is None:
            return None
        if self.window is not None:
            return None
        accepted = _indexed_request(self.parsed, at.request).accepted
        mark = self._marked().get(accepted)
        if mark is None or not mark[1]:  # its accept() ran before any traced instruction
            return None
        return accepted, mark[1]

    def request_counters(self, number: int) -> tuple[int, int]:
        """The instructions request `number` spans: the counter at its first event and at
        its last."""
        first, last = self._request(number)
        return first[0], last[0]

    # -- locations ------------------------------------------------------------------------

    def _files(self) -> list[str]:
        files = {s.path for s in self.parsed.sources.values() if not s.path.endswith(os.sep)}
        target = self.meta.get("target") or {}
        if target.get("kind") == "script":
            files.add(target.get("file") or target["value"])
        return sorted(files)

    def resolve_file(self, name: str) -> str:
        return resolve_source(name, self._files())

    def stop_spec(self, at: At) -> dict[str, Any]:
        if at.special is not None:
            survey = self.survey()
            counter = survey.get(at.special)
            if not counter:
                raise QueryError(_NO_STOP[at.special])
            return {"counter": counter}
        if at.request is not None:
            return {"counter": self._request(at.request)[1][1]}
        if at.counter is not None:
            return {"counter": at.counter}
        if at.function is not None:
            path, function = resolve_function(at, source_texts(self.parsed))
            spec: dict[str, Any] = {"file": path, "function": function, "hit": at.hit}
        else:
            assert at.file is not None and at.line is not None
            spec = {"file": self.resolve_file(at.file), "line": at.line, "hit": at.hit}
        # Located once in this session: the same instant by its counter (a stop at a counter
        # comes where that hit came), which a checkpoint can start near.
        counter = self._located.get(_spec_key(spec))
        return {"counter": counter} if counter is not None else spec

    def locate(
        self, at: At, expr: str | None = None, slice_depths: Sequence[int] = ()
    ) -> dict[str, Any]:
        """The frames at `at` and the value and tag of `expr` there. With slice depths, the
        same pass also keeps every instruction's input tags from the start of the traced run
        (or window) and answers the value's backward slice at each depth ("slice", as a
        slice pass's "slices"; absent where the tag is an origin, or the edge limit cut the
        recording short)."""
        if expr is not None:
            parse_expression(expr)  # refuse a bad expression before replaying anything
        spec = self.stop_spec(at)
        query: dict[str, Any] = {"kind": "locate", "at": spec, "expr": expr}
        start = int(spec.get("counter", 0))
        if slice_depths and expr:
            sliced: dict[str, Any] = {"depth": max(slice_depths), "depths": list(slice_depths)}
            policy = self._passes_policy
            if policy is not None and policy.edges and self._since is None:
                # The serve pass kept the edges since the start, and its checkpoints hold
                # them (until its edge limit), as do those a slicing question kept: the pass
                # goes on from the nearest such one before the stop (the first checkpoint,
                # for a stop that is no counter: a line's hits count from the start).
                sliced["inherit"] = True
            else:
                start = self._window_start
            query["slice"] = sliced
        result = self.run(query, start)
        if result.get("found") and "counter" not in spec and self._passes_policy is not None:
            self._located[_spec_key(spec)] = int(result["counter"])
        if not result.get("found"):
            if at.function is not None:
                raise QueryError(
                    f"the run never reached {at.text}: {spec['function']} returned fewer than "
                    f"{at.hit} time(s) (a call that ends by an exception does not return)"
                )
            raise QueryError(f"the run never reached {at.text}")
        if result.get("error"):
            raise QueryError(f"{expr} at {at.text}: {result['error']}")
        return result

    # -- trace ----------------------------------------------------------------------------

    def capture(self, counters: set[int]) -> dict[int, dict[str, Any]]:
        """Every step at these counters, described. In a session, one pass from each
        checkpoint before some of them, each ending at the last of its own (a step is
        described the same whatever else a pass captures); else one pass from the first."""
        wanted = {c for c in counters if 0 < c < ARGV_TAG and c >= self._window_start}
        groups: dict[int, list[int]] = collections.defaultdict(list)
        server = self._server()
        for counter in sorted(wanted):
            nearest = server.nearest(counter) if server is not None else None
            groups[nearest if nearest is not None else -1].append(counter)
        nodes: dict[int, dict[str, Any]] = {}
        for group in groups.values():
            result = self.run({"kind": "capture", "counters": group}, group[0])
            nodes.update((int(k), v) for k, v in result["nodes"].items())
        return nodes

    @property
    def _window_start(self) -> int:
        """The first counter a pass of this question needs (0: the run's start)."""
        return self._since[1] if self._since is not None else 0

    def trace(self, question: Trace) -> TraceAnswer:
        self._since = self._request_window(parse_at(question.at), question)
        try:
            return self.traces(question, (question.depth,))[question.depth]
        finally:
            self._since = None

    def traces(self, question: Trace, depths: Sequence[int]) -> dict[int, TraceAnswer]:
        return self._agreeing(lambda: self._traces(question, depths))

    def _traces(self, question: Trace, depths: Sequence[int]) -> dict[int, TraceAnswer]:
        """The trace of one value at each of several depths: one locate, one slice pass
        walked back to every depth, and one capture of every step any slice holds (a step is
        described the same whatever else is captured with it); each answer is built from its
        own slice. The depth property of `sealtrace validate` compares them
        (sealtrace.sandbox._depth_property); with one depth this is `trace`."""
        at, expr = parse_at(question.at), question.var
        if any(depth < 0 for depth in depths):
            raise QueryError("--depth must be 0 or more")
        if any(depth > MAX_DEPTH for depth in depths):
            # Every pass keeps only the edges a slice this deep can read (depth_bound): a
            # deeper one would take the first dropped step for an origin.
            raise QueryError(f"--depth must be at most {MAX_DEPTH}")
        located = self.locate(at, expr, depths)
        value = located["value"]
        root_tag = int(value["tag"])
        top = located["frames"][0] if located["frames"] else {}
        stopped_at = {
            "counter": located["counter"],
            "file": top.get("file"),
            "line": top.get("line"),
            "function": top.get("function"),
        }
        window = self.window if self._since is None else self._since[0]
        made_before = 0 < root_tag < self._window_start
        if (root_tag == 0 and self.window is not None) or made_before:
            raise QueryError(
                f"{expr} at {at.text} was made before the traced window opened (event "
                f"{window}): ask again tracing the whole run"
            )
        if root_tag == 0:
            raise QueryError(
                f"{expr} at {at.text} has no recorded producer (it was made by code the engine "
                "does not trace)"
            )
        self.slice_inputs = {}
        if located.get("slice") is not None:  # sliced on the way: no pass of its own
            slices = _slices(located["slice"], depths)
            self.slice_inputs = _inputs(located["slice"])
        elif len(depths) == 1:
            slices = {depths[0]: (self.backward_slice(root_tag, depths[0]), self.truncated)}
        else:
            slices = self.backward_slices(root_tag, depths)
        captured = self.capture({c for counters, _ in slices.values() for c in counters})
        _check_passes_agree(self.slice_inputs, captured)
        answers: dict[int, TraceAnswer] = {}
        for depth, (counters, truncated) in slices.items():
            nodes = {c: captured[c] for c in counters if c in captured}
            query = {
                "at": at.text,
                "var": expr,
                "depth": depth,
                "stopped_at": stopped_at,
                "value": value["summary"],
                "slot": value["via"],
                "passes": self.passes,
                "truncated": truncated,
            }
            self.last_nodes = nodes
            self.last_cuts = {}
            self.truncated = truncated  # _tree marks what a slice limit left out
            levels = _levels(root_tag, nodes)
            expanded: set[int] = set()
            root = self._tree(root_tag, nodes, 0, depth, levels, expanded)
            # Any branch cut (the depth bound, a slice limit, items not read) makes it
            # truncated.
            query["truncated"] = truncated or bool(self.last_cuts)
            if window is not None:
                query["window"] = window
            ends = recording_end(self.parsed.stop)
            if ends is not None:
                query["recording_end"] = ends
            # The documents are built as plain dicts; their shapes are the contract's.
            answers[depth] = cast(TraceAnswer, {"query": query, "root": root})
        return answers

    def backward_slices(
        self, root: int, depths: Sequence[int]
    ) -> dict[int, tuple[list[int], bool]]:
        """The slice at each depth, and whether it was cut, from one replay: the edges the
        pass records do not depend on the bound, which only applies to the walk back."""
        if origin_tag_kind(root) is not None:
            return {depth: ([root], False) for depth in depths}
        query = {"kind": "slice", "root": root, "depth": max(depths), "depths": list(depths)}
        result = self.run(query, self._window_start)
        self.slice_inputs = _inputs(result)
        return _slices(result, depths)

    def backward_slice(self, root: int, depth: int) -> list[int]:
        """Counters within `depth` computations back from `root` (moves cost nothing),
        nearest first (one replay). Sets `truncated` when a slice limit cut it."""
        self.truncated = False
        if origin_tag_kind(root) is not None:
            return [root]
        result = self.run({"kind": "slice", "root": root, "depth": depth}, self._window_start)
        self.truncated = bool(result["truncated"])
        self.slice_inputs = _inputs(result)
        return [int(tag) for tag, _level in result["nodes"]]

    def _tree(
        self,
        tag: int,
        nodes: dict[int, dict[str, Any]],
        level: int,
        depth: int,
        levels: dict[int, int],
        expanded: set[int],
    ) -> dict[str, Any]:
        """NODE for `tag` at `level` computations from the root (moves cost nothing). A step
        reached several ways is expanded once, where it is nearest the root (so nothing within
        --depth is lost, and a deeper bound only adds below what a shallower one showed);
        elsewhere it appears with no inputs. An input from outside the program ends its
        branch: only inputs that are themselves outside inputs (the cursor a fetchone read)
        are followed from it. Where a branch is cut, last_cuts says why."""
        seeded = origin_tag_kind(tag)
        if seeded is None and 0 < tag < self._window_start:
            self.last_cuts[BEFORE_TAG] = "window"  # made before the request's window
            return marker_node("window")
        if seeded is not None and seeded[0] in ("unknown", "cut", "window"):
            if seeded[0] == "cut":
                self.last_cuts[tag] = "items"
            elif seeded[0] == "window":  # a windowed answer stops here: it is not whole
                self.last_cuts[tag] = "window"
            return marker_node(seeded[0])
        if seeded is not None:
            kind, index = seeded
            argv = _argv(self.meta)
            value = (
                summarize(argv[index]) if kind == "argv" and index < len(argv) else summarize(None)
            )
            return {
                "counter": 0,
                "file": "",
                "line": 0,
                "function": "",
                "op": f"{kind}[{index}]",
                "value": value,
                "origin": {"kind": kind, "call": None, "event": None},
                "inputs": [],
            }
        node = nodes.get(tag)
        if node is None:
            # Not in the slice: a limit cut it (the pass says so), or it was never captured.
            if self.truncated:
                self.last_cuts[tag] = "limit"
            return {
                "counter": tag,
                "file": "",
                "line": 0,
                "function": "",
                "op": "?",
                "value": {"type": "?", "repr": None, "digest": ""},
                "origin": None
                if self.truncated
                else {"kind": "unknown", "call": None, "event": None},
                "inputs": [],
            }
        origin = node.get("origin")
        inputs = []
        if tag not in expanded and levels.get(tag, level) == level:
            below = level + _cost(node)
            followed = _followed(tag, nodes)
            if below <= depth:
                expanded.add(tag)
                inputs = [self._tree(t, nodes, below, depth, levels, expanded) for t in followed]
            elif followed and origin is None:
                # Below an origin the bound only hides how the input was fetched (the cursor,
                # the connection): its branch reached where the data came from, it is not cut.
                self.last_cuts[tag] = "depth"
        if origin is None and not input_tags(node):
            origin = {"kind": "unknown", "call": None, "event": None}
        return {
            "counter": node["counter"],
            "file": node["file"],
            "line": node["line"],
            "function": node["function"],
            "op": node["op"],
            "value": node["value"] or {"type": "<raised>", "repr": None, "digest": ""},
            "origin": origin,
            "inputs": inputs,
        }

    # -- flows and stack ------------------------------------------------------------------

    def flows(self, question: Flows) -> FlowsAnswer:
        return self._agreeing(lambda: self._flows(question))

    def _flows(self, question: Flows) -> FlowsAnswer:
        source = question.source.strip()
        query: dict[str, Any] = {"kind": "flows"}
        described: dict[str, Any] = {"from": source}
        event, expr, where = parse_from(source)
        if event is not None:
            last = len(self.parsed.events) - 1
            if not 0 <= event <= last:
                raise QueryError(f"--from {source!r}: the recording has events 0 to {last}")
            query["event"] = event
            described["event"] = {"index": event, "call": self.parsed.events[event].callee}
        else:
            at = parse_at(where)
            located = self.locate(at, expr)
            tag = int(located["value"]["tag"])
            steps = parse_expression(expr)
            variable = len(steps) == 1
            # The tag is the value's own where the slot that gave it is the one asked for,
            # however the expression is spelt (quotes, spaces).
            own = parse_expression(located["value"]["via"]) == steps
            if own and tag and not variable:
                query["tags"] = [tag]  # its own producer: follow every use of that value
                # ...and, on the way, find that value there again: a pass that numbered the
                # run otherwise would follow another value from the same tag.
                query["check"] = {"counter": located["counter"], "expr": expr, "tag": tag}
            else:
                # Its slot was filled by untraced code, or it is a variable (values unpacked
                # together share a tag): follow that slot from the point asked.
                query["seed"] = {"at": self.stop_spec(at), "expr": expr}
            described.update(counter=located["counter"], value=located["value"]["summary"])
        tags = [t for t in query.get("tags", []) if origin_tag_kind(t) is None]
        result = self.run(query, min(tags) if tags and "tags" in query else 0)
        if "check" in query and result.get("checked") is not True:
            raise PassesDisagreedError(
                f"the passes of this question replayed the run differently: {expr} at "
                f"{where} did not carry, in the pass that followed it, the tag {tag} the "
                "pass that located it found; no answer is given rather than a wrong one",
                int(located["counter"]),
            )
        answer = {
            "query": described,
            "locations": result["locations"],
            "outputs": result["outputs"],
            "tainted_values": result["tainted_values"],
        }
        return cast(FlowsAnswer, answer)

    def inspect_stack(self, question: InspectStack) -> StackAnswer:
        at = parse_at(question.at)
        located = self.locate(at)
        answer: dict[str, Any] = {
            "query": {"at": at.text, "counter": located["counter"]},
            "frames": located["frames"],
        }
        if at.special == "crash":
            answer["exception"] = self.survey().get("exception") or {"type": None, "message": None}
        return cast(StackAnswer, answer)

    def replay(self, question: Replay) -> ReceiptAnswer:
        """One plain replay (no engine): what `sealtrace replay` prints."""
        return cast(ReceiptAnswer, replay(self.data, self.meta, timeout=self.timeout).data)

    def source(self, question: Source) -> SourceAnswer:
        """A recorded source file's text, from the recording (nothing is replayed)."""
        return source_answer(question, source_texts(self.parsed))

    def requests(self, question: Requests) -> RequestsAnswer:
        """The request index, from the recording (nothing is replayed)."""
        return requests_answer(self.parsed.indexes_requests, self.parsed.request_index())


_OUTSIDE = ("external", "env", "argv")


def _spec_key(spec: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(spec.items()))


def _inputs(result: dict[str, Any]) -> dict[int, list[int]]:
    return {int(tag): [int(t) for t in inputs] for tag, inputs in result["inputs"].items()}


def _check_passes_agree(
    recorded: dict[int, list[int]], captured: dict[int, dict[str, Any]]
) -> None:
    """A trace's slice and its capture come from different passes (the capture's often from
    checkpoints the slice's pass never went through), joined by counter: they describe one run
    only if both executed the same instructions. Every step the slice holds inputs for must be
    captured naming the same inputs; where one is not, the passes numbered the run differently
    and a tree built from the capture would follow other steps than the slice found (a served
    request's branch once ended at a constant: complete-looking, and wrong). It is refused,
    never answered."""
    for tag, inputs in recorded.items():
        node = captured.get(tag)
        if node is not None and list(node.get("edges") or ()) != inputs:
            raise PassesDisagreedError(
                f"the passes of this question replayed the run differently: step {tag} is "
                f"{node.get('op')} at {node.get('file')}:{node.get('line')} in one, reading "
                f"{node.get('edges') or 'nothing'}, and read {inputs} in the other; no answer "
                "is given rather than a wrong one",
                tag,
            )


def _slices(result: dict[str, Any], depths: Sequence[int]) -> dict[int, tuple[list[int], bool]]:
    """A pass's slice at each depth: its counters, nearest first, and whether it was cut."""
    slices = result["slices"]
    return {
        depth: (
            [int(tag) for tag, _level in slices[str(depth)]["nodes"]],
            bool(slices[str(depth)]["truncated"]),
        )
        for depth in depths
    }


def _is_outside(tag: int, nodes: dict[int, dict[str, Any]]) -> bool:
    if origin_tag_kind(tag) is not None:
        return True
    origin = (nodes.get(tag) or {}).get("origin") or {}
    return origin.get("kind") in _OUTSIDE


def _followed(tag: int, nodes: dict[int, dict[str, Any]]) -> list[int]:
    node = nodes.get(tag)
    if node is None:
        return []
    follow = input_tags(node)
    if (node.get("origin") or {}).get("kind") in _OUTSIDE:
        follow = [t for t in follow if _is_outside(t, nodes)]
    return follow


def _cost(node: dict[str, Any] | None) -> int:
    """What a step costs of the depth: a computation 1, a move (a read or a copy) nothing."""
    return 0 if node is not None and node.get("move") else 1


def _levels(root: int, nodes: dict[int, dict[str, Any]]) -> dict[int, int]:
    """Each step's distance from the root in computations, along the edges the tree follows
    (0-1 breadth-first: a move's inputs are as deep as it is)."""
    levels = {root: 0}
    queue = collections.deque([root])
    done: set[int] = set()
    while queue:
        tag = queue.popleft()
        if tag in done:
            continue
        done.add(tag)
        cost = _cost(nodes.get(tag))
        below = levels[tag] + cost
        for t in _followed(tag, nodes):
            if t in levels and levels[t] <= below:
                continue
            levels[t] = below
            if cost:
                queue.append(t)
            else:
                queue.appendleft(t)
    return levels


def _argv(meta: dict[str, Any]) -> list[str]:
    target = meta.get("target") or {}
    args = list(target.get("args") or [])
    kind = target.get("kind")
    if kind == "script":
        return [target.get("value", ""), *args]
    return ["-m" if kind == "module" else "-c", *args]
