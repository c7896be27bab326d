"""Adapter for sqlite3: the database is external; statements and their rows are recorded.

`sqlite3.connect` returns a Connection proxy. Each statement, fetch, commit and rollback is a
boundary call; rows are recorded as the C layer produced them (after any registered
converters) and the row factory is applied in Python on both sides, so `sqlite3.Row` and
custom factories behave the same when replaying. User functions registered with
create_function() run inside SQLite when recording and not at all when replaying: their side
effects are behind the boundary (see docs/replay.md).
"""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from ._boundary import Patcher
from ._runtime import Hot, Runtime, native_methods, proxy_bases

__all__ = ["Connection", "Cursor", "install_sqlite3"]

_base_connect = sqlite3.connect
# What a statement leaves in the cursor, recorded after it (Cursor._run and its C twin).
_CURSOR_STATE = ("description", "rowcount", "lastrowid")
_cursor_state = operator.attrgetter(*_CURSOR_STATE)
_row_maker: Any = None


def _make_row(description: Any, values: tuple[Any, ...]) -> sqlite3.Row:
    # sqlite3.Row can only be built from a real cursor: select the values back out of a
    # private in-memory database (no file, no I/O) under the recorded column names.
    global _row_maker
    if _row_maker is None:
        _row_maker = _base_connect(":memory:", check_same_thread=False)
        _row_maker.row_factory = sqlite3.Row
    names = [d[0] for d in description or ()]
    columns = ", ".join(f'? AS "{n.replace(chr(34), chr(34) * 2)}"' for n in names)
    row: sqlite3.Row = _row_maker.execute(f"SELECT {columns}", values).fetchone()
    return row


class Cursor:
    _rt: Runtime  # the connection's, set on the installed class
    # A fresh cursor's state; execute() and the program set their own.
    description: Any = None
    rowcount = -1
    lastrowid: int | None = None
    arraysize = 1

    def __init__(self, connection: Connection, real: Any) -> None:
        # As the C twin of Connection.execute makes a cursor (fastpath/method.c, FORM_CURSOR).
        self.connection = connection
        self._real: Any = real
        self._oid = self._rt.new_oid()
        self.row_factory: Any = connection.row_factory

    def _call(self, op: str, key: tuple[Any, ...], fn: Any) -> Any:
        return self._rt.call(f"sqlite3.Cursor.{op}", (self._oid, *key), fn)

    def _state(self) -> tuple[Any, int, int | None]:
        state: tuple[Any, int, int | None] = _cursor_state(self._real)
        return state

    def _run(self, op: str, key: tuple[Any, ...], fn: Any) -> Cursor:
        def run() -> tuple[Any, int, int | None]:
            fn()
            return self._state()

        self.description, self.rowcount, self.lastrowid = self._call(op, key, run)
        return self

    def execute(self, sql: str, parameters: Any = ()) -> Cursor:
        real = self._real
        return self._run("execute", (sql, parameters), lambda: real.execute(sql, parameters))

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any]) -> Cursor:
        params, real = list(seq_of_parameters), self._real
        return self._run("executemany", (sql, params), lambda: real.executemany(sql, params))

    def executescript(self, sql_script: str) -> Cursor:
        real = self._real
        return self._run("executescript", (sql_script,), lambda: real.executescript(sql_script))

    def _row(self, values: Any) -> Any:
        factory = self.row_factory
        if values is None or factory is None:
            return values
        if factory is sqlite3.Row:
            return _make_row(self.description, values)
        return factory(self, values)

    def fetchone(self) -> Any:
        row = self._rt.invoke("sqlite3.Cursor.fetchone", (self._oid,), self._real, "fetchone")
        return self._row(row) if self.row_factory is not None else row

    def fetchmany(self, size: int | None = None) -> list[Any]:
        count, real = self.arraysize if size is None else size, self._real
        return [
            self._row(r) for r in self._call("fetchmany", (count,), lambda: real.fetchmany(count))
        ]

    def fetchall(self) -> list[Any]:
        real = self._real
        return [self._row(r) for r in self._call("fetchall", (), lambda: real.fetchall())]

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    def close(self) -> None:
        real = self._real
        self._call("close", (), lambda: real.close())

    def setinputsizes(self, sizes: Any) -> None:
        pass

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        pass


