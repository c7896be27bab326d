"""Smoke tests for rootless Podman as set up by infra/local/podman-setup.sh.

Everything is offline: the test image is built ``FROM scratch`` out of the
host's static busybox, and nothing is ever pulled. A missing or broken Podman
is a test failure, never a skip.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.podman

REPO_ROOT = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = REPO_ROOT / "infra" / "local" / "podman-setup.sh"
PODMAN_AS_USER = REPO_ROOT / "infra" / "local" / "podman-as-user"
BUSYBOX = Path("/bin/busybox")  # from the busybox-static package
IMAGE = "localhost/sealtrace-smoke:test"

# Flags every sandboxed run must use on these hosts (crun/systemd/default
# ulimits do not work here), plus the hardening under test.
RUN_BASE = [
    "--cgroup-manager=cgroupfs",
    "run",
    "--rm",
    "--network=none",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
    "--runtime",
    "runc",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
]
RUN_HARDENED = [*RUN_BASE, "--read-only"]


def podman(
    *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run podman as the rootless sandbox user."""
    proc = subprocess.run(
        [str(PODMAN_AS_USER), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"podman {' '.join(args)} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


@pytest.fixture(scope="session")
def podman_setup() -> str:
    """Run the (idempotent) setup script; return its output."""
    assert os.geteuid() == 0, "podman tests must run as root (they use runuser)"
    proc = subprocess.run(
        ["bash", str(SETUP_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, (
        f"{SETUP_SCRIPT} failed ({proc.returncode})\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc.stdout


def _rootfs_tar() -> bytes:
    """A minimal rootfs: static busybox + a few applet symlinks + mount points."""
    assert BUSYBOX.is_file(), f"{BUSYBOX} missing (package busybox-static)"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:

        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = mode
            tar.addfile(info)

        for d in ("bin", "dev", "etc", "proc", "sys", "run"):
            add_dir(d)
        add_dir("tmp", 0o1777)
        data = BUSYBOX.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in ("sh", "cat", "echo"):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            link.mode = 0o777
            tar.addfile(link)
    return buf.getvalue()


@pytest.fixture(scope="module")
def smoke_image(podman_setup: str) -> Iterator[str]:
    # The build context must be readable by the unprivileged user, so not
    # under pytest's tmp_path (/tmp/pytest-of-root is 0700).
    ctx = Path(tempfile.mkdtemp(prefix="sealtrace-podman-smoke-", dir="/tmp"))
    try:
        ctx.chmod(0o755)
        (ctx / "rootfs.tar").write_bytes(_rootfs_tar())
        (ctx / "Containerfile").write_text('FROM scratch\nADD rootfs.tar /\nCMD ["/bin/sh"]\n')
        for f in ctx.iterdir():
            f.chmod(0o644)
        podman("rmi", "--force", "--ignore", IMAGE)
        podman(
            "build",
            "--pull=never",
            "--network=none",
            "--runtime",
            "runc",
            "-t",
            IMAGE,
            "-f",
            str(ctx / "Containerfile"),
            str(ctx),
        )
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    yield IMAGE
    podman("rmi", "--force", "--ignore", IMAGE)


def test_setup_and_podman_info_rootless(podman_setup: str) -> None:
    proc = podman("info", "--format", "json")
    info = json.loads(proc.stdout)
    host = info["host"]
    assert host["security"]["rootless"] is True
    assert host["ociRuntime"]["name"] == "runc"
    assert host["cgroupManager"] == "cgroupfs"
    # Second run of the setup script is a quick no-op.
    again = subprocess.run(["bash", str(SETUP_SCRIPT)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert "already set up" in again.stdout


def test_hardened_container_has_no_caps_and_no_new_privs(smoke_image: str) -> None:
    proc = podman(
        *RUN_HARDENED,
        smoke_image,
        "cat",
        "/proc/self/status",
        "/proc/self/limits",
        "/proc/self/uid_map",
    )
    out = proc.stdout
    assert "CapEff:\t0000000000000000" in out, out
    assert "CapPrm:\t0000000000000000" in out, out
    assert "NoNewPrivs:\t1" in out, out
    limits = {
        line[:26].strip(): line[26:].split()[:2]
        for line in out.splitlines()
        if line.startswith("Max ")
    }
    assert limits["Max open files"] == ["1024", "1024"], limits
    assert limits["Max processes"] == ["1024", "1024"], limits
    # Rootless: container root maps to the unprivileged host user, not host root.
    uid_map = [
        f
        for f in (ln.split() for ln in out.splitlines())
        if len(f) == 3 and all(x.isdigit() for x in f)
    ]
    assert uid_map, f"no uid_map in:\n{out}"
    assert uid_map[0][0] == "0", f"no uid_map entry for container uid 0 in:\n{out}"
    assert uid_map[0][1] != "0", f"container root is host root: {uid_map}"


def test_read_only_root_is_not_writable(smoke_image: str) -> None:
    # Control: with a writable root (same caps otherwise) the container can
    # create files in a root-owned image directory, so the failures below come
    # from --read-only and not from a broken image. ("/" itself is 0555 in a
    # FROM-scratch image, so without CAP_DAC_OVERRIDE it is never writable.)
    ok = podman(*RUN_BASE, smoke_image, "sh", "-c", "echo x > /etc/probe && cat /etc/probe")
    assert ok.stdout.strip() == "x", ok
    for target in ("/probe", "/etc/probe"):
        denied = podman(*RUN_HARDENED, smoke_image, "sh", "-c", f"echo x > {target}", check=False)
        assert denied.returncode != 0, denied
        assert "Read-only file system" in denied.stderr, denied.stderr


def _interfaces(proc_net_dev: str) -> list[str]:
    lines = proc_net_dev.splitlines()
    assert len(lines) >= 3, proc_net_dev
    assert lines[0].startswith("Inter-"), proc_net_dev
    return sorted(line.split(":", 1)[0].strip() for line in lines[2:] if ":" in line)


def test_no_network_interfaces_but_lo(smoke_image: str) -> None:
    proc = podman(*RUN_HARDENED, smoke_image, "cat", "/proc/net/dev")
    assert _interfaces(proc.stdout) == ["lo"], proc.stdout
    # Control: with rootless networking (slirp4netns, offline tap device) an
    # extra interface shows up, so the check above can tell the difference.
    run_slirp = [a if a != "--network=none" else "--network=slirp4netns" for a in RUN_HARDENED]
    control = podman(*run_slirp, smoke_image, "cat", "/proc/net/dev")
    assert len(_interfaces(control.stdout)) > 1, control.stdout
