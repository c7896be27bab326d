"""sealtrace.agent: the agent's side of a sandbox session.

Built so far: the client that runs the replay runner in a hardened rootless Podman container
(or as a local child process), streams the recording in, checks every frame and rebuilds the
answers (`_sandbox`, `_podman`, `_dictionary`). The disposable one-session Celery worker
around it comes with the platform issue.
"""

__all__: list[str] = []
