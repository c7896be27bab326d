"""sealtrace.sandbox: replay, provenance queries, and the runner that answers from inside the
sandbox.

Public: this package's `__all__`, the question contract (`questions`: every question and
answer typed once, the `Answerer` protocol and `ask`) and the pipe protocol (`protocol`).

Replay re-executes a recorded run with every external call served from the recording and
checked: `_replay` is the replay process, `_replay_process` starts it and returns its receipt,
`_environment` says whether this interpreter can replay it, and `cli` holds `replay`,
`trace`, `flows`, `inspect-stack` and `validate`. Provenance questions are answered by
replaying with the engine attached (`_provenance` inside the replay, `_inquiry` for the
passes behind each question, `_checkpoints` for fork checkpoints, `_explain` for text), and
checked on planted root causes and measured on a ground-truth corpus (`_validate`,
`_ranking`, `_measurement`, `_scoring`, `_sites`, `_depth_property`, `_program_runs`,
`validation/`).

The sandbox side: the runner (`runner`) that the agent starts in a container, the fixed-frame
pipe protocol it speaks (`protocol`), its memory watch (`_memory`), and the offline replay
image (`_image`, `_distributions`). Errors and their exit codes are in `_errors`. From inside
a container the runner must never emit anything but fixed-size frames, and this package
never imports the agent: `--sandbox` finds it through an entry point.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._checkpoints import CheckpointPolicy, process_alive
    from ._distributions import RequirementsError, parse_requirements
    from ._errors import (
        DivergenceError,
        QueryError,
        ReplayCrashedError,
        ReplayEnvironmentError,
        ValidationError,
    )
    from ._image import MANIFEST_LABEL, TMP_LABEL, build_image, image_problem, plan_image
    from ._inquiry import Inquiry
    from ._provenance import (
        ARGV_TAG,
        ENV_TAG,
        MARKER_OPS,
        canonical_bytes,
        keyed_digest,
        marker_node,
        origin_tag_kind,
        summarize,
    )
    from ._replay import describe_event, output_preview
    from ._replay_process import Receipt, load_recording, raise_for, replay_location

# The public names, each from the private module that holds it. Loaded on first use: the
# runner and the replay process import this package and must not pay for what they don't use.
_PUBLIC = {
    # answering questions in-process (the contract is sealtrace.sandbox.questions)
    "Inquiry": "_inquiry",
    "CheckpointPolicy": "_checkpoints",
    # replaying
    "Receipt": "_replay_process",
    "load_recording": "_replay_process",
    "raise_for": "_replay_process",
    "replay_location": "_replay_process",
    "describe_event": "_replay",
    "output_preview": "_replay",
    "process_alive": "_checkpoints",
    # values as the engine summarises and digests them (the agent matches its digests)
    "ARGV_TAG": "_provenance",
    "ENV_TAG": "_provenance",
    "MARKER_OPS": "_provenance",
    "marker_node": "_provenance",
    "origin_tag_kind": "_provenance",
    "canonical_bytes": "_provenance",
    "keyed_digest": "_provenance",
    "summarize": "_provenance",
    # the replay image
    "MANIFEST_LABEL": "_image",
    "TMP_LABEL": "_image",
    "build_image": "_image",
    "image_problem": "_image",
    "plan_image": "_image",
    "RequirementsError": "_distributions",
    "parse_requirements": "_distributions",
    # errors
    "DivergenceError": "_errors",
    "QueryError": "_errors",
    "ReplayCrashedError": "_errors",
    "ReplayEnvironmentError": "_errors",
    "ValidationError": "_errors",
}

__all__ = [
    "ARGV_TAG",
    "ENV_TAG",
    "MANIFEST_LABEL",
    "MARKER_OPS",
    "TMP_LABEL",
    "CheckpointPolicy",
    "DivergenceError",
    "Inquiry",
    "QueryError",
    "Receipt",
    "ReplayCrashedError",
    "ReplayEnvironmentError",
    "RequirementsError",
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


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
