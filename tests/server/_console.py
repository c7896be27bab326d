"""What the console's server tests share: signing a browser in through the console's own form,
and reading the CSRF token a page carries."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

_TOKEN = re.compile(r'name="csrf" value="([0-9a-f]+)"')


def csrf_of(html: str) -> str:
    found = _TOKEN.search(html)
    assert found is not None, "the page carries no CSRF token"
    return found.group(1)


def sign_in(http: TestClient, user: str, tenant: str = "acme", password: str | None = None) -> str:
    """Sign `user` in through the console's form (their password is NAME-pw in the API
    fixture); the CSRF token of the page they land on."""
    form = http.get("/console/sign-in")
    assert form.status_code == 200, form.text
    done = http.post("/console/sign-in", data={
        "csrf": csrf_of(form.text), "tenant": tenant, "user": user,
        "password": password if password is not None else f"{user}-pw",
    }, follow_redirects=False)  # fmt: skip
    assert done.status_code == 303, done.text
    landed = http.get(done.headers["location"])
    assert landed.status_code == 200, landed.text
    return csrf_of(landed.text)
