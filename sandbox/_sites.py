"""Where the application asked for each recorded input: one plain replay pass, no engine.

A trace names an external input by the instruction that received it, and that instruction
is often in a library: an ORM fetches its rows inside its own cursor code, csv and the text
layer fill their buffers inside C, werkzeug reads a request body off the socket before the
view runs. The ground truth of `sealtrace validate` names an input the way its author sees it:
by the line of the application that asked for it. This pass joins the two: while the
recording is served, each event (and each environment variable read) is noted with the
innermost frame of the application's own code at that moment (a recorded source file).

It runs inside the replaying process (query kind "sites", sealtrace.sandbox._replay), with
the same serving runtime and checks as any replay, and answers like a provenance pass:
{"kind": "sites", "events": {INDEX: "FILE:LINE" | null}, "env": {NAME: ["FILE:LINE", ...]}}.
It must never change what the program sees: it only looks at the stack.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["InputSites"]


class InputSites:
    """The "sites" pass: installed in place of the provenance engine for one replay."""

    on_start = None  # nothing to seed: argv needs no site, its index names it

    def __init__(self, rt: Any) -> None:
        self.rt = rt
        self.events: dict[str, str | None] = {}
        self.env: dict[str, list[str]] = {}
        rt.observer = self.on_event
        self._watch_environ()

    def _app_site(self) -> str | None:
        _innermost, app = self.rt._locations()
        return app if isinstance(app, str) else None

    def on_event(self, index: int, callee: str, output: bool, brought: int) -> None:
        self.events[str(index)] = self._app_site()

    def _watch_environ(self) -> None:
        # Known variables are served without an event (the recording's environment).
        env_type = type(os.environ)
        original = env_type.__getitem__
        sites = self

        def getitem(self: Any, key: str) -> str:
            value = original(self, key)
            where = sites._app_site()
            if where is not None:
                seen = sites.env.setdefault(str(key), [])
                if where not in seen:
                    seen.append(where)
            return value

        env_type.__getitem__ = getitem  # type: ignore[method-assign]

    def finish(self) -> None:
        result = {"kind": "sites", "events": self.events, "env": self.env}
        self.rt._emit({"status": "query", "result": result}, 0)
