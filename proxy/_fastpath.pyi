# The recorder's per-call path in C (native/src/fastpath/fastpath.c); proxy/_runtime.py's
# PythonRecordRuntime is its reference.
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

CALL: int
OUTPUT: int
STATUS_RETURNED: int
STATUS_RAISED: int
T_NONE: int
T_FALSE: int
T_TRUE: int
T_INT: int
T_FLOAT: int
T_STR: int
T_BYTES: int
T_TUPLE: int
T_LIST: int
T_DICT: int
BLOB_THRESHOLD: int
ARGS_DIGEST_SIZE: int
DRAIN_AT: int
RECENT_LIMIT: int
RECENT_REPR_MAX: int
MAX_DEPTH: int
KEY_DEPTH: int
FORM_CALL: int
FORM_ROW: int
FORM_STATE: int
FORM_OUTPUT: int
FORM_RECV_INTO: int
FORM_FUNCTION: int
FORM_NEW: int
FORM_CURSOR: int
FORM_CLOSE: int
FORM_TIMEOUT: int

class CallPath:
    _gate: int
    _live: int
    _main: int
    _buf: bytearray
    _heads: dict[str, bytes]
    events: int
    _oids: int
    _last_flush: float
    _flush_interval: float
    def call(self, name: str, key: Any, fn: Callable[[], T]) -> T: ...
    def new_oid(self) -> int: ...
    def invoke(self, name: str, key: Any, obj: Any, method: str, *args: Any) -> Any: ...
    def output(self, name: str, key: Any, data: Any, fn: Callable[[], T]) -> T: ...

class ProxyState:
    """The state of a proxy that the C twins read: _oid, _real and _fd."""

    _oid: Any
    _real: Any
    _fd: Any

class CursorState(ProxyState):
    """ProxyState of a sqlite3 cursor: also its connection, row factory and last state."""

    connection: Any
    row_factory: Any
    description: Any
    rowcount: Any
    lastrowid: Any

class SocketState(ProxyState):
    """ProxyState of a socket: also its family, type, protocol, timeout, open file objects
    and whether it was closed."""

    _family: Any
    _type: Any
    proto: Any
    _timeout: Any
    _io_refs: Any
    _closed: Any

class BoundaryMethod:
    """The C twin of a proxy's hot method, or of a call entry's wrapper (FORM_FUNCTION)."""

    name: str
    __wrapped__: Any
    def __init__(
        self,
        runtime: CallPath,
        name: str,
        method: Any,
        fallback: Callable[..., Any],
        form: int,
        required: int,
        defaults: tuple[Any, ...],
        variadic: bool,
        guard: bool,
        state: tuple[str, ...],
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, obj: Any, owner: Any = None) -> Any: ...

class BoundaryFunction(BoundaryMethod):
    """A BoundaryMethod that never binds: the twin of a builtin function (FORM_FUNCTION).
    (In C it is a type of its own, not a subclass, without the method-descriptor flag.)"""

def encode(value: Any) -> bytes | None: ...
def digest(key: Any) -> bytes | None: ...
def blake2b(data: bytes, size: int) -> bytes: ...
def finalize(records: bytearray, start: int) -> bytes | bytearray: ...
def configure(int_enums: set[type]) -> None: ...
