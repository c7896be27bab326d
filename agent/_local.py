"""Sandboxed queries on this machine: the rootless Podman service of the sandbox user, the
replay image, and a hardened container for one session.

Settings (sealtrace.agent._settings.AgentSettings, from the environment): the sandbox user
(SEALTRACE_PODMAN_USER, default sealtrace-sbx, the user infra/local/podman-setup.sh
creates), its service's socket (SEALTRACE_PODMAN_SOCKET, default that user's
/run/user/UID/podman/podman.sock), the OCI runtime and cgroup manager of a service started
here, and the replay image (SEALTRACE_REPLAY_IMAGE, an image `sealtrace sandbox build-image`
printed; default: the image of this interpreter's whole environment, built if missing). A
recording the image cannot replay is refused (exit 2) before a container starts.

sealtrace.sandbox's CLI finds this module through the `sealtrace.sandbox_client` entry
point, so the sandbox package never imports the agent.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from sealtrace.proxy import UsageError
from sealtrace.proxy.format import ParsedStream

from ._errors import SandboxError
from ._podman import PodmanTransport, sweep_containers
from ._sandbox_client import BootedSandbox, SandboxClient, sweep_session_directories
from ._settings import AgentSettings

__all__ = [
    "SandboxOpener",
    "open_sandbox",
    "podman_client",
    "sandbox_opener",
    "sandbox_user",
    "serve_podman",
]


def sandbox_user(settings: AgentSettings | None = None) -> pwd.struct_passwd:
    name = (settings or AgentSettings()).podman_user
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise SandboxError(
            f"no sandbox user {name!r}: run infra/local/podman-setup.sh as root"
        ) from None


def serve_podman(socket: Path, *, wait: float = 10.0) -> subprocess.Popen[bytes]:
    """Start the sandbox user's rootless Podman API service on `socket` (as root: the way
    the local stack, the tests and the benchmarks get one; production runs it as a systemd
    user unit). The caller stops it with terminate()."""
    settings = AgentSettings()
    user = sandbox_user(settings)
    run_dir = Path(f"/run/user/{user.pw_uid}")
    (run_dir / "podman").mkdir(parents=True, exist_ok=True)
    for path in (run_dir, run_dir / "podman"):
        os.chown(path, user.pw_uid, user.pw_gid)
    env = {
        "HOME": user.pw_dir,
        "XDG_RUNTIME_DIR": str(run_dir),
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    }
    service = subprocess.Popen(
        ["runuser", "-u", user.pw_name, "--", "podman", f"--runtime={settings.podman_runtime}",
         f"--cgroup-manager={settings.podman_cgroup_manager}", "system", "service", "--time=0",
         f"unix://{socket}"],
        env=env, cwd=user.pw_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + wait
    while not socket.exists():
        if service.poll() is not None or time.monotonic() > deadline:
            service.kill()
            service.wait()
            raise SandboxError(f"the rootless Podman service did not start on {socket}")
        time.sleep(0.05)
    return service


def _default_socket(user: pwd.struct_passwd) -> str:
    """Where the sandbox user's Podman service listens unless SEALTRACE_PODMAN_SOCKET says."""
    return f"/run/user/{user.pw_uid}/podman/podman.sock"


def podman_client(settings: AgentSettings | None = None) -> Any:
    from podman import PodmanClient

    settings = settings or AgentSettings()
    user = sandbox_user(settings)
    socket = settings.podman_socket or f"unix://{_default_socket(user)}"
    path = socket.removeprefix("unix://")
    if not os.path.exists(path) and shutil.which("podman") is None:
        # Nothing to start a service with: an install step, not a sandbox failure.
        raise UsageError(
            "the sandbox needs Podman, which is not installed: apt-get install podman uidmap, "
            "then set up its rootless user (README, Install: the analyst's machine)"
        )
    if not os.path.exists(path):
        raise SandboxError(
            f"no rootless Podman service at {path}: start one with "
            f"`infra/local/podman-as-user system service --time=0 unix://{path}`"
        )
    client = PodmanClient(base_url=f"unix://{path}")
    try:
        client.version()  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise SandboxError(f"the Podman service at {path} does not answer: {exc}") from None
    return client


class SandboxOpener:
    """The Podman service and the replay image on this machine, found once (the image built
    if missing): an agent makes one at boot, before it offers itself, so no session waits for
    either. boot() starts a hardened container whose runner waits for a recording; calling
    the opener loads a recording into one (booted earlier, or started now)."""

    def __init__(self, settings: AgentSettings | None = None) -> None:
        from sealtrace.sandbox import build_image

        self.settings = settings or AgentSettings()
        self.client = podman_client(self.settings)
        self.user = sandbox_user(self.settings)
        self.image = self.settings.replay_image or build_image(self.client)

    def boot(self) -> BootedSandbox:
        """A fresh container, its runner started and waiting; no recording, no key in it."""
        sweep_containers(self.client)  # what agents killed mid-session left behind
        sweep_session_directories()
        transport = PodmanTransport(self.client, self.image, uid=self.user.pw_uid,
                                    gid=self.user.pw_gid, settings=self.settings)  # fmt: skip
        return BootedSandbox(transport)

    def __call__(
        self,
        data: bytes,
        parsed: ParsedStream,
        *,
        receipt_only: bool = False,
        booted: BootedSandbox | None = None,
    ) -> SandboxClient:
        """A client on `data` in `booted` (ended, unused, if the image cannot replay the
        recording) or in a container started now."""
        from sealtrace.sandbox import ReplayEnvironmentError, image_problem

        problem = image_problem(self.client, self.image, parsed.meta)
        if problem is not None:
            if booted is not None:
                booted.close()
            raise ReplayEnvironmentError(problem)
        if booted is None:
            booted = self.boot()
        return SandboxClient(data, parsed, booted=booted, receipt_only=receipt_only,
                             checkpoint_every=self.settings.sandbox_checkpoint_every)  # fmt: skip


def sandbox_opener(settings: AgentSettings | None = None) -> SandboxOpener:
    """Find the Podman service and the replay image once (building the image if missing)."""
    return SandboxOpener(settings)


def open_sandbox(data: bytes, parsed: ParsedStream, *, receipt_only: bool = False) -> SandboxClient:
    """A client on `data` in a fresh hardened container (the image is built if missing);
    receipt_only: for `replay`, no engine. This is what the CLI's replaying commands use: when
    no Podman service is configured or running, it starts one for this command, as the
    sandbox user, and stops it when the client closes."""
    settings = AgentSettings()
    service = _own_service(settings)
    if service is not None:
        settings = settings.model_copy(update={"podman_socket": f"unix://{service.socket}"})
    try:
        client = sandbox_opener(settings)(data, parsed, receipt_only=receipt_only)
    except BaseException:
        if service is not None:
            service.stop()
        raise
    if service is not None:
        client.after_close.append(service.stop)
    return client


class _Service:
    """A rootless Podman service this process started, on a socket of its own."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.process = serve_podman(socket)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.socket.unlink(missing_ok=True)


def _own_service(settings: AgentSettings) -> _Service | None:
    """A service to start, when none is configured or running and this process may start one
    as the sandbox user (it runs as root, and Podman is installed); else None, and
    podman_client says what is missing."""
    if settings.podman_socket or os.geteuid() != 0 or shutil.which("podman") is None:
        return None
    user = sandbox_user(settings)
    if os.path.exists(_default_socket(user)):
        return None
    return _Service(Path(f"/run/user/{user.pw_uid}/podman/sealtrace-cli-{os.getpid()}.sock"))
