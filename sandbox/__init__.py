"""sealtrace.sandbox: the replay substrate and the in-container runner.

Not built yet: the recorder/replay and sandbox issues fill this package. It must never
emit anything from the container but fixed-size frames.
"""

__all__: list[str] = []
