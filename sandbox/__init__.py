"""sealtrace.sandbox: replay, provenance queries, and the runner that answers from inside the
sandbox.

Replay re-executes a recorded run with every external call served from the recording and
checked: `_replay` is the replay process, `_session` starts it and returns its receipt,
`_environment` says whether this interpreter can replay it, and `cli` holds `replay`,
`trace`, `flows`, `inspect-stack` and `validate`. Provenance questions are answered by
replaying with the engine attached (`_provenance` inside the replay, `_queries` for the
passes behind each question, `_checkpoints` for fork checkpoints, `_explain` for text), and
checked on planted root causes (`_validate`, `_ranking`, `validation/`).

The sandbox side: the runner (`runner`) that the agent starts in a container, the fixed-frame
pipe protocol it speaks (`_protocol`), its memory watch (`_memory`), and the offline replay
image (`_image`, `_distributions`). Errors and their exit codes are in `_errors`. From inside
a container the runner must never emit anything but fixed-size frames, and this package
never imports the agent: `--sandbox` finds it through an entry point.
"""

__all__: list[str] = []
