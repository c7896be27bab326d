"""The web console in a real Chromium, on the whole platform (the local stack: Redis, moto's S3
and KMS, the server, a pool of agents whose sandboxes are booted and waiting, rootless
Podman), through the £0.00 story:

sign in as on-call, find the run, open a session, land where the run wrote its response,
three clicks to the STAFF100 promotions read (the total, the product, the discount: an
external input, the database read, with the promo code in the locals there), back through
the breadcrumb, the flows of the customer's email (where it went: the response), and close.
Keyboard only, too: Tab to a value, Enter follows it. Also: an auditor gets no "open a
session" and its POST is refused; a form posted without its CSRF token is refused; a
recording whose strings are markup and script renders them as text and runs none of it; the
idle and absolute time-outs sign the browser out.

One screenshot per step, under the test's temporary directory (SEALTRACE_CONSOLE_SHOTS=DIR
copies them there too: `docs/console.md`'s images are made so).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._browser import Browser, browser_for
from ._stack import Platform

pytestmark = [pytest.mark.e2e, pytest.mark.podman, pytest.mark.browser]

# Markup and script in every place a recording can carry a string into a page: an input the
# program read (a file), an environment value, a constant and a comment of its source.
HOSTILE_INPUT = '<script>window.__pwned = "input"</script><img src=x onerror="window.__pwned=1">'
HOSTILE_ENV = '<svg onload="window.__pwned=2"></svg>'  # no quote repr() would escape
HOSTILE_APP = '''"""A program whose strings are markup: the console must show them as text."""
import os, sys

TITLE = "<img src=x onerror=\\"window.__pwned=3\\">"


def main(path):
    # </code><script>alert(1)</script> in a comment
    with open(path) as f:
        note = f.read()
    name = os.environ["CUSTOMER_NAME"]
    banner = TITLE
    print(len(note) + len(name) + len(banner))
    return 0


sys.exit(main(sys.argv[1]))
'''


CRASHING_APP = '''"""A billing job that crashes on a line without an amount."""
import json, sys


def parse(line):
    return json.loads(line)["amount"]


def main(path):
    with open(path) as f:
        lines = f.read().splitlines()
    total = 0
    for line in lines:
        total += parse(line)
    print(total)


main(sys.argv[1])
'''


@pytest.fixture(scope="module")
def platform(
    tmp_path_factory: pytest.TempPathFactory,
    podman_service: tuple[Any, Any, str],
    replay_image: str,
) -> Iterator[Any]:
    """The local stack with its pool of two booted agents, as `make up` runs it."""
    with Platform(tmp_path_factory.mktemp("console-platform"), podman_socket=podman_service[2],
                  pool=2) as found:  # fmt: skip
        yield found


@pytest.fixture(scope="module")
def story_run(platform: Any) -> str:
    proc, run_id = platform.record_story()
    assert proc.returncode == 0 and b'"total_price": 0.0' in proc.stdout, proc.stderr
    assert b'"receipt_to": "jo.bloggs@example.com"' in proc.stdout
    return str(run_id)


@pytest.fixture(scope="module")
def crashed_run(platform: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A billing job that died of a KeyError, recorded through the platform."""
    work = tmp_path_factory.mktemp("billing")
    (work / "app").mkdir()
    (work / "app" / "billing.py").write_text(CRASHING_APP)
    (work / "lines.jsonl").write_text('{"amount": 12}\n{"amount": 30}\n{"total": 42}\n')
    proc = platform.record([sys.executable, str(work / "app" / "billing.py"),
                            str(work / "lines.jsonl")], app_root=str(work / "app"),
                           service="billing")  # fmt: skip
    assert proc.returncode == 1 and b"KeyError" in proc.stderr, proc.stderr
    code, runs = platform.request("GET", "/v1/runs", platform.tokens["ada"])
    assert code == 200 and runs[0]["service"] == "billing", runs
    return str(runs[0]["run_id"])


@pytest.fixture
def browser(platform: Any, tmp_path: Path) -> Iterator[Browser]:
    yield from browser_for(platform.url, tmp_path)


