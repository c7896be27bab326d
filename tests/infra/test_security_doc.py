"""docs/security.md names, for each property, the test that proves it. A proof that was
renamed or deleted would leave the page claiming a property nothing checks: every test file
and every `file::test` it names must exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "security.md"
NAMED = re.compile(r"`(tests/[\w/]+\.py)((?:::\w+)?)`|`(::\w+)`")


def _named(text: str) -> list[tuple[str, str]]:
    """(file, test or "") for every proof on the page; a bare `::test` belongs to the file
    named before it in the same table row."""
    found: list[tuple[str, str]] = []
    for line in text.splitlines():
        current = ""
        for match in NAMED.finditer(line):
            if match.group(1):
                current = match.group(1)
                found.append((current, match.group(2)[2:]))
            elif current:
                found.append((current, match.group(3)[2:]))
    return found


def _missing(text: str) -> list[str]:
    missing = []
    for file, test in _named(text):
        path = ROOT / file
        if not path.is_file():
            missing.append(file)
        elif test and not re.search(rf"^(async )?def {test}\(", path.read_text(), re.M):
            missing.append(f"{file}::{test}")
    return missing


def test_the_page_names_proofs() -> None:
    assert len(_named(PAGE.read_text(encoding="utf-8"))) >= 30


def test_every_proof_the_page_names_exists() -> None:
    assert _missing(PAGE.read_text(encoding="utf-8")) == []


def test_negative_control_a_renamed_or_deleted_proof_is_caught() -> None:
    page = (
        "| a | b | `tests/agent/test_hygiene.py::test_no_such_proof`, `::test_nor_this` |\n"
        "| c | d | `tests/agent/test_no_such_file.py` |\n"
    )
    assert _missing(page) == [
        "tests/agent/test_hygiene.py::test_no_such_proof",
        "tests/agent/test_hygiene.py::test_nor_this",
        "tests/agent/test_no_such_file.py",
    ]
