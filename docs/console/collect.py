"""Copy the screenshots docs/console.md shows from a run of the browser tests.

    SEALTRACE_CONSOLE_SHOTS=/tmp/shots .venv/bin/python -m pytest tests/e2e/test_console.py
    python3 docs/console/collect.py /tmp/shots

Each test's screenshots are in DIR/TEST/NN-name.png; the story's keep their names, and the
others the name without their number.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STORY = "test_the_story_in_the_console"
OTHERS = {
    "test_keyboard_only": ["keyboard-focus-on-a-value"],
    "test_an_auditor_cannot_open_a_session": ["audit-log", "auditor-sees-no-session-button"],
    "test_a_hostile_recording_renders_as_text": ["hostile-strings-as-text"],
    "test_time_outs_sign_out": ["idle-time-out"],
    "test_a_crashed_run_lands_on_its_crash": ["crash-landing"],
    "test_an_admin_manages_users_and_tokens": ["users-and-tokens"],
    "test_a_served_run_lists_its_requests_and_goes_to_one": [
        "requests-in-a-session",
        "at-request-2",
    ],
}


def main(shots: Path) -> None:
    for png in sorted((shots / STORY).glob("*.png")):
        shutil.copyfile(png, HERE / png.name)
    for test, names in OTHERS.items():
        for png in sorted((shots / test).glob("*.png")):
            name = png.stem.split("-", 1)[1]
            if name in names:
                shutil.copyfile(png, HERE / f"{name}.png")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
