"""The replay image, built offline: the interpreter, its standard library, the virtual
environment's distributions (all of them, or a requirements file's: see _distributions;
sealtrace's replay runtime and engine always) and the shared libraries they load, each at
the path it has on this machine. The image's labels say which distributions and which
Python it holds, so a recording it cannot replay is refused before a container starts.

Replay checks the recording's Python version, distribution manifest and source paths, so
the image reproduces this interpreter's tree exactly rather than installing anything. It is
`FROM scratch` + one `ADD rootfs.tar`, built through a rootless Podman service; no registry
is involved. The image is tagged with a digest of its file list (path, size, mode, mtime), so an
unchanged tree is neither read nor built twice.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import marshal
import os
import re
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sealtrace.proxy import UsageError

from ._distributions import Requirement, as_json
from ._environment import manifest_problem

__all__ = [
    "MANIFEST_LABEL",
    "PYTHON_LABEL",
    "TMP_LABEL",
    "ImagePlan",
    "build_image",
    "image_files",
    "image_problem",
    "image_tag",
    "plan_image",
    "write_rootfs",
]

# 2: labelled with manifest and Python; 3: bytecode; 4: the /tmp size label; 5, 6: in pages
IMAGE_FORMAT = 6
MANIFEST_LABEL = "sealtrace.manifest"
PYTHON_LABEL = "sealtrace.python"
TMP_LABEL = "sealtrace.tmp-bytes"

# Parts of the standard library no replay needs (tests, GUI toolkits, installers).
_STDLIB_SKIP = ("test", "site-packages", "idlelib", "tkinter", "turtledemo", "ensurepip")
_MERGED_TOPS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_PAGE = 4096  # what a tmpfs allocates in
_SYSTEM_DATA = ("/usr/share/zoneinfo", "/usr/lib/locale")
_EMPTY_DIRS = {"tmp": 0o1777, "pipes": 0o755, "proc": 0o555, "dev": 0o755, "sys": 0o555}


def _tree(root: str, skip: Iterable[str] = ()) -> set[str]:
    skipped = set(skip)
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [
            d for d in dirnames if d != "__pycache__" and os.path.join(dirpath, d) not in skipped
        ]
        found.update(os.path.join(dirpath, name) for name in (*dirnames, *filenames))
    return found


def _shared_libraries(objects: Iterable[str]) -> set[str]:
    libs: set[str] = set()
    for path in objects:
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        out = subprocess.run(["ldd", path], capture_output=True, text=True, check=False).stdout
        for match in re.finditer(r"(/\S+\.so[^\s]*)", out):
            libs.add(match.group(1))
            libs.add(os.path.realpath(match.group(1)))
    return libs


@dataclass(frozen=True)
class ImagePlan:
    """What an image holds: its files, the manifest of its distributions (the recorder's
    form) and its interpreter's sys.version; the last two are stamped on it as labels."""

    files: list[str]
    manifest: list[list[str]]
    python: str


