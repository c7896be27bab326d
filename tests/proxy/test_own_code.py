"""What the recorder treats as its own code, and as the interpreter's own trees, must not
swallow the application: in an editable install the source tree's root is on sealtrace's
package path, and the project's demo and tests live under it."""

from __future__ import annotations

from pathlib import Path

import sealtrace.proxy
from sealtrace.proxy._recorder import passthrough_prefixes
from sealtrace.proxy._runtime import OWN_DIRECTORIES, is_own_code, path_under

from ..conftest import REPO


def test_sealtrace_code_is_its_own() -> None:
    assert is_own_code(sealtrace.proxy.__file__)
    assert path_under(str(Path(sealtrace.proxy.__file__).parent), OWN_DIRECTORIES)


def test_the_demo_and_tests_are_application_code() -> None:
    app = str(REPO / "examples" / "pricing" / "app.py")
    for path in (app, __file__):
        assert not is_own_code(path)
        assert not path_under(path, passthrough_prefixes())
    # Control: the standard library is passed through.
    import json

    assert path_under(json.__file__, passthrough_prefixes())
