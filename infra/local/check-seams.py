#!/usr/bin/env python3
"""Private modules stay private across packages: report every import that crosses a seam.

    python infra/local/check-seams.py [ROOT]

Each of sealtrace's packages (proxy/ is sealtrace.proxy, sandbox/, agent/, server/) exports its
public names; a module or name that starts with an underscore is private to the package whose
folder holds it. This scans every .py file under proxy/, sandbox/, agent/, server/, bench/ and
infra/ of ROOT (default: this repository; tests/, .venv/ and build/ are not scanned) and
prints one line per import of a name private to another package:

    sandbox/_session.py:20: imports sealtrace.proxy._codec (private to proxy)

`import sealtrace.proxy._x`, `from sealtrace.proxy._x import y`, `from sealtrace.proxy import
_x` and `from sealtrace.proxy.cli import _x` all count, wherever they sit (a function body,
an `if TYPE_CHECKING:` block); relative imports are resolved first. Strings that merely name
a module ("sealtrace.proxy._core_boundary:install_datetime" in a boundary spec) are not
imports and are left alone, and so is sealtrace._engine, the native engine's own name.

Exit status: 0 and silent when there is nothing to report, 1 when something is, 2 when a
file cannot be parsed. Standard library only: it runs before any environment is set up.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGES = ("proxy", "sandbox", "agent", "server")  # folder == name under sealtrace
SCANNED = (*PACKAGES, "bench", "infra")
SKIPPED_DIRS = {".venv", "build", "__pycache__", "node_modules"}


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def private_target(dotted: str) -> tuple[str, str] | None:
    """(the private prefix of `dotted`, its package) when `dotted` reaches into a package's
    private modules or names, else None: sealtrace.proxy._codec.CodecError gives
    ("sealtrace.proxy._codec", "proxy")."""
    parts = dotted.split(".")
    if len(parts) < 3 or parts[0] != "sealtrace" or parts[1] not in PACKAGES:
        return None
    for index in range(2, len(parts)):
        if _is_private(parts[index]):
            return ".".join(parts[: index + 1]), parts[1]
    return None


def _module_of(relative: Path) -> list[str] | None:
    """The dotted package a file belongs to (for relative imports), if it is in one."""
    if relative.parts[0] not in PACKAGES:
        return None
    return ["sealtrace", *relative.parts[:-1]]


def imported_names(tree: ast.AST, package: list[str] | None) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of everything a module imports: modules, and module.name for each
    name of a `from` import."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if package is None or node.level > len(package):
                    continue  # a script's relative import: nothing of sealtrace's
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:
                if alias.name != "*":
                    yield node.lineno, f"{module}.{alias.name}"


def python_files(root: Path) -> Iterator[Path]:
    for top in SCANNED:
        folder = root / top
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.py")):
            if not SKIPPED_DIRS.intersection(path.relative_to(root).parts):
                yield path


def violations(root: Path) -> tuple[list[str], list[str]]:
    """(report lines, files that could not be parsed)."""
    found: list[tuple[str, int, str, str]] = []
    broken: list[str] = []
    for path in python_files(root):
        relative = path.relative_to(root)
        try:
            tree = ast.parse(path.read_bytes(), filename=str(relative))
        except (SyntaxError, ValueError) as exc:
            broken.append(f"{relative.as_posix()}: cannot parse: {exc}")
            continue
        owner = relative.parts[0]
        seen: set[tuple[int, str]] = set()
        for line, dotted in imported_names(tree, _module_of(relative)):
            target = private_target(dotted)
            if target is None or target[1] == owner or (line, target[0]) in seen:
                continue
            seen.add((line, target[0]))
            found.append((relative.as_posix(), line, *target))
    found.sort()
    lines = [f"{path}:{line}: imports {name} (private to {pkg})" for path, line, name, pkg in found]
    return lines, broken


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(f"usage: {Path(__file__).name} [ROOT]", file=sys.stderr)
        return 2
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[2]
    lines, broken = violations(root.resolve())
    for line in lines:
        print(line)
    for line in broken:
        print(line, file=sys.stderr)
    if broken:
        return 2
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
