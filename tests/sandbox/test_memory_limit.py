"""The session's memory limit: the runner kills everything it started once together it
holds more than the limit (rootless Podman gets no cgroup memory controller here).

- the watch kills a process that grows past the limit, and leaves one below it alone;
- processes sharing their pages (fork checkpoints do) count once (PSS), not once each;
- a recorded program replayed in a session container that allocates past the session's
  limit is killed, and the agent reports exit 5 naming the limit; the same program
  allocating less is answered.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sealtrace.agent import SandboxError
from sealtrace.agent._podman import PodmanTransport, SandboxLimits
from sealtrace.agent._sandbox_client import SandboxClient
from sealtrace.sandbox._replay_process import load_recording
from sealtrace.sandbox.questions import InspectStack

from ..conftest import KeyFiles
from .replaying import PYTHON, record, write_app

# The watch kills every descendant of its process, so it runs in a driver of its own.
DRIVER = textwrap.dedent(
    """
    import json, subprocess, sys
    from sealtrace.sandbox._memory import MemoryWatch
    limit, child = int(sys.argv[1]), sys.argv[2]
    watch = MemoryWatch(limit, interval=0.02).start()
    proc = subprocess.Popen([sys.executable, "-c", child])
    code = proc.wait(timeout=60)
    watch.stop()
    print(json.dumps({"code": code, "fired": watch.fired, "peak": watch.peak}))
    """
)
GROW = "import time\nheld = b'x' * ({mib} << 20)\ntime.sleep(1.5)\n"
# 16 forks of a process holding 96 MiB: their RSS adds up to 1.6 GiB, their PSS to ~100 MiB.
SHARE = textwrap.dedent(
    """
    import os, time
    held = b'x' * (96 << 20)
    children = []
    for _ in range(16):
        pid = os.fork()
        if pid == 0:
            time.sleep(1.5)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    """
)


def _watched(limit_mib: int, child: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(limit_mib << 20), child],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_a_process_growing_past_the_limit_is_killed() -> None:
    killed = _watched(200, GROW.format(mib=400))
    assert killed["fired"] and killed["code"] == -9, killed
    # Control: below the limit nothing happens.
    spared = _watched(200, GROW.format(mib=50))
    assert not spared["fired"] and spared["code"] == 0, spared
    assert 50 << 20 < spared["peak"] < 200 << 20


def test_shared_pages_count_once() -> None:
    spared = _watched(600, SHARE)
    assert not spared["fired"] and spared["code"] == 0, spared
    # Control: the same processes with a limit below what they really hold are killed.
    killed = _watched(60, SHARE)
    assert killed["fired"] and killed["code"] == -9, killed


HOG_APP = """
import ctypes
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]


def hog(mib):
    # Only in a container (recording it here does nothing), and only through libc, so the
    # replay stays faithful. 64 MiB at a time, each written so it is really resident.
    inside = int(libc.access(b"/run/.containerenv", 0) == 0)
    held = 0
    for _ in range(mib // 64 if inside else 0):
        block = libc.malloc(64 << 20)
        libc.memset(block, 1, 64 << 20)
        held += 64
    done = 1
    return done


hog(int(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def hogs(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeyFiles, Path, Path, str]:
    from sealtrace.proxy import write_keypair

    work = tmp_path_factory.mktemp("hogs")
    keys = KeyFiles(*write_keypair(work / "keys", "hog"))
    app = write_app(work / "app", HOG_APP)
    for name, mib in (("big", "2048"), ("small", "128")):
        recorded = record(keys, work / name, [PYTHON, str(app), mib])
        assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    line = next(
        i for i, text in enumerate(app.read_text().splitlines(), 1) if "return done" in text
    )
    return keys, work / "big", work / "small", f"app.py:{line}"


@pytest.mark.podman
def test_a_replay_past_the_sessions_memory_limit_is_killed(
    hogs: tuple[KeyFiles, Path, Path, str],
    podman_service: tuple[Any, Any, str],
    replay_image: str,
) -> None:
    client, user, _socket = podman_service
    keys, big, small, stop = hogs
    limits = SandboxLimits(memory=1 << 30)

    def transport() -> PodmanTransport:
        return PodmanTransport(
            client, replay_image, uid=user.pw_uid, gid=user.pw_gid, limits=limits
        )

    # Control: 128 MiB fits, and the program's own count says it held them.
    data, parsed = load_recording(str(small), keys.identity)
    with SandboxClient(data, parsed, transport(), timeout=120) as box:
        frames = box.inspect_stack(InspectStack(at=stop))["frames"]
    hog = next(f for f in frames if f["function"] == "hog")
    found = {v["name"]: v["value"]["repr"] for v in hog["locals"]}
    assert found["inside"] == "1" and found["held"] == "128"
    # 2 GiB does not: the runner kills the replay during its first pass (LOAD).
    data, parsed = load_recording(str(big), keys.identity)
    killed = transport()
    with pytest.raises(SandboxError, match=r"memory limit \(1024 MiB\)") as raised:
        SandboxClient(data, parsed, killed, timeout=120)
    assert raised.value.exit_code == 5
    assert not killed.directory.exists()
    assert not [c for c in client.containers.list(all=True)
                if c.labels.get("sealtrace.session") == killed.directory.name]  # fmt: skip
