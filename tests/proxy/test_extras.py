"""What a user who installed one role is told when a command reaches another role's
dependency, and the command line's own install checks (--version, python -m sealtrace,
completion, the interpreter)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from sealtrace.proxy._extras import EXTRAS, missing_extra

from ..conftest import REPO, KeyFiles

# A meta path finder that makes `import NAME` fail as it does where NAME is not installed.
BLOCK = """
import importlib.abc, sys
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Missing())
"""


def _sealtrace(
    *args: str, blocked: set[str] = frozenset(), pre: str = ""
) -> subprocess.CompletedProcess[str]:
    code = (
        BLOCK.format(blocked=set(blocked))
        + pre
        + (
            f"sys.argv = ['sealtrace', *{list(args)!r}]\n"
            "from sealtrace.proxy.cli import main\nmain()\n"
        )
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def _declared() -> dict[str, set[str]]:
    """Each extra's distributions, as pyproject.toml declares them."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return {
        extra: {re.split(r"[\[<>=~! ]", req, maxsplit=1)[0].lower() for req in reqs}
        for extra, reqs in extras.items()
    }


def test_the_table_names_extras_that_really_bring_each_module() -> None:
    declared = _declared()
    for module, (distribution, extras) in EXTRAS.items():
        base = re.split(r"[\[]", distribution, maxsplit=1)[0]
        for extra in extras:
            assert base in declared[extra], f"{module}: {base} is not in [{extra}]"


def test_every_optional_distribution_has_a_module_in_the_table() -> None:
    declared = _declared()
    optional = set().union(*(reqs for extra, reqs in declared.items() if extra != "dev"))
    named = {re.split(r"[\[]", d, maxsplit=1)[0] for d, _ in EXTRAS.values()}
    assert optional <= named | {"celery"}, optional - named


def test_a_missing_s3_dependency_is_one_line_naming_the_extra() -> None:
    proc = _sealtrace("inspect", "s3://bucket/acme/run-1", blocked={"boto3"})
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("sealtrace: error: ") and "pip install 'sealtrace[s3]'" in line


def test_a_server_command_without_the_server_extra_names_it() -> None:
    """The general mechanism: any command that reaches a missing optional dependency."""
    proc = _sealtrace("server", "migrate", blocked={"sqlalchemy", "fastapi", "alembic"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "sealtrace: error: this needs sqlalchemy, which is not installed: "
        "pip install 'sealtrace[server]'"
    ]


def test_negative_control_with_boto3_there_is_no_install_message() -> None:
    proc = _sealtrace("inspect", "s3://bucket/acme/run-1")
    assert "pip install" not in proc.stderr


def test_the_sandbox_without_the_analyst_extra_names_it(keys: KeyFiles, tmp_path: Path) -> None:
    """--sandbox reaches the agent's sandbox client; without its settings package (an analyst
    who installed the bare recorder) the user is told to install the analyst extra."""
    from ..sandbox.replaying import record, write_app

    app = write_app(tmp_path / "app", "print(sum(range(10)))\n")
    recorded = record(keys, tmp_path / "rec", [sys.executable, str(app)])
    assert recorded.proc.returncode == 0, recorded.proc.stderr
    args = ("replay", str(tmp_path / "rec"), "--identity", str(keys.identity_path), "--sandbox")
    proc = _sealtrace(*args, blocked={"pydantic_settings"})
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'sealtrace[analyst]'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_module_no_extra_brings_is_not_blamed_on_the_install() -> None:
    assert missing_extra(ModuleNotFoundError("gone", name="nosuchmodule")) is None
    found = missing_extra(ModuleNotFoundError("gone", name="fastapi.routing"))
    assert found is not None and found.exit_code == 2 and "sealtrace[server]" in str(found)


def test_version_and_python_m_sealtrace() -> None:
    from importlib.metadata import version

    expected = f"sealtrace {version('sealtrace')}"
    for argv in (
        [str(Path(sys.executable).with_name("sealtrace")), "--version"],
        [sys.executable, "-m", "sealtrace", "--version"],
        [sys.executable, "-m", "sealtrace.proxy", "--version"],
    ):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/")
        assert proc.returncode == 0 and proc.stdout.strip() == expected, (argv, proc)


def test_shell_completion_is_offered() -> None:
    proc = _sealtrace("--show-completion", "bash")
    assert proc.returncode == 0, proc.stderr
    assert "complete" in proc.stdout and "sealtrace" in proc.stdout


def test_another_python_is_refused_in_one_line() -> None:
    pre = "sys.version_info = (3, 12, 1, 'final', 0)\n"
    proc = _sealtrace("--help", pre=pre)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip() == "sealtrace: error: sealtrace needs CPython 3.11, not cpython 3.12.1"
    )
    assert _sealtrace("--version").returncode == 0  # negative control: 3.11 runs
