"""sealtrace.agent: the disposable, one-session replay worker.

Not built yet: the platform issue fills this package.
"""

__all__: list[str] = []
