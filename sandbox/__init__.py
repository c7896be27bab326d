"""sealtrace.sandbox: the replay substrate.

Replay re-executes a recorded run with every external call served from the recording and
checked (`_replay`, the replaying process; `_session`, which starts it; `cli`, the `replay`
command). The in-container runner and its fixed-frame protocol come with the sandbox issue:
from inside a container it must never emit anything but fixed-size frames.
"""

__all__: list[str] = []
