"""Sandbox cost: from creating the container to the first answered question, and what the
pipe adds to each question, against the same work in-process.

    .venv/bin/python bench/sandbox.py [--quick]      (as root, after infra/local/podman-setup.sh)

Recordings of 1 MB and 50 MB (a program that reads a file of that size). Start is timed from
creating the container to the answer of the first question (STATS), which includes streaming
the recording in and the runner's first replay; median of 10. A round trip is one STATS
question through the FIFOs, against the same answer in-process; median of 200. Prints a
table and writes bench/results/sandbox.json.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _machine import machine

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results" / "sandbox.json"
APP = "import sys\ndata = open(sys.argv[1], 'rb').read()\nprint(len(data), sum(data[::4096]))\n"


def _service() -> tuple[Any, Any, subprocess.Popen[bytes]]:
    from podman import PodmanClient

    from sealtrace.agent import sandbox_user, serve_podman

    user = sandbox_user()
    sock = Path(f"/run/user/{user.pw_uid}/podman/sealtrace-bench-{os.getpid()}.sock")
    service = serve_podman(sock)
    return PodmanClient(base_url=f"unix://{sock}"), user, service


def _record(work: Path, size: int) -> tuple[bytes, Any]:
    from sealtrace.proxy import Identity, write_keypair
    from sealtrace.sandbox import load_recording

    pub, key = write_keypair(work / f"keys-{size}", "bench")
    app = work / "app"
    app.mkdir(exist_ok=True)
    (app / "app.py").write_text(APP)
    data_file = work / f"input-{size}"
    data_file.write_bytes(os.urandom(size))
    store = work / f"store-{size}"
    subprocess.run(
        [str(Path(sys.executable).with_name("sealtrace")), "record", "--recipient", str(pub),
         "--output", str(store), "--app-root", str(app), "--", sys.executable,
         str(app / "app.py"), str(data_file)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    data_file.unlink()
    return load_recording(str(store), Identity.load(key))


def main() -> None:
    from sealtrace.agent import PodmanTransport, SandboxClient
    from sealtrace.sandbox import Inquiry, build_image

    quick = "--quick" in sys.argv
    repeats = 3 if quick else 10
    client, user, service = _service()
    work = Path(tempfile.mkdtemp(prefix="sealtrace-bench-sandbox-"))
    rows = []
    try:
        image = build_image(client)
        for size in (1 << 20, 50 << 20):
            data, parsed = _record(work, size)
            starts = []
            for _ in range(repeats):
                transport = PodmanTransport(client, image, uid=user.pw_uid, gid=user.pw_gid)
                start = time.perf_counter()
                with SandboxClient(data, parsed, transport) as box:
                    box.stats()
                    starts.append(time.perf_counter() - start)
            local = []
            for _ in range(repeats):
                start = time.perf_counter()
                Inquiry(data, parsed).survey()
                local.append(time.perf_counter() - start)
            rows.append(
                {
                    "recording_bytes": len(data),
                    "start_to_first_answer_s": statistics.median(starts),
                    "in_process_first_answer_s": statistics.median(local),
                }
            )
        transport = PodmanTransport(client, image, uid=user.pw_uid, gid=user.pw_gid)
        data, parsed = _record(work, (1 << 20) + 1)  # its own keys and store
        in_process = Inquiry(data, parsed)
        in_process.survey()
        with SandboxClient(data, parsed, transport) as box:
            box.stats()
            piped, direct = [], []
            for _ in range(200):
                start = time.perf_counter()
                box.stats()
                piped.append(time.perf_counter() - start)
                start = time.perf_counter()
                in_process.survey()
                direct.append(time.perf_counter() - start)
        round_trip = {
            "through_pipe_ms": statistics.median(piped) * 1000,
            "in_process_ms": statistics.median(direct) * 1000,
        }
        round_trip["added_ms"] = round_trip["through_pipe_ms"] - round_trip["in_process_ms"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        client.close()
        service.terminate()
        service.wait()
    for r in rows:
        print(
            f"{r['recording_bytes'] / 2**20:6.1f} MiB recording: container to first answer "
            f"{r['start_to_first_answer_s'] * 1000:.0f} ms (in-process "
            f"{r['in_process_first_answer_s'] * 1000:.0f} ms; target ≤ 500 ms for 1 MB)"
        )
    print(
        f"one question: {round_trip['through_pipe_ms']:.3f} ms through the pipe, "
        f"{round_trip['in_process_ms']:.3f} ms in-process, added {round_trip['added_ms']:.3f} ms "
        "(target ≤ 1 ms)"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine(),
                "repeats": repeats,
                "image": image,
                "start": rows,
                "round_trip": round_trip,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
