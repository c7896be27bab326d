"""Can this interpreter replay the recording? Checked inside the replaying process, which runs
with the recorded environment (PYTHONPATH included), so it sees the distributions and
boundary plugins the program will see."""

from __future__ import annotations

import sys
import time
from typing import Any

from sealtrace.proxy import UsageError
from sealtrace.proxy.boundary import installed_manifest, libraries

__all__ = ["environment_problem", "manifest_problem"]


def environment_problem(meta: dict[str, Any]) -> str | None:
    """Why this process cannot replay a run described by `meta`, or None."""
    if meta.get("python") != sys.version:
        return f"the run was recorded with Python {meta.get('python')!r}; this is {sys.version!r}"
    try:
        libraries(meta.get("libraries", []))
    except UsageError as exc:
        return str(exc)
    problem = manifest_problem(meta.get("manifest", []), installed_manifest())
    if problem is not None:
        return problem
    flags = {k: getattr(sys.flags, k) for k in meta.get("flags", {})}
    if flags != meta.get("flags", {}):
        diff = sorted(k for k in flags if flags[k] != meta["flags"][k])
        return f"interpreter flags differ from the recording: {', '.join(diff)}"
    recorded = meta.get("filesystem_encoding")
    if recorded is not None and recorded != sys.getfilesystemencoding():
        return (
            f"the filesystem encoding here is {sys.getfilesystemencoding()}, the run's was "
            f"{recorded}: the recorded locale ({_locale_names(meta)}) is not installed here"
        )
    zone = meta.get("timezone") or {}
    here = {"tzname": list(time.tzname), "timezone": time.timezone, "altzone": time.altzone}
    if any(zone.get(k) != v for k, v in here.items()):
        return (
            f"the local time zone differs from the recording ({zone.get('tzname')} vs "
            f"{here['tzname']}); set TZ to the recorded zone"
        )
    return None


def _locale_names(meta: dict[str, Any]) -> str:
    env = meta.get("env") or {}
    names = [f"{k}={env[k]}" for k in ("LC_ALL", "LC_CTYPE", "LANG") if env.get(k)]
    return ", ".join(names) or "the C locale"


def manifest_problem(manifest: list[list[str]], installed: list[list[str]]) -> str | None:
    """How the distributions `installed` differ from the recorded `manifest`, or None."""
    recorded = {name: version for name, version in manifest}
    here = {name: version for name, version in installed}
    problems = []
    for name in sorted(set(recorded) | set(here)):
        if name not in here:
            problems.append(f"{name}=={recorded[name]} is missing")
        elif name not in recorded:
            problems.append(f"{name}=={here[name]} was not installed when recording")
        elif recorded[name] != here[name]:
            problems.append(f"{name} is {here[name]}, recorded {recorded[name]}")
    if not problems:
        return None
    more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
    return f"the installed distributions differ from the recording: {'; '.join(problems[:5])}{more}"