@pytest.fixture(autouse=True)
def keep_screenshots(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[None]:
    """With SEALTRACE_CONSOLE_SHOTS=DIR, each test's screenshots are copied to DIR/TEST/."""
    yield
    target = os.environ.get("SEALTRACE_CONSOLE_SHOTS")
    if target and (tmp_path / "screenshots").is_dir():
        into = Path(target) / request.node.name
        shutil.rmtree(into, ignore_errors=True)
        shutil.copytree(tmp_path / "screenshots", into)


def _sign_in(browser: Browser, platform: Any, user: str) -> None:
    tenant, password = platform.passwords[user]
    browser.sign_in(tenant, user, password)
    platform.wait_for_pool()  # a session opened next finds an agent booted and waiting


def _words(text: str) -> str:
    """Text as read, one space between words (the page lays values out in boxes)."""
    return " ".join(text.split())


def _follow(browser: Browser, name: str, view: int) -> float:
    """Click the operand held in `name` (Enter would do the same); the seconds from the
    click to its page."""
    (button,) = [b for b in browser.finds("#operands button.value-btn") if name in b.text]
    started = time.perf_counter()
    button.click()  # the driver returns once the page it led to has loaded
    browser.at(f"/views/{view}")
    return time.perf_counter() - started


def _no_script_ran(browser: Browser) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    assert browser.driver.execute_script("return window.__pwned === undefined")
    with pytest.raises(NoAlertPresentException):
        browser.driver.switch_to.alert.text  # noqa: B018 - reading it is the check


def test_the_story_in_the_console(
    browser: Browser, platform: Any, story_run: str, crashed_run: str
) -> None:
    run_id = story_run
    browser.get("/console/sign-in")
    browser.shot("sign-in")
    _sign_in(browser, platform, "ada")
    runs = _words(browser.find("#runs").text)
    assert run_id in runs and crashed_run in runs and "exit 1" in runs
    browser.shot("runs")
    # Find the run: filter by service, then open it.
    from selenium.webdriver.support.ui import Select

    Select(browser.find("#filter-service")).select_by_value("checkout")
    browser.find("form.filters button[type=submit]").click()
    browser.at("service=checkout")
    assert run_id in browser.text() and crashed_run not in browser.text()
    browser.find(f'a[href="/console/runs/{run_id}"]').click()
    browser.at(f"/console/runs/{run_id}")
    assert "The run served no HTTP requests" in browser.text()
    browser.shot("run")

    # Open a session: the page follows the boot, then lands where the run wrote its response.
    started = time.perf_counter()
    browser.find("#open-session").click()
    browser.at("/views/0")
    landing = time.perf_counter() - started
    assert browser.find("#step-title").text == "The last output"
    marked = browser.find("ol.code li.marked").text
    assert "print(json.dumps(create_order_response(order)))" in marked
    browser.shot("landing")

    # Jump 1: the total in the response. Its value was made by round() in the pricing code.
    started = time.perf_counter()
    browser.find('button.tok[value="order.total_price"]').click()
    browser.at("/views/1")
    jumps = [time.perf_counter() - started]
    assert browser.find("#step-title").text == "order.total_price = 0.0"
    assert browser.find("#produced-op").text == "CALL round"
    assert "services/pricing.py" in browser.find(".where").text
    browser.shot("jump-1-the-total")
    # Jump 2: round's operand, the total: subtotal 49.99 times (1 - discount 1.0).
    jumps.append(_follow(browser, "total", 2))
    assert "total = subtotal * (1 - discount)" in browser.find("ol.code li.marked").text
    operands = _words(browser.find("#operands").text)
    assert "subtotal = 49.99" in operands and "discount = 1.0" in operands
    browser.shot("jump-2-the-product")
    # Jump 3: the discount, 100 / 100 of what the promotions table returned for STAFF100.
    jumps.append(_follow(browser, "discount", 3))
    assert browser.find("#step-title").text == "discount = 1.0"
    operands = _words(browser.find("#operands").text)
    assert "promo = (100,)" in operands and "external input: sqlite3.Cursor.fetchone" in operands
    assert "'STAFF100'" in browser.find("#locals").text  # promo_code, right there
    browser.shot("jump-3-the-promotions-read")

    # Back through the breadcrumb to the landing point.
    crumbs = browser.finds("#trail .crumb")
    assert [c.text for c in crumbs] == ["The last output", "order.total_price = 0.0",
                                        "total = 0.0", "discount = 1.0"]  # fmt: skip
    crumbs[0].click()
    browser.at("/views/0")
    assert browser.find("#step-title").text == "The last output"
    browser.shot("back-through-the-breadcrumb")

    # Where did the customer's email go? Every location and the output it reached.
    browser.find("#ask-var").send_keys("order.email")
    browser.find("#ask-flows").click()
    browser.at("/views/1")
    assert browser.find("#step-title").text == "Where order.email went"
    locations = _words(browser.find("#flow-locations").text)
    assert "create_order_response" in locations and "routes/orders.py" in locations
    assert "stdout.write" in browser.find("#flow-outputs").text
    browser.shot("flows-of-the-email")

    # Close: the agent leaves, and the run page says the session is closed.
    browser.find("#close-session").click()
    browser.at(f"/console/runs/{run_id}")
    assert "closed" in browser.find("#sessions").text
    browser.shot("closed")
    print(f"\nconsole: landing {landing:.2f} s, jumps {', '.join(f'{j:.2f}' for j in jumps)} s "
          "(a real browser on a shared machine; bench/session.py measures them)")  # fmt: skip


def test_a_crashed_run_lands_on_its_crash(
    browser: Browser, platform: Any, crashed_run: str
) -> None:
    _sign_in(browser, platform, "ada")
    browser.get(f"/console/runs/{crashed_run}")
    assert "exited with status 1" in browser.find("#crash").text
    browser.find("#open-session").click()
    browser.at("/views/0")
    assert browser.find("#step-title").text == "The crash"
    assert "KeyError" in browser.find("#exception").text
    assert 'return json.loads(line)["amount"]' in browser.find("ol.code li.marked").text
    assert "'{\"total\": 42}'" in browser.find("#locals").text  # the line it died on
    assert [f.text.split()[0] for f in browser.finds("#stack .frame")] == [
        "parse", "main", "<module>"]  # fmt: skip
    browser.shot("crash-landing")
    browser.find("#close-session").click()
    browser.at(f"/console/runs/{crashed_run}")


# A service that serves three priced requests (its own client makes them): its run's request
# index holds three, which the runs list counts and a session lists to go to.
SELF_SERVED = """
import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Prices(BaseHTTPRequestHandler):
    def do_GET(self):
        qty = int(self.path.rsplit("/", 1)[1])
        body = json.dumps({"total": round(qty * 9.99, 2)}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Prices)
threading.Thread(target=server.serve_forever, daemon=True).start()
for qty in (1, 2, 3):
    url = f"http://127.0.0.1:{server.server_address[1]}/price/{qty}"
    with urllib.request.urlopen(url) as reply:
        print(reply.read().decode())
server.shutdown()
"""


@pytest.fixture(scope="module")
def served_run(platform: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    work = tmp_path_factory.mktemp("prices")
    (work / "app").mkdir()
    (work / "app" / "prices.py").write_text(SELF_SERVED)
    proc = platform.record([sys.executable, str(work / "app" / "prices.py")],
                           app_root=str(work / "app"), service="prices")  # fmt: skip
    assert proc.returncode == 0 and b'{"total": 29.97}' in proc.stdout, proc.stderr
    code, runs = platform.request("GET", "/v1/runs", platform.tokens["ada"])
    assert code == 200 and runs[0]["service"] == "prices", runs
    assert runs[0]["requests"] == 3  # the recorder's count, reported as the run ended
    return str(runs[0]["run_id"])


def test_a_served_run_lists_its_requests_and_goes_to_one(
    browser: Browser, platform: Any, served_run: str
) -> None:
    _sign_in(browser, platform, "ada")
    row = browser.find(f'a[href="/console/runs/{served_run}"]').find_element("xpath", "../..")
    assert _words(row.text).endswith(" 3")  # the runs list's request count
    browser.get(f"/console/runs/{served_run}")
    assert browser.find("#request-count").text == "The run served 3 requests."
    browser.find("#open-session").click()
    browser.at("/views/0")
    listed = _words(browser.find("#requests").text)
    assert all(f"GET /price/{qty} 200" in listed for qty in (1, 2, 3)), listed
    browser.driver.execute_script("arguments[0].scrollIntoView()", browser.find("#requests"))
    browser.shot("requests-in-a-session")
    browser.find("#request-2").click()  # the second request: where its body was sent
    browser.at("/views/1")
    assert browser.find("#step-title").text == "step at request:2"
    # socketserver's writer: a library file, which the agent cannot name from the recording
    assert "library code" in browser.find(".where").text
    # The bytes being sent: the agent shows them, as they match what the recording holds
    # of the response.
    assert """b'{"total": 19.98}'""" in browser.find("#locals").text
    browser.shot("at-request-2")
    browser.find("#close-session").click()
    browser.at(f"/console/runs/{served_run}")


def test_keyboard_only(browser: Browser, platform: Any, story_run: str) -> None:
    """Tab moves through the page in reading order and Enter follows the focused value: from
    the landing point to the promotions read without a mouse."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    _sign_in(browser, platform, "ada")
    browser.get(f"/console/runs/{story_run}")
    browser.find("#open-session").send_keys(Keys.ENTER)
    browser.at("/views/0")
    driver = browser.driver

    def focused() -> Any:
        return driver.switch_to.active_element

    # The page opens with the focus on the first value of the marked line.
    assert focused().get_attribute("class") == "tok"
    for _ in range(40):  # back through the function's lines to the response's total
        if focused().get_attribute("value") == "order.total_price":
            break
        ActionChains(driver).key_down(Keys.SHIFT).send_keys(Keys.TAB).key_up(Keys.SHIFT).perform()
    assert focused().get_attribute("value") == "order.total_price"
    browser.shot("keyboard-focus-on-a-value")
    focused().send_keys(Keys.ENTER)
    browser.at("/views/1")
    for view, name in ((2, "total"), (3, "discount")):
        # Each step opens with the focus on its first operand; Tab walks the operands.
        for _ in range(10):
            if name in focused().text:
                break
            focused().send_keys(Keys.TAB)
        assert name in focused().text and "value-btn" in focused().get_attribute("class")
        focused().send_keys(Keys.ENTER)
        browser.at(f"/views/{view}")
    assert "external input: sqlite3.Cursor.fetchone" in _words(browser.find("#operands").text)
    browser.shot("keyboard-at-the-promotions-read")
    browser.find("#close-session").send_keys(Keys.ENTER)
    browser.at(f"/console/runs/{story_run}")


def test_an_auditor_cannot_open_a_session(browser: Browser, platform: Any, story_run: str) -> None:
    _sign_in(browser, platform, "aud")
    browser.get(f"/console/runs/{story_run}")
    assert not browser.finds("#open-session")
    assert "opens no replay sessions" in browser.find("#no-session").text
    browser.shot("auditor-sees-no-session-button")
    token = browser.find('meta[name="csrf-token"]').get_attribute("content")
    browser.post_form(f"/console/runs/{story_run}/sessions", {"csrf": token})
    assert "Not allowed" in browser.text() and "may not open" in browser.text()
    browser.shot("auditor-post-refused")
    # The refusal is in the audit log the auditor reads, with the chain whole.
    browser.get("/console/audit")
    assert "The chain is whole" in browser.find("#chain").text
    browser.shot("audit-log")
    browser.get("/console/audit?result=denied")
    log = browser.find("#audit").text
    assert f"denied POST /console/runs/{story_run}/sessions" in log
    assert "The chain is whole" in browser.find("#chain").text
    browser.shot("audit-log-refusals")


def test_a_form_without_its_csrf_token_is_refused(
    browser: Browser, platform: Any, story_run: str
) -> None:
    _sign_in(browser, platform, "ada")
    browser.get(f"/console/runs/{story_run}")
    before = _sessions_on(platform, story_run)
    for fields in ({}, {"csrf": "f" * 64}):
        browser.post_form(f"/console/runs/{story_run}/sessions", fields)
        assert "out of date or not the console's" in browser.driver.page_source
    browser.shot("csrf-less-post-refused")
    assert _sessions_on(platform, story_run) == before  # nothing was opened


def _sessions_on(platform: Any, run_id: str) -> int:
    import sqlite3

    with contextlib.closing(sqlite3.connect(platform.db)) as conn:
        (count,) = conn.execute("SELECT count(*) FROM sessions WHERE run_id = ?",
                                (run_id,)).fetchone()  # fmt: skip
    return int(count)


def test_a_hostile_recording_renders_as_text(
    browser: Browser, platform: Any, tmp_path: Path
) -> None:
    app = tmp_path / "hostile" / "app.py"
    app.parent.mkdir()
    app.write_text(HOSTILE_APP)
    note = tmp_path / "note.html"
    note.write_text(HOSTILE_INPUT)
    recorded = platform.record([sys.executable, str(app), str(note)], CUSTOMER_NAME=HOSTILE_ENV,
                               app_root=str(app.parent))  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    code, runs = platform.request("GET", "/v1/runs", platform.tokens["ada"])
    assert code == 200, runs
    run_id = runs[0]["run_id"]
    _sign_in(browser, platform, "ada")
    browser.get(f"/console/runs/{run_id}")
    browser.find("#open-session").click()
    browser.at("/views/0")
    page = browser.text()  # not reflowed: the strings are compared as they are
    # Every hostile string is on the page as text...
    for text in (
        HOSTILE_INPUT,
        HOSTILE_ENV,
        '<img src=x onerror="window.__pwned=3">',
        "</code><script>alert(1)</script>",
    ):
        assert text in page, text
    # ...and none of it became markup or ran.
    _no_script_ran(browser)
    assert not browser.finds("main img, main svg, main script")
    assert not browser.driver.execute_script(
        "return [...document.querySelectorAll('*')].some(e => [...e.attributes]"
        ".some(a => a.name.startsWith('on')))"
    )
    browser.shot("hostile-strings-as-text")
    # Tracing one of them shows it as text too.
    browser.find('button.value-btn[value="note"]').click()
    browser.at("/views/1")
    _no_script_ran(browser)
    assert HOSTILE_INPUT in browser.text()
    browser.find("#close-session").click()
    browser.at(f"/console/runs/{run_id}")


def test_time_outs_sign_out(platform: Any, tmp_path: Path) -> None:
    """On a server of the same platform with short time-outs: idle past 3 s signs out; so
    does 8 s from sign-in, however busy the user is."""
    url = platform.serve(SEALTRACE_SERVER_CONSOLE_IDLE_TIMEOUT="3",
                         SEALTRACE_SERVER_CONSOLE_ABSOLUTE_TIMEOUT="8")  # fmt: skip
    tenant, password = platform.passwords["ada"]
    for browser in browser_for(url, tmp_path):
        browser.sign_in(tenant, "ada", password)
        time.sleep(3.5)
        browser.get("/console/runs")
        assert "/console/sign-in" in browser.driver.current_url
        assert "after a while without activity" in browser.find("#signin-why").text
        browser.shot("idle-time-out")
        browser.sign_in(tenant, "ada", password)
        started = time.monotonic()
        while "/console/runs" in browser.driver.current_url and time.monotonic() - started < 12:
            time.sleep(1)
            browser.get("/console/runs")
        assert "/console/sign-in" in browser.driver.current_url
        assert time.monotonic() - started >= 7  # busy all along: it was the time limit
        browser.shot("absolute-time-out")


def test_an_admin_manages_users_and_tokens(browser: Browser, platform: Any) -> None:
    tenant, password = platform.passwords["adm"]
    browser.sign_in(tenant, "adm", password)
    browser.get("/console/admin")
    users = _words(browser.find("#users").text).lower()  # roles are shown in capitals
    assert "ada oncall" in users and "aud auditor" in users and "gil" not in users
    browser.find("#new-scope").send_keys("record")
    browser.find("#new-token-name").send_keys("checkout-prod")
    browser.find("#mint-token").click()
    browser.at("/console/admin")
    assert "st_" in browser.find("#shown-secret").text  # shown once
    browser.shot("users-and-tokens")