def plan_image(
    python: str = sys.executable, requirements: list[Requirement] | None = None
) -> ImagePlan:
    """The image for the interpreter `python` runs as (its venv too): every distribution
    installed there, or with `requirements` only those, what they need and what replay
    needs (sealtrace.sandbox._distributions). UsageError if that environment cannot
    provide them."""
    probe = subprocess.run(
        [python, "-c", "import json, sys, sysconfig, sealtrace.proxy as p, os; print(json.dumps("
         "[sys.prefix, sys.base_prefix, sysconfig.get_paths()['stdlib'], "
         "sysconfig.get_paths()['purelib'], os.path.dirname(os.path.dirname(p.__file__)), "
         "sys.executable]))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    prefix, base, stdlib, purelib, repo, executable = json.loads(probe.stdout)
    chosen = json.loads(
        subprocess.run(
            [python, "-c", "from sealtrace.sandbox._distributions import probe; probe()"],
            input=json.dumps(None if requirements is None else as_json(requirements)),
            capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    if chosen["problems"]:
        problems = chosen["problems"]
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise UsageError(
            f"{python}'s environment cannot provide the image's distributions (nothing is "
            f"downloaded): {'; '.join(problems[:5])}{more}"
        )
    skipped = [os.path.join(stdlib, d) for d in _STDLIB_SKIP]
    files = _tree(stdlib, skipped)
    # Left out, but present as empty directories: the import system lists the standard
    # library's directory, and a listing of other names here than where the recording is
    # replayed in-process would move the program's objects (sets of them iterate by id).
    files |= {d for d in skipped if os.path.isdir(d)}
    files |= _tree(purelib) if chosen["files"] is None else set(chosen["files"])
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    files.add(os.path.join(base, "bin", version))
    for name in os.listdir(os.path.join(base, "lib")):
        if name.startswith(f"lib{version}.so"):
            files.add(os.path.join(base, "lib", name))
    for name in ("pyvenv.cfg", "bin/python", "bin/python3", f"bin/{version}"):
        path = os.path.join(prefix, name)
        if os.path.lexists(path):
            files.add(path)
    files.add(executable)
    # sealtrace installed in editable mode lives in its source tree: the packages come along.
    for package in ("proxy", "sandbox", "agent", "server"):
        if os.path.exists(os.path.join(repo, package, "__init__.py")):
            files |= _tree(os.path.join(repo, package))
    objects = [f for f in files if f.endswith(".so") or ".so." in f or f.endswith(version)]
    files |= _shared_libraries(objects)
    # The recorded time zone and locale must resolve as they did: without its locale data,
    # `LANG=C.UTF-8` falls back to ASCII and text I/O runs (and fails) differently.
    for data in _SYSTEM_DATA:
        if os.path.isdir(data):
            files |= _tree(data)
    return ImagePlan(sorted(files), chosen["manifest"], chosen["python"])


def image_files(python: str = sys.executable) -> list[str]:
    """Every path the default image (every installed distribution) holds."""
    return plan_image(python).files


def _bytecode(path: str, source: bytes) -> bytes | None:
    """The .pyc Python would write for `path`: this machine's own when it is current, else
    compiled here. The image's root is read-only, so without these every process in the
    sandbox would compile every module it imports (hundreds of milliseconds at start)."""
    st = os.stat(path)
    header = importlib.util.MAGIC_NUMBER + struct.pack(
        "<III", 0, int(st.st_mtime) & 0xFFFF_FFFF, st.st_size & 0xFFFF_FFFF
    )
    try:
        with open(importlib.util.cache_from_source(path), "rb") as handle:
            cached = handle.read()
        if cached[:16] == header:
            return cached
    except (OSError, ValueError):
        pass
    try:
        with warnings.catch_warnings():  # old escape sequences and the like: not ours to fix
            warnings.simplefilter("ignore")
            code = compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None  # not Python 3.11 (a template, a test fixture): nothing imports it
    return header + marshal.dumps(code)


def write_rootfs(out: Path, files: list[str]) -> int:
    """Write the rootfs tar, with bytecode for every module. Files keep their modification
    times, which the bytecode is checked against. Returns what the image holds under /tmp,
    in tmpfs pages: a session's /tmp tmpfs must hold a copy of it."""
    under_tmp = 0

    def add(tar: tarfile.TarFile, info: tarfile.TarInfo, data: bytes | None = None) -> None:
        nonlocal under_tmp
        tar.addfile(info, io.BytesIO(data) if data is not None else None)
        if info.name.startswith("tmp/"):
            # tmpfs charges whole pages for a file's data (and one for a symlink's target);
            # directories and inodes take no pages.
            if info.isreg():
                under_tmp += _PAGE * -(-len(data or b"") // _PAGE)
            elif info.issym():
                under_tmp += _PAGE

    with tarfile.open(out, "w") as tar:
        for top in _MERGED_TOPS:
            if os.path.islink(top):
                tar.add(top, recursive=False)
        seen: set[str] = set()
        for path in files:
            # A path under a symlinked top directory goes in through the link's target.
            name = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
            if name in seen or not os.path.lexists(path):
                continue
            seen.add(name)
            info = tar.gettarinfo(path, arcname=name.lstrip("/"))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if not info.isreg():
                add(tar, info)
                continue
            with open(path, "rb") as handle:
                data = handle.read()
            add(tar, info, data)
            pyc = _bytecode(path, data) if path.endswith(".py") else None
            if pyc is None:
                continue
            cached = importlib.util.cache_from_source(name)
            if os.path.dirname(cached) not in seen:
                seen.add(os.path.dirname(cached))
                folder = tarfile.TarInfo(os.path.dirname(cached).lstrip("/"))
                folder.type = tarfile.DIRTYPE
                folder.mode = 0o755
                add(tar, folder)
            compiled = tarfile.TarInfo(cached.lstrip("/"))
            compiled.size = len(pyc)
            compiled.mode = 0o644
            add(tar, compiled, pyc)
        for name, mode in _EMPTY_DIRS.items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = mode
            tar.addfile(info)
    return under_tmp


def image_tag(files: list[str]) -> str:
    """16 hex digits naming this tree: every file with its size, mode and modification time,
    every directory with its mode. A directory's own times change whenever Python writes a
    __pycache__ into it (which the image leaves out), so they name nothing the image holds."""
    digest = hashlib.sha256(f"sealtrace-image {IMAGE_FORMAT}\n".encode())
    for path in files:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            digest.update(f"{path}\0dir\0{st.st_mode}\n".encode())
            continue
        digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\n".encode())
    return digest.hexdigest()[:16]


def build_image(
    client: Any, plan: ImagePlan | None = None, *, name: str = "sealtrace-replay"
) -> str:
    """Build (or find) the replay image through a Podman service; returns its reference.
    The default plan is this interpreter's whole environment."""
    plan = plan or plan_image()
    reference = f"localhost/{name}:{image_tag(plan.files)}"
    if client.images.exists(reference):
        return reference
    with tempfile.TemporaryDirectory(prefix="sealtrace-image-") as work:
        context = Path(work)
        under_tmp = write_rootfs(context / "rootfs.tar", plan.files)
        (context / "Containerfile").write_text("FROM scratch\nADD rootfs.tar /\n")
        client.images.build(
            path=str(context),
            dockerfile="Containerfile",
            tag=reference,
            pull=False,
            labels={
                MANIFEST_LABEL: json.dumps(plan.manifest),
                PYTHON_LABEL: plan.python,
                TMP_LABEL: str(under_tmp),
            },
        )
    return reference


def image_problem(client: Any, reference: str, meta: dict[str, Any]) -> str | None:
    """Why the image cannot replay a recording described by `meta` (its interpreter or its
    distributions differ), or None; read from the image's labels, before any container."""
    try:
        labels = client.images.get(reference).labels or {}
    except Exception as exc:
        return f"no replay image {reference}: {exc}"
    if MANIFEST_LABEL not in labels or PYTHON_LABEL not in labels:
        return f"the image {reference} does not say what it holds: rebuild it"
    if labels[PYTHON_LABEL] != meta.get("python"):
        return (
            f"the run was recorded with Python {meta.get('python')!r}; the image {reference} "
            f"holds {labels[PYTHON_LABEL]!r}"
        )
    problem = manifest_problem(meta.get("manifest", []), json.loads(labels[MANIFEST_LABEL]))
    return f"the image {reference}: {problem}" if problem else None
