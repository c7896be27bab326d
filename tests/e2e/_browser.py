"""A real Chromium for the console's tests: Debian's `chromium` and `chromium-driver`
(infra/local/bootstrap.sh installs both; nothing is downloaded), driven through Selenium,
headless, with a fresh profile. A missing browser fails the test that needs it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARGUMENTS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1440,1000", "--force-device-scale-factor=1",
)  # fmt: skip


def open_browser(profile: Path) -> Any:
    for needed in (CHROMIUM, CHROMEDRIVER):
        if not needed.exists():
            pytest.fail(f"{needed} is missing: infra/local/bootstrap.sh installs chromium and "
                        "chromium-driver")  # fmt: skip
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in ARGUMENTS:
        options.add_argument(argument)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


class Browser:
    """One browser, a screenshot per step (NN-name.png under `shots`), and waits that
    return as soon as a page has loaded."""

    def __init__(self, driver: Any, base: str, shots: Path) -> None:
        self.driver = driver
        self.base = base
        self.shots = shots
        self.taken: list[Path] = []

    def get(self, path: str) -> None:
        self.driver.get(self.base + path)
        self.loaded()

    def loaded(self, when: Callable[[Any], Any] | None = None, timeout: float = 120) -> None:
        """Wait until the page has loaded (and `when` holds of the driver)."""
        from selenium.webdriver.support.ui import WebDriverWait

        def ready(driver: Any) -> bool:
            done = driver.execute_script("return document.readyState") == "complete"
            return bool(done and (when is None or when(driver)))

        WebDriverWait(self.driver, timeout, poll_frequency=0.02).until(ready)

    def at(self, fragment: str, timeout: float = 120) -> float:
        """Wait for a page whose address has `fragment`; the seconds it took."""
        started = time.perf_counter()
        self.loaded(lambda d: fragment in d.current_url, timeout)
        return time.perf_counter() - started

    def shot(self, name: str) -> Path:
        path = self.shots / f"{len(self.taken) + 1:02d}-{name}.png"
        self.driver.save_screenshot(str(path))
        self.taken.append(path)
        return path

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def finds(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def text(self) -> str:
        return str(self.find("main").text)

    def sign_in(self, tenant: str, user: str, password: str) -> None:
        self.get("/console/sign-in")
        self.find("#tenant").send_keys(tenant)
        self.find("#user").send_keys(user)
        self.find("#password").send_keys(password)
        self.find("#sign-in").click()
        self.at("/console/runs")

    def sign_out(self) -> None:
        self.find("#sign-out").click()
        self.at("/console/sign-in")

    def post_form(self, action: str, fields: dict[str, str]) -> None:
        """Submit a form the console did not render (built by the test in the page, as a
        hostile page or a tampered one would): the server alone decides."""
        self.driver.execute_script(
            "const f = document.createElement('form'); f.method = 'post'; f.action = arguments[0];"
            "for (const [k, v] of Object.entries(arguments[1])) {"
            " const i = document.createElement('input'); i.type = 'hidden'; i.name = k;"
            " i.value = v; f.appendChild(i); }"
            "document.body.appendChild(f); HTMLFormElement.prototype.submit.call(f);",
            action, fields,
        )  # fmt: skip
        self.loaded(lambda d: action in d.current_url)


def browser_for(base: str, tmp: Path) -> Iterator[Browser]:
    shots = tmp / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    driver = open_browser(tmp / "profile")
    try:
        yield Browser(driver, base, shots)
    finally:
        driver.quit()