class Connection:
    _rt: Runtime
    _cursor: type[Cursor] = Cursor  # the installed proxy class of cursors

    def __init__(self, real: Any, database: Any) -> None:
        self._real: Any = real
        self._oid = self._rt.new_oid()
        self.row_factory: Any = None
        self._database = database

    def _call(self, op: str, key: tuple[Any, ...], fn: Any) -> Any:
        return self._rt.call(f"sqlite3.Connection.{op}", (self._oid, *key), fn)

    def cursor(self, factory: Any = None) -> Any:
        real = self._real
        cursor = self._cursor(self, real.cursor() if real is not None else None)
        return factory(cursor) if factory is not None and factory is not sqlite3.Cursor else cursor

    def execute(self, sql: str, parameters: Any = ()) -> Any:
        real = self._real
        cursor = self._cursor(self, real.cursor() if real is not None else None)
        return cursor.execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any]) -> Any:
        return self.cursor().executemany(sql, seq_of_parameters)

    def executescript(self, sql_script: str) -> Any:
        return self.cursor().executescript(sql_script)

    def commit(self) -> None:
        self._rt.invoke("sqlite3.Connection.commit", (self._oid,), self._real, "commit")

    def rollback(self) -> None:
        real = self._real
        self._call("rollback", (), lambda: real.rollback())

    def close(self) -> None:
        real = self._real
        self._call("close", (), lambda: real.close())

    @property
    def in_transaction(self) -> bool:
        real = self._real
        return bool(self._call("in_transaction", (), lambda: real.in_transaction))

    @property
    def total_changes(self) -> int:
        real = self._real
        return int(self._call("total_changes", (), lambda: real.total_changes))

    @property
    def isolation_level(self) -> str | None:
        real = self._real
        return self._call("isolation_level", (), lambda: real.isolation_level)  # type: ignore[no-any-return]

    @isolation_level.setter
    def isolation_level(self, value: str | None) -> None:
        real = self._real
        self._call("set_isolation_level", (value,), lambda: setattr(real, "isolation_level", value))

    @property
    def text_factory(self) -> Any:
        return self._real.text_factory if self._real is not None else str

    @text_factory.setter
    def text_factory(self, value: Any) -> None:
        if self._real is not None:
            self._real.text_factory = value

    def create_function(
        self, name: str, narg: int, func: Any, *, deterministic: bool = False
    ) -> None:
        real = self._real
        self._call(
            "create_function",
            (name, narg, deterministic),
            lambda: real.create_function(name, narg, func, deterministic=deterministic),
        )

    def iterdump(self) -> Iterator[str]:
        real = self._real
        return iter(self._call("iterdump", (), lambda: list(real.iterdump())))

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> Literal[False]:
        if exc_type is None:
            self.commit()
        else:
            self.rollback()
        return False


# The methods that the C per-call path records itself (see _runtime.native_methods).
_HOT_CURSOR = {
    "execute": Hot("sqlite3.Cursor.execute", "execute", "state", state=_CURSOR_STATE),
    "fetchone": Hot("sqlite3.Cursor.fetchone", "fetchone", "row"),
}
_HOT_CONNECTION = {"commit": Hot("sqlite3.Connection.commit", "commit")}


def install_sqlite3(rt: Runtime, patcher: Patcher) -> None:
    cursor_twins = native_methods(rt, Cursor, _HOT_CURSOR)
    cursor = type(
        "Cursor",
        proxy_bases(rt, Cursor, "CursorState"),
        {"_rt": rt, "__module__": "sqlite3", **cursor_twins},
    )
    hot = dict(_HOT_CONNECTION)
    if "execute" in cursor_twins:  # Connection.execute makes its cursor in C and runs that
        hot["execute"] = Hot(
            "sqlite3.Cursor.execute", "cursor", "cursor", state=(cursor, cursor_twins["execute"])
        )
    namespace = {"_rt": rt, "_cursor": cursor, "__module__": "sqlite3"}
    namespace |= native_methods(rt, Connection, hot)
    proxy = type("Connection", proxy_bases(rt, Connection), namespace)

    def connect(
        database: Any,
        timeout: float = 5.0,
        detect_types: int = 0,
        isolation_level: str | None = "DEFERRED",
        check_same_thread: bool = True,
        factory: Any = None,
        cached_statements: int = 128,
        uri: bool = False,
    ) -> Any:
        holder: list[Any] = []

        def open_db() -> None:
            holder.append(
                _base_connect(
                    database,
                    timeout,
                    detect_types,
                    isolation_level,  # type: ignore[arg-type]
                    check_same_thread,
                    sqlite3.Connection,
                    cached_statements,
                    uri,
                )
            )

        rt.call("sqlite3.connect", (str(database), detect_types, isolation_level, uri), open_db)
        return proxy(holder[0] if holder else None, database)

    patcher.replace(sqlite3, "connect", connect)
    patcher.replace(sqlite3.dbapi2, "connect", connect)
