"""`sealtrace agent`: a disposable Celery worker that serves exactly one session.

At boot it makes an X25519 key pair in memory and enrolls with the server: the one-time
enrollment it was started with and the public half buy it its own credential and the one
queue it consumes. It keeps telling the server it is alive, and exits when the server says
it is retired (410) or no longer honours its credential (401: revoked or expired). The
first assignment on its queue is served (sealtrace.agent._serving); then the worker stops,
the container and the session's tmpfs are gone, the key pair is dropped and the process
exits. A supervisor starts a fresh one. Its network needs: the server, Redis and S3.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from sealtrace.proxy.format import generate_identity

from ._contracts import ASSIGNMENT_TASK
from ._errors import ServerError
from ._server import ServerClient
from ._serving import Assignment, serve, warm_up

__all__ = ["run_agent"]

HEARTBEAT = 10.0  # seconds; the server takes an idle agent silent for 30 s as gone


def run_agent(
    server: ServerClient,
    enrollment: str,
    broker_url: str,
    open_sandbox: Callable[[bytes, Any], Any],
    *,
    idle_timeout: float = 900.0,
    on_ready: Callable[[str], None] | None = None,
    boot: Callable[[], Any] | None = None,
) -> str:
    """Boot, serve one session, and return how it ended ("closed", "idle", "failed").
    `boot` starts the sandbox (a container whose runner waits for a recording) before the
    agent enrolls, so that its session starts at loading the recording; `open_sandbox` then
    gets it as `booted`. Unused, it is ended when the agent leaves."""
    booted = [boot()] if boot is not None else []
    warm_up()
    try:
        return _serve_one(server, enrollment, broker_url, open_sandbox, idle_timeout, on_ready,
                          booted)  # fmt: skip
    finally:
        for sandbox in booted:
            sandbox.close()  # a no-op once its session took it


def _serve_one(
    server: ServerClient,
    enrollment: str,
    broker_url: str,
    open_sandbox: Callable[..., Any],
    idle_timeout: float,
    on_ready: Callable[[str], None] | None,
    booted: list[Any],
) -> str:
    from celery import Celery
    from celery.exceptions import WorkerShutdown

    def opener(data: bytes, parsed: Any) -> Any:
        """The session's sandbox: the one booted for it, if there is one."""
        if booted:
            return open_sandbox(data, parsed, booted=booted[0])
        return open_sandbox(data, parsed)

    held = [generate_identity()]  # emptied when the agent ends: the key pair goes with it
    hello = server.enroll(enrollment, held[0].recipient.raw)
    del enrollment  # used: worthless now, and not kept either
    agent_id, queue = hello["agent_id"], hello["queue"]
    stop = threading.Event()
    ended: list[str] = []

    def beat() -> None:
        while not stop.wait(HEARTBEAT):
            try:
                server.heartbeat(agent_id)
            except ServerError as exc:
                # Retired (its session failed before reaching it), or its credential
                # revoked or expired: the server will not assign it anything.
                if exc.status in (401, 410):
                    ended.append("retired")
                    os.kill(os.getpid(), signal.SIGTERM)  # Celery's warm shutdown
                    return
                continue  # the server may be restarting; an assignment may still come

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()
    app = Celery("sealtrace-agent", broker=broker_url)
    app.conf.update(
        broker_connection_retry_on_startup=True,
        task_acks_late=False,  # taken once: a session is never served twice
        worker_prefetch_multiplier=1,
        task_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
    )

    @app.task(name=ASSIGNMENT_TASK)  # type: ignore[untyped-decorator]
    def session(**message: Any) -> None:
        stop.set()
        try:
            ended.append(serve(Assignment.parse(message), held[0], agent_id, server,
                               opener, idle_timeout=idle_timeout))  # fmt: skip
        except Exception:
            # Fail closed: an assignment that does not parse (or anything serve() let
            # through) fails the session, and this worker serves nothing more either way.
            ended.append("failed")
            with contextlib.suppress(Exception):
                server.state(agent_id, str(message.get("session_id", "")), "failed",
                             "the agent could not take the assignment")  # fmt: skip
        finally:
            held.clear()  # the key pair goes with the one session it was for
            raise WorkerShutdown("one session served")

    if on_ready is not None:
        on_ready(agent_id)
    worker = app.Worker(
        queues=[queue],
        pool="solo",
        concurrency=1,
        loglevel="WARNING",
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        quiet=True,
    )
    try:
        worker.start()
    finally:
        stop.set()
        held.clear()
    return ended[0] if ended else "stopped"
