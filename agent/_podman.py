"""The sandbox container: the runner in the replay image, under rootless Podman, driven
with podman-py.

Every session container gets: no network, a read-only root, every capability dropped,
no_new_privileges, a seccomp profile narrower than Podman's default (mount and the new mount
API, unshare, setns, keyctl, ptrace, bpf, userfaultfd, io_uring and perf_event_open are
refused; clone is allowed only without namespace flags, and clone3 says ENOSYS; one more
persona than Podman's, ADDR_NO_RANDOMIZE alone, so a query pass can fix its layout), pids and
memory bounded by ulimits (cgroup limits are unavailable to rootless Podman on these
hosts), an environment of only what the runtime sets (HOSTNAME, HOME), a size-capped
tmpfs at /tmp, and one bind mount: the directory holding the two FIFOs. The FIFOs and that
directory belong to the Podman user, so the container's root (that user, mapped) can open
them and nothing else of the agent's.

The runtime and the limits are settings (sealtrace.agent._settings.AgentSettings), read when
a transport is made.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sealtrace.sandbox import TMP_LABEL, process_alive

from ._sandbox_client import DEFAULT_MEMORY_LIMIT, session_directory
from ._settings import AgentSettings

__all__ = [
    "AGENT_LABEL",
    "DENIED_SYSCALLS",
    "NAMESPACE_FLAGS",
    "NAMESPACE_MASK",
    "PodmanTransport",
    "SandboxLimits",
    "seccomp_profile",
    "sweep_containers",
]

DENIED_SYSCALLS = (
    "mount", "umount", "umount2", "unshare", "setns", "keyctl", "add_key", "request_key",
    "ptrace", "bpf", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "perf_event_open", "pivot_root", "chroot", "open_by_handle_at", "name_to_handle_at",
    "kexec_load", "init_module", "finit_module", "delete_module", "process_vm_readv",
    "process_vm_writev", "fsopen", "fsmount", "fsconfig", "move_mount", "open_tree",
    "fspick", "mount_setattr", "sethostname", "setdomainname", "quotactl", "fanotify_init",
    "lookup_dcookie", "acct", "reboot",
)  # fmt: skip
# Every namespace a clone can make: CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
# CLONE_NEWUSER, CLONE_NEWPID and CLONE_NEWNET (CLONE_NEWTIME only clone3 and unshare take).
NAMESPACE_FLAGS = (
    0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000,
)  # fmt: skip
NAMESPACE_MASK = sum(NAMESPACE_FLAGS)  # 0x7E020000
_DEFAULT_PROFILE = Path("/usr/share/containers/seccomp.json")
_EPERM = 1
_ENOSYS = 38
_S390 = ["s390", "s390x"]  # where clone takes its flags second
# personality(2)'s ADDR_NO_RANDOMIZE: every pass of a query must run the program's objects at
# the same addresses (sealtrace.sandbox._layout). The code in the container is the recorded
# program, which runs with its own privileges anyway: a fixed layout inside gives it nothing
# it lacks, and every other persona (READ_IMPLIES_EXEC among them) stays refused.
ADDR_NO_RANDOMIZE = 0x0040000


@dataclass(frozen=True)
class SandboxLimits:
    nproc: int = 256
    nofile: int = 1024
    address_space: int = 4 << 30  # RLIMIT_AS, bytes, for each process
    memory: int = DEFAULT_MEMORY_LIMIT  # bytes, all the container's processes together
    tmpfs_bytes: int = 64 << 20  # free space in the container's /tmp
    python: str = ""  # the interpreter path inside the image (default: this one's)

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> SandboxLimits:
        return cls(
            nproc=settings.sandbox_nproc,
            nofile=settings.sandbox_nofile,
            address_space=settings.sandbox_address_space,
            memory=settings.sandbox_memory,
            tmpfs_bytes=settings.sandbox_tmpfs_bytes,
        )


def _masked(index: int, mask: int, value: int) -> dict[str, Any]:
    """The condition (argument `index` & mask) == value."""
    return {"index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}


def _clone_rules() -> list[dict[str, Any]]:
    """clone allowed when (flags & NAMESPACE_MASK) == 0, refused with EPERM when any one
    namespace flag is set; clone3, whose flags are behind a pointer that seccomp cannot
    read, says ENOSYS, so glibc falls back to clone (its threads, posix_spawn)."""
    rules: list[dict[str, Any]] = []
    arches = ({"excludes": {"arches": _S390}}, {"includes": {"arches": _S390}})
    for index, where in enumerate(arches):  # the flags: argument 0, or 1 on s390
        none = _masked(index, NAMESPACE_MASK, 0)
        rules.append({"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [none], **where})
        for flag in NAMESPACE_FLAGS:
            has = _masked(index, flag, flag)
            rules.append(
                {"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": _EPERM,
                 "args": [has], **where}
            )  # fmt: skip
    rules.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": _ENOSYS})
    return rules


def seccomp_profile(base: Path = _DEFAULT_PROFILE) -> dict[str, Any]:
    """Podman's default profile with DENIED_SYSCALLS taken out of every rule that allows
    them, and refused with EPERM; clone and clone3 taken out of every rule, and given the
    rules of _clone_rules instead, so that no call can make a namespace; and
    personality(ADDR_NO_RANDOMIZE) allowed."""
    profile: dict[str, Any] = json.loads(base.read_text())
    denied = set(DENIED_SYSCALLS)
    replaced = {"clone", "clone3"}
    rules = []
    for rule in profile.get("syscalls", []):
        names = rule.get("names", [])
        drop = replaced | (denied if rule.get("action") == "SCMP_ACT_ALLOW" else set())
        if set(names) & drop:
            names = [n for n in names if n not in drop]
            if not names:
                continue
            rule = {**rule, "names": names}
        rules.append(rule)
    rules.append({"names": sorted(denied), "action": "SCMP_ACT_ERRNO", "errnoRet": _EPERM})
    rules.extend(_clone_rules())
    fixed_layout = {"index": 0, "value": ADDR_NO_RANDOMIZE, "op": "SCMP_CMP_EQ"}
    rules.append({"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [fixed_layout]})
    profile["syscalls"] = rules
    return profile


AGENT_LABEL = "sealtrace.agent"


def _agent_mark() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def sweep_containers(client: Any) -> list[str]:
    """Remove session containers whose agent process on this host is gone (killed before it
    could remove them); returns their ids."""
    host = socket.gethostname()
    removed = []
    for container in client.containers.list(all=True, filters={"label": AGENT_LABEL}):
        owner, _, pid = str(container.labels.get(AGENT_LABEL, "")).rpartition(":")
        if owner == host and pid.isdigit() and not process_alive(int(pid)):
            with contextlib.suppress(Exception):
                container.kill(signal="SIGKILL")
            with contextlib.suppress(Exception):
                container.remove(force=True)
            removed.append(container.id)
    return removed


class PodmanTransport:
    """One session container. `client` is a podman.PodmanClient on the rootless service;
    `limits` (default: the settings') and the runtime come from `settings` (default: the
    environment's)."""

    def __init__(
        self,
        client: Any,
        image: str,
        *,
        uid: int,
        gid: int,
        limits: SandboxLimits | None = None,
        settings: AgentSettings | None = None,
    ) -> None:
        settings = settings or AgentSettings()
        self.client = client
        self.image = image
        self.uid = uid
        self.gid = gid
        self.runtime = settings.podman_runtime
        self.limits = limits or SandboxLimits.from_settings(settings)
        self.directory = session_directory("sealtrace-pipes-")
        self.private = session_directory("sealtrace-seccomp-")
        for path in (self.directory, self.private):
            os.chown(path, uid, gid)
        self.profile = self.private / "seccomp.json"
        self.profile.write_text(json.dumps(seccomp_profile()))
        os.chown(self.profile, uid, gid)
        self.container: Any = None
        labels = client.images.get(image).labels or {}
        self.image_tmp_bytes = int(labels.get(TMP_LABEL, 0))
        self.memory_limit = self.limits.memory
        # What the container runs; the FIFO paths are appended. Tests put hostile runners here.
        python = self.limits.python or sys.executable
        self.argv: list[str] = [python, "-m", "sealtrace.sandbox.runner"]

    def own(self, path: Path) -> None:
        os.chown(path, self.uid, self.gid)

    def options(self, command: list[str]) -> dict[str, Any]:
        """The hardened container every session runs in (podman-py create arguments)."""
        limits = self.limits
        return {
            "command": command,
            "network_mode": "none",
            "read_only": True,
            "cap_drop": ["ALL"],
            "no_new_privileges": True,
            "seccomp_profile_path": str(self.profile),
            "environment": {},
            "runtime": self.runtime,
            "mounts": [
                {
                    "type": "bind",
                    "source": str(self.directory),
                    "target": "/pipes",
                    "read_only": True,
                },
                # The container's own /tmp: a size-capped tmpfs, not a host path. podman-py
                # reads the size from "size" (an "options" list is silently dropped). Podman
                # copies what the image holds under /tmp into it (an interpreter or venv
                # living there, as in a CI clone), so that comes on top of the free space.
                {
                    "type": "tmpfs",
                    "source": "tmpfs",
                    "target": "/tmp",  # noqa: S108
                    "size": limits.tmpfs_bytes + self.image_tmp_bytes,
                },
            ],
            "ulimits": [
                {"Name": "nofile", "Soft": limits.nofile, "Hard": limits.nofile},
                {"Name": "nproc", "Soft": limits.nproc, "Hard": limits.nproc},
                {"Name": "as", "Soft": limits.address_space, "Hard": limits.address_space},
            ],
            "labels": {"sealtrace.session": self.directory.name, AGENT_LABEL: _agent_mark()},
        }

    def start(self) -> None:
        command = [*self.argv, "/pipes/in", "/pipes/out"]
        self.container = self.create(command)
        self.container.start()

    def create(self, command: list[str]) -> Any:
        """The session container, not started. podman-py has no way to drop the variables
        Podman adds to every container (PATH, TERM, container), so its request goes to the
        service with `unsetenvall` set: only HOSTNAME and HOME, set by the runtime, remain."""
        from podman import api
        from podman.domain.containers_create import CreateMixin

        payload = CreateMixin._render_payload({"image": self.image, **self.options(command)})
        payload["unsetenvall"] = True
        response = self.client.api.post(
            "/containers/create",
            headers={"content-type": "application/json"},
            data=api.prepare_body(payload),
        )
        response.raise_for_status()
        return self.client.containers.get(response.json()["Id"])

    def inspect(self) -> dict[str, Any]:
        result: dict[str, Any] = self.client.containers.get(self.container.id).inspect()
        return result

    def kill(self) -> None:
        if self.container is not None:
            # The runner is the container's PID 1, which ignores the SIGTERM a forced remove
            # sends first: without SIGKILL, Podman waits its 10 s stop timeout.
            with contextlib.suppress(Exception):
                self.container.kill(signal="SIGKILL")
            with contextlib.suppress(Exception):
                self.container.remove(force=True)
            self.container = None
        shutil.rmtree(self.directory, ignore_errors=True)
        shutil.rmtree(self.private, ignore_errors=True)
