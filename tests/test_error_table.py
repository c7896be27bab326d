"""docs/errors.md against the code: every error class of every component's errors module is
in the table with its exit code ("—" for the server's, which carry none), the table names no
class the code lacks, each errors module's docstring tree names all of its classes, and the
packages that export their errors export all of them."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

COMPONENTS = ("proxy", "sandbox", "agent", "server")
TABLE = Path(__file__).resolve().parent.parent / "docs" / "errors.md"
ROW = re.compile(r"^\| `(\w+)` \| (\w+) \| (\d+|—) \| .+ \|$")
CONTRACT = {1, 2, 3, 4, 5}  # docs: 2 usage, 3 divergence, 4 integrity, 5 sandbox, 1 other


def _errors(component: str) -> ModuleType:
    return importlib.import_module(f"sealtrace.{component}._errors")


def _classes(module: ModuleType) -> dict[str, type[BaseException]]:
    """The exception classes the module defines (not those it imports)."""
    return {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
    }


def _table(text: str) -> dict[tuple[str, str], str]:
    rows: dict[tuple[str, str], str] = {}
    for line in text.splitlines():
        found = ROW.match(line)
        if found:
            name, component, code = found.groups()
            assert (name, component) not in rows, f"{name} ({component}) is in the table twice"
            rows[(name, component)] = code
    return rows


def _drift(rows: dict[tuple[str, str], str], component: str) -> list[str]:
    """How the table's rows differ from the component's errors module."""
    problems = []
    for name, cls in _classes(_errors(component)).items():
        code = getattr(cls, "exit_code", None)
        wanted = "—" if code is None else str(code)
        if (name, component) not in rows:
            problems.append(f"{name} ({component}) is missing")
        elif rows[(name, component)] != wanted:
            problems.append(f"{name} ({component}) exits {wanted}, the table says otherwise")
    return problems


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_error_is_in_the_table_with_its_exit_code(component: str) -> None:
    classes = _classes(_errors(component))
    assert classes, f"sealtrace.{component}._errors defines no errors"
    assert _drift(_table(TABLE.read_text()), component) == []
    for name, cls in classes.items():
        code = getattr(cls, "exit_code", None)
        assert code is None or code in CONTRACT, f"{name} exits {code}, outside the contract"


def test_a_drifted_table_is_caught() -> None:
    # Negative control: a changed exit code and a dropped row are both reported.
    text = TABLE.read_text()
    text = text.replace("| `SandboxError` | agent | 5 |", "| `SandboxError` | agent | 3 |")
    text = "\n".join(line for line in text.splitlines() if "`ServerError`" not in line)
    assert _drift(_table(text), "agent") == [
        "SandboxError (agent) exits 5, the table says otherwise",
        "ServerError (agent) is missing",
    ]


def test_the_table_names_only_classes_that_exist() -> None:
    rows = _table(TABLE.read_text())
    assert len(rows) >= 20, "the table did not parse"
    for name, component in rows:
        assert component in COMPONENTS, component
        assert name in _classes(_errors(component)), f"{name} is not in {component}._errors"


@pytest.mark.parametrize("component", COMPONENTS)
def test_the_docstring_tree_names_every_class(component: str) -> None:
    module = _errors(component)
    tree = module.__doc__ or ""
    for name in _classes(module):
        assert re.search(rf"\b{name}\b", tree), f"{name} is not drawn in {module.__name__}"


@pytest.mark.parametrize("component", ["proxy", "agent", "server"])
def test_the_package_exports_its_errors(component: str) -> None:
    module = _errors(component)
    package = importlib.import_module(f"sealtrace.{component}")
    assert set(module.__all__) == set(_classes(module))
    for name in module.__all__:
        assert name in package.__all__, f"sealtrace.{component} does not export {name}"
        assert getattr(package, name) is getattr(module, name)
