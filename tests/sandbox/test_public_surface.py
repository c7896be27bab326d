"""sealtrace.sandbox's public names, and what importing it costs: the runner, the replay
process and the agent import it, and must not pay for what they do not use."""

from __future__ import annotations

import sealtrace.sandbox
import sealtrace.sandbox.protocol
import sealtrace.sandbox.questions

from ..conftest import modules_after

EXPORTED = [
    "ARGV_TAG",
    "CheckpointPolicy",
    "DivergenceError",
    "ENV_TAG",
    "Inquiry",
    "MANIFEST_LABEL",
    "MARKER_OPS",
    "QueryError",
    "Receipt",
    "ReplayCrashedError",
    "ReplayEnvironmentError",
    "RequirementsError",
    "TMP_LABEL",
    "ValidationError",
    "build_image",
    "canonical_bytes",
    "describe_event",
    "image_problem",
    "keyed_digest",
    "load_recording",
    "marker_node",
    "origin_tag_kind",
    "output_preview",
    "parse_requirements",
    "plan_image",
    "process_alive",
    "raise_for",
    "replay_location",
    "summarize",
]


def test_exported_names_are_pinned_and_resolve() -> None:
    assert sorted(sealtrace.sandbox.__all__) == sorted(EXPORTED)
    for name in EXPORTED:
        assert getattr(sealtrace.sandbox, name) is not None


def test_the_contract_and_the_protocol_export_what_they_define() -> None:
    for module in (sealtrace.sandbox.questions, sealtrace.sandbox.protocol):
        for name in module.__all__:
            assert getattr(module, name) is not None, (module.__name__, name)


def test_importing_the_package_and_its_contract_loads_no_engine_and_no_agent() -> None:
    loaded = modules_after("import sealtrace.sandbox, sealtrace.sandbox.questions")
    heavy = {"sealtrace._engine", "sealtrace.agent", "sealtrace.server", "pydantic", "podman"}
    assert not {m for m in loaded if m in heavy or m.split(".")[0] in heavy}
    assert "sealtrace.sandbox._inquiry" not in loaded


def test_negative_control_asking_for_the_inquiry_loads_it() -> None:
    assert "sealtrace.sandbox._inquiry" in modules_after("import sealtrace.sandbox as s; s.Inquiry")
