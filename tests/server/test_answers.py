"""The server, not the agent, decides what a user's question gets back: an agent's answer
reaches the user only with the contract's shape, and its errors only with the statuses an
agent may choose. The request body is the contract's, in OpenAPI too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sealtrace.sandbox.questions import json_schema
from sealtrace.server._session_actions import judge as _judge

STACK = {"query": {"at": "end", "counter": 7}, "frames": []}


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"document": STACK}, 200),
        ({"error": "never reached", "status": 422}, 422),
        ({"error": "diverged", "status": 409}, 409),
        ({"error": "x", "status": 99}, 502),  # an agent-chosen status drops no connection
        ({"error": "x", "status": 200}, 502),
        ({"error": "x", "status": "422"}, 502),
        ({"error": "x"}, 502),
        ({"document": {**STACK, "extra": 1}}, 502),  # not the contract's shape
        ({"document": {"query": {"at": "end"}, "frames": []}}, 502),
        ({"document": None}, 502),
        ([], 502),
    ],
)
def test_the_server_judges_the_agents_answer(answer: Any, expected: int) -> None:
    status, _detail, document = _judge("inspect-stack", answer)
    assert status == expected
    assert (document is not None) == (expected == 200)


def test_the_openapi_body_of_a_question_is_the_contracts_schema(tmp_path: Path) -> None:
    from sealtrace.server import ServerSettings, create_app

    settings = ServerSettings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}")
    spec = create_app(settings).openapi()
    body = spec["paths"]["/v1/sessions/{session_id}/queries"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    # FastAPI keeps its own "any object" beside it; the contract's oneOf is what constrains.
    assert json.dumps(schema["oneOf"], sort_keys=True) == json.dumps(
        json_schema()["question"]["oneOf"], sort_keys=True
    )
