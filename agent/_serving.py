"""One session, served: open the sealed recording key with the agent's boot-time identity,
read the recording's segments (the oldest version of each) into memory, start the sandbox,
tell the server the session is ready, then answer its questions until it closes or goes
idle. The container and the session's tmpfs go with the session; the plaintext and the key
are never written anywhere. The recording key is held in a `Secret` only until the reader
has made its body cipher from it, and wiped in a `finally` whatever happens (docs/platform.md,
"Key hygiene").

This is plain code: the Celery task (sealtrace.agent._worker) only parses the assignment and
calls serve().
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sealtrace.proxy import open_store
from sealtrace.proxy.format import (
    Identity,
    incomplete_stream,
    parse_stream,
    read_header,
    read_process,
)
from sealtrace.sandbox import DivergenceError, QueryError
from sealtrace.sandbox.questions import Answerer, ask, parse_question

from ._contracts import open_session_key
from ._errors import ServerError
from ._server import ServerClient

__all__ = ["Assignment", "answer", "serve", "warm_up"]


@dataclass(frozen=True)
class Assignment:
    session_id: str
    run_id: str
    store: str
    sealed_key: bytes
    process: str = ""  # "" the recorded process, else a forked one's path ("1", "1.2")

    @classmethod
    def parse(cls, message: dict[str, Any]) -> Assignment:
        return cls(
            session_id=str(message["session_id"]),
            run_id=str(message["run_id"]),
            store=str(message["store"]),
            sealed_key=base64.b64decode(message["sealed_key"], validate=True),
            process=str(message.get("process") or ""),
        )


def answer(answerer: Answerer, request: dict[str, Any]) -> dict[str, Any]:
    """One relayed question for the sandbox client: {"document": …} or {"error", "status"}.
    The question's fields are the contract's (sealtrace.sandbox.questions): nothing here
    names them."""
    try:
        document = ask(answerer, parse_question(request))
    except (QueryError, ValueError) as exc:
        return {"error": str(exc), "status": 422}
    except DivergenceError as exc:
        return {"error": str(exc), "status": 409}
    return {"document": document}


def warm_up() -> None:
    """Load what reading a session's recording needs before a session comes: botocore's S3
    model, which costs about 0.3 s the first time a client is made (no request is sent)."""
    with contextlib.suppress(Exception):  # a store that cannot be opened fails the session
        open_store("s3://sealtrace-warm-up/")


def serve(
    assignment: Assignment,
    identity: Identity,
    agent_id: str,
    server: ServerClient,
    open_sandbox: Callable[[bytes, Any], Answerer],
    *,
    idle_timeout: float = 900.0,
    poll: float = 20.0,
) -> str:
    """Serve the session to its end; returns how it ended ("closed", "idle", "failed")."""
    client = None
    try:
        source = open_store(assignment.store)
        # The key opens only for the header the server registered for the run, in the store
        # it named (session_info): a forged or swapped recording is refused here.
        header, _raw = read_header(source, source.list())
        with open_session_key(
            assignment.sealed_key,
            identity,
            session_id=assignment.session_id,
            run_id=assignment.run_id,
            store=assignment.store,
            wrapped_key=header.wrapped_key,
        ) as key:
            # The run of the process the session is about (the recorded one, or one it
            # forked: its ancestors' streams up to the fork, then its own).
            data, status = read_process(source, None, recording_key=key,
                                        expected_run_id=assignment.run_id,
                                        process=assignment.process)  # fmt: skip
        if not status.complete:  # (a killed process's: answered as far as it goes)
            data = incomplete_stream(data)
        client = open_sandbox(data, parse_stream(data))
        del data
        server.state(agent_id, assignment.session_id, "ready")
        last = time.monotonic()
        while True:
            message = server.next(agent_id, assignment.session_id, wait=min(poll, idle_timeout))
            if message is None:
                if time.monotonic() - last > idle_timeout:
                    server.state(agent_id, assignment.session_id, "closed", "idle timeout")
                    return "idle"
                continue
            request = message["request"]
            if request.get("kind") == "close":
                _acknowledge_close(server, agent_id, assignment.session_id)
                return "closed"
            last = time.monotonic()
            server.answer(agent_id, assignment.session_id, int(message["id"]),
                          answer(client, request))  # fmt: skip
    except Exception as exc:
        # Fail closed: whatever went wrong (a sealtrace error, the store, the sandbox, a bug),
        # the session is reported failed and the caller ends this agent.
        with contextlib.suppress(ServerError):
            server.state(agent_id, assignment.session_id, "failed", _why(exc))
        return "failed"
    finally:
        if client is not None:
            client.close()


def _acknowledge_close(server: ServerClient, agent_id: str, session_id: str) -> None:
    """Report a close the server asked for. The session ended there first and its agent with
    it, so the credential may already be revoked (401): the close stands either way."""
    try:
        server.state(agent_id, session_id, "closed")
    except ServerError as exc:
        if exc.status != 401:
            raise


def _why(exc: Exception) -> str:
    # One line, and never a value: the classes of failure the server may show.
    return (
        f"{exc.__class__.__name__}: {str(exc).splitlines()[0][:300]}"
        if str(exc)
        else (exc.__class__.__name__)
    )
