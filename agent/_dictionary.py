"""What the agent can show of a sandboxed answer: keyed digests matched to values it holds.

The runner sends strings only as digests keyed with this session's key. The agent already
holds the decrypted recording, so it builds a dictionary of everything it may show: the
recorded sources' constants, names and function names, the recording's external inputs
(results of recorded calls, recursively into their items; bytes also as the text they
decode to, whole and line by line, and the JSON document an input (or one of its lines)
carries: a body read from a socket or a file that
a program decodes or parses with `json`), the bytes it wrote or sent (its recorded outputs,
the same way: a response's body is matched whether or not a client in the same process
read it back in one piece), argv and environment values,
the recorded call names, the operator spellings `dis` uses, the builtin exception classes and
the interpreter's own messages for the commonest of them. A digest that matches shows
its value; anything else stays type, length and digest, with repr null.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import dis
import json
import os
from typing import Any

from sealtrace.proxy.format import CodecError, ParsedStream
from sealtrace.sandbox import canonical_bytes, keyed_digest, summarize

__all__ = ["Dictionary"]


def _boundary_calls() -> list[str]:
    """Every call name the boundary table can record, recorded in this run or not."""
    from sealtrace.proxy.boundary import BUILTIN_LIBRARIES

    return [entry.name for library in BUILTIN_LIBRARIES for entry in library.entries]


def _frozen_modules() -> list[str]:
    import _imp

    names: list[str] = _imp._frozen_module_names()  # type: ignore[attr-defined]
    return names


_MAX_DEPTH = 4
_MAX_ITEMS = 10_000
_MAX_DOCUMENT = 1 << 20  # the longest input searched for a JSON document
_MAX_LINES = 2_000  # the lines of one input taken one by one

# Messages the interpreter itself gives its commonest exceptions: constants of CPython, not
# of the program, shown when a crash's message is one of them.
_INTERPRETER_MESSAGES = (
    "division by zero",
    "float division by zero",
    "integer division or modulo by zero",
    "integer modulo by zero",
    "float modulo",
    "list index out of range",
    "tuple index out of range",
    "string index out of range",
    "list assignment index out of range",
    "pop from empty list",
    "pop from an empty deque",
    "dictionary changed size during iteration",
    "Set changed size during iteration",
    "max() arg is an empty sequence",
    "min() arg is an empty sequence",
    "generator already executing",
    "math domain error",
    "math range error",
)


class Dictionary:
    def __init__(self, key: memoryview, parsed: ParsedStream) -> None:
        """`key` is a view of the session's digest key (the SandboxClient's Secret): nothing
        here copies it, and once the client wipes it no digest made here matches."""
        self.key = key
        self.values: dict[str, str] = {}  # value digest -> repr
        self.texts: dict[tuple[str, str], str] = {}  # (kind, digest) -> text
        self.types: dict[str, str] = {}  # type digest (16 hex) -> type name
        self.functions: dict[str, list[tuple[int, int, str]]] = {}
        self._count = 0
        for name in dir(builtins):
            self._text("op", name)
            self._text("op", f"NULL + {name}")
            self._text("name", name)
        for t in (int, float, str, bytes, bool, list, tuple, dict, set, frozenset, type(None)):
            self._type(t.__qualname__)
            for attr in dir(t):
                self._text("op", f"{t.__qualname__}.{attr}")
        for name, obj in vars(builtins).items():
            if isinstance(obj, type) and issubclass(obj, BaseException):
                self._type(name)  # a crash's exception (RAISED), as VALUE's type digest
        for message in _INTERPRETER_MESSAGES:
            self._value(message, 0)
        for _, symbol in dis._nb_ops:  # type: ignore[attr-defined]
            self._text("op", symbol)
        for symbol in dis.cmp_op:
            self._text("op", symbol)
        for n in range(0, 1 << 16, 2):
            self._text("op", f"to {n}")
        for flags in ("defaults", "kwdefaults", "annotations", "closure"):
            self._text("op", flags)
        for conversion in ("str", "repr", "ascii"):
            self._text("op", conversion)
            self._text("op", f"{conversion}, with format")
        self._text("op", "with format")
        self._text("op", "")
        self._text("name", "<module>")
        for source in parsed.sources.values():
            if source.path.endswith(os.sep):
                continue
            blob = parsed.blobs.get(source.digest)
            if blob is not None:
                self._source(source.module, source.path, blob)
        for source in parsed.sources.values():
            self._text("path", source.path)
        for module in _frozen_modules():  # the standard library's frozen modules' "files"
            self._text("path", f"<frozen {module}>")
        for name in _boundary_calls():
            self._text("call", name)
        for event in parsed.events:
            self._text("op", event.callee)
            self._text("call", event.callee)
            if event.data is not None:  # what the program wrote or sent: a response's body
                self._value(bytes(event.data), 0)
            try:
                self._value(parsed.decode(event), 0)
            except CodecError:
                continue
        meta = parsed.meta
        for value in (meta.get("env") or {}).values():
            self._value(value, 0)
        target = meta.get("target") or {}
        for value in [target.get("value"), *(target.get("args") or [])]:
            if isinstance(value, str):
                self._value(value, 0)
        self._trees = [str(p) for p in meta.get("passthrough") or [] if isinstance(p, str)]
        self._tree_paths: dict[str, str] | None = None
        self.prefixes = {
            (k, int.from_bytes(bytes.fromhex(d)[:8], "little", signed=True)): t
            for (k, d), t in self.texts.items()
            if k in ("name", "call")
        }

    # -- building -------------------------------------------------------------------------

    def _digest(self, kind: str, data: bytes) -> str:
        return keyed_digest(self.key, kind, data)

    def digest(self, kind: str, text: str) -> bytes:
        """The digest the runner sends for `text` (sealtrace.sandbox.runner's _digest)."""
        return bytes.fromhex(self._digest(kind, text.encode("utf-8", "surrogatepass")))

    def _text(self, kind: str, text: str) -> None:
        self.texts[(kind, self._digest(kind, text.encode("utf-8", "surrogatepass")))] = text

    def _type(self, name: str) -> None:
        self.types[self._digest("type", name.encode())[:16]] = name

    def _value(self, value: Any, depth: int) -> None:
        if self._count > _MAX_ITEMS or depth > _MAX_DEPTH:
            return
        self._count += 1
        summary = summarize(value)
        shown, type_name = summary["repr"], summary["type"]
        self._type(type_name)
        if shown is not None:
            digest = keyed_digest(self.key, type_name, canonical_bytes(value, shown))
            self.values[digest] = shown
        if isinstance(value, dict):
            for k, v in list(value.items())[:_MAX_ITEMS]:
                self._value(k, depth + 1)
                self._value(v, depth + 1)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for item in list(value)[:_MAX_ITEMS]:
                self._value(item, depth + 1)
        elif isinstance(value, (bytes, str)) and depth == 0:
            if isinstance(value, bytes) and len(value) <= _MAX_DOCUMENT:
                # What a text file read in binary becomes once its reader decodes it, whole
                # and line by line (with and without their ends), each line's JSON too.
                with contextlib.suppress(UnicodeDecodeError):
                    text = value.decode("utf-8")
                    self._value(text, 1)
                    lines = text.splitlines(keepends=True)
                    for line in lines[:_MAX_LINES] if len(lines) > 1 else []:
                        self._value(line, 1)
                        self._value(line.rstrip("\r\n"), 1)
                        parsed = _json_in(line)
                        if parsed is not None:
                            self._value(parsed, 1)
            document = _json_in(value)
            if document is not None:
                self._value(document, 1)

    def _source(self, module: str, path: str, blob: bytes) -> None:
        try:
            tree = ast.parse(blob)
        except SyntaxError:
            return
        spans: list[tuple[int, int, str]] = []

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                name = None
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = child.name
                elif isinstance(child, ast.Lambda):
                    name = "<lambda>"
                elif isinstance(child, ast.ListComp):
                    name = "<listcomp>"
                elif isinstance(child, ast.SetComp):
                    name = "<setcomp>"
                elif isinstance(child, ast.DictComp):
                    name = "<dictcomp>"
                elif isinstance(child, ast.GeneratorExp):
                    name = "<genexpr>"
                if name is not None:
                    qual = f"{prefix}{name}"
                    end = getattr(child, "end_lineno", None) or child.lineno  # type: ignore[attr-defined]
                    spans.append((child.lineno, end, qual))  # type: ignore[attr-defined]
                    self._text("op", qual)
                    self._text("name", qual)
                    if isinstance(child, ast.ClassDef):
                        self._type(qual)
                        self._type(f"{module}.{qual}")
                        visit(child, f"{qual}.")
                    else:
                        visit(child, f"{qual}.<locals>.")
                else:
                    visit(child, prefix)

        visit(tree, "")
        self.functions[path] = spans
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant):
                self._value(node.value, 0)
                self._text("op", repr(node.value))
            elif isinstance(node, ast.Name):
                self._text("op", node.id)
                self._text("op", f"NULL + {node.id}")
                self._text("name", node.id)
            elif isinstance(node, ast.Attribute):
                self._text("op", node.attr)
                self._text("name", node.attr)
            elif isinstance(node, ast.arg):
                self._text("op", node.arg)
                self._text("name", node.arg)
            elif isinstance(node, ast.alias):
                for part in (node.asname or node.name).split("."):
                    self._text("op", part)

    # -- looking up -----------------------------------------------------------------------

    def text(self, kind: str, digest: bytes) -> str | None:
        return self.texts.get((kind, digest.hex()))

    def tree_path(self, digest: bytes) -> str | None:
        """A file of the interpreter's own trees (the recording's passthrough directories)
        whose path has this digest: where a divergence's innermost frame is library code.
        The replay image holds these trees at the same paths; they are listed here on
        first use only, since only a divergence outside the recorded sources asks."""
        if self._tree_paths is None:
            self._tree_paths = {}
            for tree in self._trees:
                for directory, _dirs, files in os.walk(tree):
                    for name in files:
                        if name.endswith(".py"):
                            path = os.path.join(directory, name)
                            encoded = path.encode("utf-8", "surrogateescape")
                            self._tree_paths[self._digest("path", encoded)] = path
        return self._tree_paths.get(digest.hex())

    def name_by_prefix(self, prefix: int, kind: str = "name") -> str | None:
        """A name from the first 8 bytes of its digest (a NODE's function, a call)."""
        return self.prefixes.get((kind, prefix))

    def function_at(self, path: str, line: int) -> str:
        """The innermost function, class or comprehension around a line; <module> if none."""
        best: tuple[int, int, str] | None = None
        for start, end, name in self.functions.get(path, []):
            if start <= line <= end and (best is None or start >= best[0]):
                best = (start, end, name)
        return best[2] if best else "<module>"

    def value(
        self, tag: int, length: int, ival: int, fval: float, digest: bytes, type_digest: int
    ) -> dict[str, Any]:
        names = {1: "NoneType", 2: "bool", 3: "int", 4: "float", 5: "str", 6: "bytes", 7: "list",
                 8: "tuple", 9: "dict", 10: "set"}  # fmt: skip
        type_name = names.get(tag) or self.types.get(f"{type_digest:016x}", "?")
        shown: str | None
        if tag == 1:
            shown = "None"
        elif tag == 2:
            shown = "True" if ival else "False"
        elif tag == 3 and self.values.get(digest.hex()) is None:
            shown = repr(ival) if self._digest("int", repr(ival).encode()) == digest.hex() else None
        elif tag == 4:
            shown = repr(fval)
        else:
            shown = self.values.get(digest.hex())
        if tag == 3 and shown is None:
            shown = self.values.get(digest.hex())
        return {"type": type_name, "repr": shown, "digest": digest.hex()}


def _json_in(value: bytes | str) -> Any:
    """The JSON document an input carries, if it carries one: the whole of it, or the body
    of an HTTP message (after its blank line). Only data the recording holds is parsed, and
    only to learn which strings the program could have parsed out of it."""
    if len(value) > _MAX_DOCUMENT:
        return None
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    head, blank, body = text.partition("\r\n\r\n")
    text = (body if blank else head).strip()
    if not text.startswith(("{", "[")):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
