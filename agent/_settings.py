"""The agent's settings: one class, read from the environment (SEALTRACE_*) where they are
used, never at import time.

Two groups. The Podman service: which user's rootless service, where its socket is, the
OCI runtime and cgroup manager (runc and cgroupfs: crun fails on these hosts' cgroup layout,
and there is no systemd). infra/local/podman-setup.sh reads the same SEALTRACE_PODMAN_*
variables when it writes that user's containers.conf, so one environment configures both.
The session container: its ulimits, its memory limit and its /tmp (docs/sandbox.md says
what each one bounds). The defaults are what the tests and docs/sandbox.md show.

Not here: the agent's one-time enrollment. `sealtrace agent` pops SEALTRACE_AGENT_ENROLLMENT
from the environment before anything else runs, so no child process (the Podman service,
Celery, the sandbox) inherits it; settings are built again wherever they are used, after
that, and a credential held in them would travel with every instance. Nor the launcher
token, which `sealtrace launch-agent` takes and never hands to the agent. The server URL and
the broker are the command's options (SEALTRACE_AGENT_SERVER, SEALTRACE_AGENT_BROKER).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["AgentSettings"]


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SEALTRACE_", extra="forbid")

    # The user whose rootless Podman service runs the sandbox (podman-setup.sh creates it).
    podman_user: str = "sealtrace-sbx"
    # unix:// URL of that service; empty: /run/user/UID/podman/podman.sock of podman_user.
    podman_socket: str = ""
    podman_runtime: str = Field(default="runc", min_length=1)
    # Passed to the service the agent starts itself (serve_podman).
    podman_cgroup_manager: str = Field(default="cgroupfs", min_length=1)
    # The image sessions run in (as `sealtrace sandbox build-image` printed it); empty: the
    # image of this interpreter's whole environment, built if missing.
    replay_image: str = ""
    # Where sessions' private directories (FIFOs, seccomp profile) go; empty: /dev/shm when
    # it exists, else the system's temporary directory.
    session_dir: str = ""

    # The session container's ulimits (soft = hard). Rootless Podman gets no cgroup limits
    # on these hosts, so nproc is also its pids limit.
    sandbox_nofile: int = Field(default=1024, gt=0)
    sandbox_nproc: int = Field(default=256, gt=0)
    sandbox_address_space: int = Field(default=4 << 30, gt=0)  # RLIMIT_AS, bytes per process
    # Bytes for all the session's processes together, enforced by the runner (0: none).
    sandbox_memory: int = Field(default=3 << 30, ge=0)
    sandbox_tmpfs_bytes: int = Field(default=64 << 20, gt=0)  # free space in its /tmp
    # A session's replay keeps a fork checkpoint every this many instructions (the interval
    # doubles past 64 of them), so each question replays from near where it stops: small
    # enough that a click in the console seeks in milliseconds on a short run (on a long one,
    # the checkpoints' time budget spaces them further: docs/provenance.md#checkpoints).
    sandbox_checkpoint_every: int = Field(default=10_000, gt=0)
