"""The replay image's distributions: `build-image --requirements`, and the check that a
recording's manifest matches the image before any container starts.

- a requirements file is read line by line; what an offline build cannot honour (pip
  options, URLs, paths, nonsense) is refused with its file and line;
- the chosen set is the file's distributions, what they require and what replay requires,
  each at its installed version; a pin the environment does not satisfy, or a distribution
  it lacks, is refused before Podman is asked for anything (exit 2);
- an image built from a short requirements file carries only that set, says so in its
  labels, and a recording made with more installed is refused (exit 2) without a container;
- an image built from the environment's own freeze replays the recording bit-exact.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from sealtrace.sandbox._distributions import (
    Requirement,
    RequirementsError,
    parse_requirements,
    select,
)

from ..conftest import KeyFiles, run_cli
from .replaying import PYTHON, record, write_app


def test_requirements_lines_are_read_with_extras_pins_and_markers() -> None:
    text = (
        "# production freeze\n"
        "Markdown==3.11.3  # the converter\n"
        "\n"
        "httpie[test] >=3, <4 ; python_version > '3'\n"
        "typing_extensions\n"
    )
    assert parse_requirements(text, "req.txt") == [
        Requirement("Markdown", (), "==3.11.3", "", "req.txt:2"),
        Requirement("httpie", ("test",), ">=3, <4", "python_version > '3'", "req.txt:4"),
        Requirement("typing_extensions", (), "", "", "req.txt:5"),
    ]


@pytest.mark.parametrize(
    "line",
    ["-e .", "-r other.txt", "--index-url https://pypi.org/simple", "./wheels/x.whl",
     "pkg @ https://example.com/pkg.whl", "https://example.com/x.tar.gz", "two words",
     "name=1.0"],
)  # fmt: skip
def test_what_an_offline_build_cannot_honour_is_refused_with_its_line(line: str) -> None:
    with pytest.raises(RequirementsError, match=r"req\.txt:2: "):
        parse_requirements(f"markdown\n{line}\n", "req.txt")


def test_the_chosen_set_is_the_requirements_closure_with_the_replay_runtime() -> None:
    from importlib.metadata import version

    chosen = select(parse_requirements("markdown\n", "req.txt"))
    assert chosen["problems"] == []
    names = dict(chosen["manifest"])
    assert names["markdown"] == version("markdown")
    # sealtrace's own requirements come along; sealtrace itself is not in the manifest,
    # as in a recording's.
    assert {"cryptography", "typer", "cffi", "pycparser"} <= set(names)
    assert "sealtrace" not in names
    assert not {"black", "pytest", "mako", "httpie"} & set(names)  # not asked for
    import markdown

    package = os.path.dirname(markdown.__file__)
    assert os.path.join(package, "__init__.py") in chosen["files"]
    assert all(os.path.lexists(f) for f in chosen["files"])
    assert not [f for f in chosen["files"] if "/black/" in f or "__pycache__" in f]


def test_pins_and_missing_distributions_are_named() -> None:
    chosen = select(parse_requirements("markdown==0.1\nno-such-dist-here\n", "req.txt"))
    assert len(chosen["problems"]) == 2
    assert "markdown (req.txt:1) wants ==0.1" in chosen["problems"][0]
    assert "no-such-dist-here (req.txt:2) is not installed" in chosen["problems"][1]
    # A marker that does not hold here drops the line instead.
    assert (
        select(parse_requirements("no-such-dist ; python_version < '3'\n", "r"))["problems"] == []
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-e .\n", "req.txt:1: '-e .' is not supported"),
        ("markdown==0.1\n", "markdown (req.txt:1) wants ==0.1"),
    ],
)
def test_build_image_refuses_a_requirement_before_asking_podman(
    tmp_path: Path, text: str, message: str
) -> None:
    (tmp_path / "req.txt").write_text(text)
    proc = run_cli(
        "sandbox", "build-image", "--requirements", str(tmp_path / "req.txt"),
        env={"SEALTRACE_PODMAN_SOCKET": "unix:///nonexistent.sock"},
    )  # fmt: skip
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.count("sealtrace: error:") == 1, err
    assert message.replace("req.txt", str(tmp_path / "req.txt")) in err
    missing = run_cli("sandbox", "build-image", "--requirements", str(tmp_path / "nope.txt"))
    assert missing.returncode == 2 and b"cannot read" in missing.stderr


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeyFiles, Path]:
    from sealtrace.proxy import write_keypair

    work = tmp_path_factory.mktemp("image-run")
    keys = KeyFiles(*write_keypair(work / "keys", "image"))
    source = "import markdown, time\nprint(markdown.markdown('*hi*'), time.time() > 0)\n"
    app = write_app(work / "app", source)
    recorded = record(keys, work / "store", [PYTHON, str(app)])
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    return keys, work / "store"


def _containers(client: Any, image: str) -> set[str]:
    """The containers made from `image` (only this test makes any: others run beside it)."""
    return {c.id for c in client.containers.list(all=True, filters={"ancestor": image})}


def _build(env: dict[str, str], requirements: Path) -> dict[str, Any]:
    built = run_cli("sandbox", "build-image", "--requirements", str(requirements), "--json",
                    env=env)  # fmt: skip
    assert built.returncode == 0, built.stderr.decode()
    result: dict[str, Any] = json.loads(built.stdout)
    return result


@pytest.mark.podman
def test_an_image_of_fewer_distributions_refuses_the_recording_before_a_container(
    small_run: tuple[KeyFiles, Path],
    podman_service: tuple[Any, Any, str],
    tmp_path: Path,
) -> None:
    from sealtrace.sandbox._image import MANIFEST_LABEL, PYTHON_LABEL

    client, _user, socket_url = podman_service
    keys, store = small_run
    (tmp_path / "req.txt").write_text("markdown\n")
    env = {"SEALTRACE_PODMAN_SOCKET": socket_url}
    built = _build(env, tmp_path / "req.txt")
    labels = client.images.get(built["image"]).labels
    assert labels[PYTHON_LABEL] == sys.version
    manifest = json.loads(labels[MANIFEST_LABEL])
    assert manifest == select(parse_requirements("markdown\n", "r"))["manifest"]
    assert built["distributions"] == len(manifest) and built["id"]
    before = _containers(client, built["image"])
    refused = run_cli(
        "replay", str(store), "--identity", str(keys.identity_path), "--sandbox",
        env={**env, "SEALTRACE_REPLAY_IMAGE": built["image"]},
    )  # fmt: skip
    err = refused.stderr.decode()
    assert refused.returncode == 2 and err.count("sealtrace: error:") == 1, err
    from sealtrace.proxy._recorder import installed_manifest

    first_missing = min(name for name, _ in installed_manifest() if name not in dict(manifest))
    assert built["image"] in err and f"{first_missing}==" in err and "is missing" in err
    assert _containers(client, built["image"]) == before  # refused before any container


@pytest.mark.podman
def test_an_image_of_the_environments_freeze_replays_the_recording(
    small_run: tuple[KeyFiles, Path],
    podman_service: tuple[Any, Any, str],
    tmp_path: Path,
) -> None:
    from sealtrace.proxy._recorder import installed_manifest

    keys, store = small_run
    freeze = "".join(f"{name}=={version}\n" for name, version in installed_manifest())
    (tmp_path / "req.txt").write_text(freeze)
    env = {"SEALTRACE_PODMAN_SOCKET": podman_service[2]}
    built = _build(env, tmp_path / "req.txt")
    replayed = run_cli(
        "replay", str(store), "--identity", str(keys.identity_path), "--sandbox", "--json",
        env={**env, "SEALTRACE_REPLAY_IMAGE": built["image"]},
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr.decode()
    assert json.loads(replayed.stdout)["status"] == "bit-exact"


def test_the_image_tag_ignores_a_pycache_written_into_a_package(tmp_path: Path) -> None:
    """Importing a package of a fresh checkout writes its __pycache__, which changes the
    directory's own times but nothing the image holds: the tag must stay, so an image built
    at the start of a session is found again later. A changed file must change it."""
    import os

    from sealtrace.sandbox._image import _tree, image_tag

    package = tmp_path / "pkg" / "sub"
    package.mkdir(parents=True)
    module = package / "mod.py"
    module.write_text("x = 1\n")
    os.utime(package, ns=(1, 1))
    before = image_tag(sorted(_tree(str(tmp_path / "pkg"))))
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"compiled")
    assert image_tag(sorted(_tree(str(tmp_path / "pkg")))) == before
    module.write_text("x = 2\n")  # negative control: what the image holds changed
    assert image_tag(sorted(_tree(str(tmp_path / "pkg")))) != before
