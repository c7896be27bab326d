"""sealtrace.server: API, console, MCP, key service, sessions, RBAC and audit.

Not built yet: the platform issue fills this package. Nothing imports it.
"""

__all__: list[str] = []
