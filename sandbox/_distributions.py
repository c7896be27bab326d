"""Which distributions a replay image carries, chosen offline from an installed environment.

`sealtrace sandbox build-image --requirements FILE` builds an image holding the distributions
the file names, everything they require, and what sealtrace's replay runtime requires, all
copied from the interpreter's own environment: nothing is downloaded, so each one must be
installed there already, at a version the file allows. parse_requirements() reads the file
(one `NAME[extras] SPECIFIER ; MARKER` per line; pip options, URLs and paths are refused);
select() runs inside the target interpreter, walks Requires-Dist, and names every file each
chosen distribution installed (its RECORD) under the site directory.

The chosen set's manifest, in the recorder's form, is stamped on the image; replay refuses a
recording whose manifest differs, so the file should be the production environment's own
`pip freeze`.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Requirement", "canonical", "parse_requirements", "probe", "select"]

_LINE = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*"
    r"(?:\[(?P<extras>[^\]]*)\])?\s*"
    r"(?P<spec>[^;]*?)\s*(?:;\s*(?P<marker>.+))?$"
)
_SPEC = re.compile(r"^(?:(?:===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*(?:,\s*|$))*$")
_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


class RequirementsError(ValueError):
    """A requirements line this offline build cannot honour."""


@dataclass(frozen=True)
class Requirement:
    name: str
    extras: tuple[str, ...] = ()
    specifier: str = ""
    marker: str = ""
    why: str = ""  # where it came from, for messages


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_requirements(text: str, origin: str) -> list[Requirement]:
    """The requirements in `text` (a file named `origin`); RequirementsError for a line that
    names anything but an installed distribution."""
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        where = f"{origin}:{number}"
        if line.startswith(("-", ".", "/")) or "://" in line or " @ " in line:
            raise RequirementsError(
                f"{where}: {line!r} is not supported: the image is built offline from "
                "installed distributions, so a line names one (NAME[extras] ==VERSION)"
            )
        match = _LINE.match(line)
        if match is None or not _SPEC.match(match["spec"] or ""):
            raise RequirementsError(f"{where}: {line!r} is not a requirement")
        extras = tuple(e.strip() for e in (match["extras"] or "").split(",") if e.strip())
        found.append(
            Requirement(match["name"], extras, match["spec"] or "", match["marker"] or "", where)
        )
    return found


def _marker_holds(marker: str, extras: tuple[str, ...]) -> bool | None:
    """Whether an environment marker holds here for these extras; None if it cannot tell
    (no `packaging` in this environment and the marker is not about extras)."""
    try:
        from packaging.markers import Marker
    except ImportError:
        named = _EXTRA.findall(marker)
        if named:
            return any(canonical(e) in {canonical(x) for x in extras} for e in named)
        return None
    parsed = Marker(marker)
    return any(parsed.evaluate({"extra": extra}) for extra in (extras or ("",)))


def _allows(specifier: str, version: str) -> bool:
    if not specifier:
        return True
    try:
        from packaging.specifiers import SpecifierSet
    except ImportError:  # without packaging only exact pins are checked
        pins = re.findall(r"==\s*([^,\s]+)", specifier)
        return all(pin == version for pin in pins)
    return SpecifierSet(specifier).contains(version, prereleases=True)


def _dependency(text: str, why: str) -> Requirement | None:
    match = _LINE.match(text.strip())
    if match is None:
        return None
    spec = (match["spec"] or "").strip("() ")
    extras = tuple(e.strip() for e in (match["extras"] or "").split(",") if e.strip())
    return Requirement(match["name"], extras, spec, match["marker"] or "", why)


def select(requirements: list[Requirement]) -> dict[str, Any]:
    """In this interpreter: the closure of `requirements` plus sealtrace's own, as
    {"manifest": [[name, version]...], "files": [...], "problems": [...]}."""
    from importlib.metadata import distributions

    installed: dict[str, Any] = {}
    for found in distributions():
        name = found.metadata["Name"]
        if name:
            installed.setdefault(canonical(name), found)
    problems: list[str] = []
    chosen: dict[str, set[str]] = {}  # name -> extras already followed
    queue = [*requirements, Requirement("sealtrace", why="sealtrace's replay runtime")]
    while queue:
        req = queue.pop(0)
        key = canonical(req.name)
        dist = installed.get(key)
        if req.marker:
            holds = _marker_holds(req.marker, req.extras)
            if holds is False or (holds is None and dist is None):
                continue
        if dist is None:
            problems.append(f"{req.name} ({req.why}) is not installed in {sys.prefix}")
            continue
        version = dist.metadata["Version"]
        if not _allows(req.specifier, version):
            problems.append(f"{req.name} ({req.why}) wants {req.specifier}; {version} is installed")
            continue
        followed = chosen.setdefault(key, set())
        extras = {canonical(e) for e in req.extras}
        if followed and extras <= followed:
            continue
        new = tuple(sorted(extras - followed)) or ("",)
        first = not followed
        followed.update(extras or {""})
        for text in dist.requires or []:
            dep = _dependency(text, f"needed by {dist.metadata['Name']}")
            if dep is None:
                continue
            about_extras = bool(_EXTRA.search(dep.marker))
            if not first and not about_extras:
                continue  # its unconditional requirements were followed the first time
            if about_extras:
                holds = _marker_holds(dep.marker, tuple(e for e in new if e))
                if not holds:
                    continue
                dep = Requirement(dep.name, dep.extras, dep.specifier, "", dep.why)
            queue.append(dep)
    files: set[str] = set()
    for key in chosen:
        dist = installed[key]
        site = os.path.normpath(str(dist.locate_file("")))
        if dist.files is None:
            problems.append(f"{dist.metadata['Name']} has no RECORD: its files are unknown")
            continue
        for entry in dist.files:
            path = os.path.normpath(str(dist.locate_file(entry)))
            if not path.startswith(site + os.sep) or "__pycache__" in path:
                continue  # scripts in bin/, data outside the site directory
            files.add(path)
            parent = os.path.dirname(path)
            while parent.startswith(site + os.sep):
                files.add(parent)
                parent = os.path.dirname(parent)
    manifest = sorted(
        [key, installed[key].metadata["Version"]] for key in chosen if key != "sealtrace"
    )
    return {"manifest": manifest, "files": sorted(files), "problems": problems}


def probe() -> None:
    """`python -c 'from sealtrace.sandbox._distributions import probe; probe()'`: select() on
    the requirements read as JSON from stdin (null: every installed distribution)."""
    from sealtrace.proxy.boundary import installed_manifest

    asked = json.load(sys.stdin)
    if asked is None:
        result: dict[str, Any] = {"manifest": installed_manifest(), "files": None, "problems": []}
    else:
        result = select([Requirement(**{**r, "extras": tuple(r["extras"])}) for r in asked])
    result["python"] = sys.version
    json.dump(result, sys.stdout)


def as_json(requirements: list[Requirement]) -> list[dict[str, Any]]:
    return [asdict(r) for r in requirements]
