"""The value codec: a versioned, tagged binary encoding for what crosses the call boundary.

Exact for every value it carries: ints of any size, floats bit for bit (-0.0, infinities,
NaN payloads), str including lone surrogates, bytes, containers, exceptions as their qualified
type plus args, and a fixed set of registered extension types (datetime, UUID, stat results,
...). Bytes and str of BLOB_THRESHOLD or more are content-addressed: the encoder hands them to
a blob callback once per digest and writes a 32-byte reference.

It must never execute code while decoding: nothing is imported, no constructor named by the
data is looked up outside the registry or an already-loaded module's exception classes, and
pickle is never used. Decoding runs in bounded memory (docs/format.md, "Memory budget"): a blob
reference decodes to the one object that blob decodes to, never a copy, and the objects one
value creates may take at most DECODE_FACTOR times its encoded length plus DECODE_BASE bytes.
Any malformed input, whatever Python raises while rebuilding it, ends in one CodecError.
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
import sys
import types
from collections.abc import Callable
from typing import Any

from ._errors import IntegrityError

__all__ = [
    "BLOB_THRESHOLD",
    "CODEC_VERSION",
    "DECODE_BASE",
    "DECODE_FACTOR",
    "MALFORMED",
    "CodecError",
    "Decoder",
    "Encoder",
    "UnencodableError",
    "blob_digest",
    "decode_value",
    "encode_value",
    "has_extension",
    "malformed",
    "register_extension",
    "varint",
]

CODEC_VERSION = 1
BLOB_THRESHOLD = 4096

T_NONE, T_FALSE, T_TRUE, T_INT, T_BIGINT, T_FLOAT, T_COMPLEX = 0, 1, 2, 3, 4, 5, 6
T_STR, T_BYTES, T_BYTEARRAY, T_BLOB_BYTES, T_BLOB_STR = 7, 8, 9, 10, 11
T_TUPLE, T_LIST, T_DICT, T_SET, T_FROZENSET = 16, 17, 18, 19, 20
T_EXCEPTION, T_EXTENSION = 32, 33

_DOUBLE = struct.Struct("<d")
_COMPLEX = struct.Struct("<dd")
_MAX_DEPTH = 200

# The memory budget of one decoded value: its objects (each counted at sys.getsizeof, a blob
# reference at one pointer) may total DECODE_FACTOR x its encoded length + DECODE_BASE bytes.
DECODE_FACTOR = 64
DECODE_BASE = 1 << 20
_POINTER = 8


class CodecError(IntegrityError):
    """The bytes are not a valid encoding (exit 4: the recording cannot be trusted)."""


class UnencodableError(TypeError):
    """The value has no encoding; the recorder decides what that means for the call."""


# What Python raises while rebuilding values from malformed bytes: a constructor given the wrong
# fields, an index past a short tuple, a number out of range, nesting past the stack, an
# allocation refused. Only the decoding of untrusted bytes turns these into a CodecError.
MALFORMED = (LookupError, TypeError, ValueError, ArithmeticError, RecursionError, MemoryError)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def malformed(what: str, exc: BaseException) -> CodecError:
    """The CodecError (exit 4, one line) for an exception malformed bytes caused while
    decoding `what`. Callers catch MALFORMED with a plain try: decoding runs inside replayed
    programs, where a context manager's frames (contextlib's) would count as the program's."""
    return CodecError(f"{what} is malformed ({_one_line(exc)})")


def blob_digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


# name -> (type, to_value, from_value). to_value turns an instance into encodable data;
# from_value rebuilds it from that data and must not do I/O.
_EXT_BY_NAME: dict[str, tuple[type, Callable[[Any], Any], Callable[[Any], Any]]] = {}
_EXT_BY_TYPE: dict[type, str] = {}


def register_extension(
    name: str, cls: type, to_value: Callable[[Any], Any], from_value: Callable[[Any], Any]
) -> None:
    """Teach the codec one more exact type. Names are part of the format: never reuse one."""
    _EXT_BY_NAME[name] = (cls, to_value, from_value)
    _EXT_BY_TYPE[cls] = name


def has_extension(cls: type) -> bool:
    return cls in _EXT_BY_TYPE


def _write_varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def varint(value: int) -> bytes:
    out = bytearray()
    _write_varint(out, value)
    return bytes(out)


# The encoder runs once for every recorded call, on the application's thread: the commonest
# encodings are precomputed (a small int is two bytes, the head of a short str is two bytes),
# and containers encode their scalar items inline rather than through a call each.
_INT_MIN, _INT_MAX = -(1 << 62), 1 << 62
_SMALL_INT = tuple(bytes((T_INT, z)) for z in range(0x80))  # by zigzag: -64 <= value < 64
_HEAD = {
    tag: tuple(bytes((tag, n)) for n in range(0x80))
    for tag in (T_STR, T_BYTES, T_TUPLE, T_LIST, T_DICT)
}
_STR_HEAD, _BYTES_HEAD = _HEAD[T_STR], _HEAD[T_BYTES]
_TUPLE_HEAD, _LIST_HEAD, _DICT_HEAD = _HEAD[T_TUPLE], _HEAD[T_LIST], _HEAD[T_DICT]
_NONE, _TRUE, _FALSE = bytes((T_NONE,)), bytes((T_TRUE,)), bytes((T_FALSE,))


class Encoder:
    """Encodes values into a caller-owned bytearray."""

    __slots__ = ("_blob", "_lenient")

    def __init__(
        self, blob: Callable[[bytes, bytes], None] | None = None, *, lenient: bool = False
    ) -> None:
        # lenient: objects with no encoding become their type name (used for digests of
        # arguments, where identity of the value is not needed, only a stable fingerprint).
        self._blob = blob
        self._lenient = lenient

    def encode(self, out: bytearray, value: Any, depth: int = 0) -> None:
        # type() rather than __class__ (a slow attribute lookup) for the built-in types,
        # which cannot claim another class; anything else is looked up by its __class__.
        cls = type(value)
        if cls is int:
            if -64 <= value < 64:
                out += _SMALL_INT[(value << 1) ^ (value >> 63)]
            elif -8192 <= value < 8192:  # two bytes of varint
                zigzag = (value << 1) ^ (value >> 63)
                out += bytes((T_INT, (zigzag & 0x7F) | 0x80, zigzag >> 7))
            elif _INT_MIN <= value < _INT_MAX:
                out.append(T_INT)
                _write_varint(out, (value << 1) ^ (value >> 63))
            else:
                raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
                out.append(T_BIGINT)
                _write_varint(out, len(raw))
                out += raw
        elif value is None:
            out += _NONE
        elif cls is tuple or cls is list:
            if depth > _MAX_DEPTH:
                raise UnencodableError("nested too deeply")
            n = len(value)
            if n < 0x80:
                out += (_TUPLE_HEAD if cls is tuple else _LIST_HEAD)[n]
            else:
                out.append(T_TUPLE if cls is tuple else T_LIST)
                _write_varint(out, n)
            depth += 1
            for item in value:
                if item is None:
                    out += _NONE
                    continue
                kind = type(item)
                if kind is int and -8192 <= item < 8192:
                    if -64 <= item < 64:
                        out += _SMALL_INT[(item << 1) ^ (item >> 63)]
                    else:
                        zigzag = (item << 1) ^ (item >> 63)
                        out += bytes((T_INT, (zigzag & 0x7F) | 0x80, zigzag >> 7))
                elif kind is str and len(item) < 0x20:  # at most 4 bytes a character
                    try:
                        raw = item.encode()
                    except UnicodeEncodeError:
                        raw = item.encode("utf-8", "surrogatepass")
                    out += _STR_HEAD[len(raw)]
                    out += raw
                else:
                    self.encode(out, item, depth)
        elif cls is bytes:
            if len(value) < 0x80:  # the common case, inline: tag, one length byte, bytes
                out += _BYTES_HEAD[len(value)]
                out += value
            else:
                self._bytes(out, value, T_BYTES, T_BLOB_BYTES)
        elif cls is str:
            try:
                raw = value.encode()
            except UnicodeEncodeError:  # lone surrogates
                raw = value.encode("utf-8", "surrogatepass")
            if len(raw) < 0x80:
                out += _STR_HEAD[len(raw)]
                out += raw
            else:
                self._bytes(out, raw, T_STR, T_BLOB_STR)
        elif cls is bool:
            out += _TRUE if value else _FALSE
        elif cls is float:
            out.append(T_FLOAT)
            out += _DOUBLE.pack(value)
        elif cls is dict:
            if depth > _MAX_DEPTH:
                raise UnencodableError("nested too deeply")
            n = len(value)
            if n < 0x80:
                out += _DICT_HEAD[n]
            else:
                out.append(T_DICT)
                _write_varint(out, n)
            depth += 1
            for key, item in value.items():
                self.encode(out, key, depth)
                self.encode(out, item, depth)
        else:
            self._other(out, value, value.__class__, depth)

    def _bytes(self, out: bytearray, raw: bytes, small: int, large: int) -> None:
        if self._blob is not None and len(raw) >= BLOB_THRESHOLD:
            digest = blob_digest(raw)
            self._blob(digest, raw)
            out.append(large)
            out += digest
        else:
            out.append(small)
            _write_varint(out, len(raw))
            out += raw

    def _other(self, out: bytearray, value: Any, cls: type, depth: int) -> None:
        name = _EXT_BY_TYPE.get(cls)
        if name is not None:
            out.append(T_EXTENSION)
            self.encode(out, name)
            self.encode(out, _EXT_BY_NAME[name][1](value), depth + 1)
        elif cls is bytearray or cls is memoryview:
            out.append(T_BYTEARRAY if cls is bytearray else T_BYTES)
            raw = bytes(value)
            _write_varint(out, len(raw))
            out += raw
        elif cls is complex:
            out.append(T_COMPLEX)
            out += _COMPLEX.pack(value.real, value.imag)
        elif cls is set or cls is frozenset:
            items = list(value)
            out.append(T_SET if cls is set else T_FROZENSET)
            _write_varint(out, len(items))
            for item in items:
                self.encode(out, item, depth + 1)
        elif isinstance(value, BaseException):
            self._exception(out, value, depth)
        elif self._lenient and isinstance(value, (int, str, tuple)):
            # Digests only: an IntEnum or a namedtuple fingerprints as its plain value.
            plain: Any = (
                int(value)
                if isinstance(value, int)
                else str(value)
                if isinstance(value, str)
                else tuple(value)
            )
            self.encode(out, plain, depth)
        elif self._lenient:
            self.encode(out, f"<{cls.__module__}.{cls.__qualname__}>")
        else:
            raise UnencodableError(f"{cls.__module__}.{cls.__qualname__} has no encoding")

    def _exception(self, out: bytearray, exc: BaseException, depth: int) -> None:
        cls = exc.__class__
        out.append(T_EXCEPTION)
        self.encode(out, f"{cls.__module__}:{cls.__qualname__}")
        args = exc.args
        if isinstance(exc, OSError):
            args = (exc.errno, exc.strerror, exc.filename, None, exc.filename2)
        self.encode(out, _encodable(self, args, depth))
        extra = {k: v for k, v in vars(exc).items() if not k.startswith("__")}
        self.encode(out, _encodable(self, extra, depth))


def _encodable(encoder: Encoder, value: Any, depth: int) -> Any:
    """Drop what cannot be encoded from exception details rather than lose the exception."""
    probe = bytearray()
    if isinstance(value, dict):
        kept = {}
        for key, item in value.items():
            try:
                Encoder(lenient=False).encode(probe, item, depth + 1)
            except UnencodableError:
                continue
            kept[key] = item
        return kept
    items = []
    for item in value:
        try:
            Encoder(lenient=False).encode(probe, item, depth + 1)
            items.append(item)
        except UnencodableError:
            items.append(repr(item))
    return tuple(items)


class RecordedException(Exception):
    """Stands in for an exception whose class is not loaded in the replaying process."""


class Decoder:
    """Decodes from a buffer; `blobs` resolves content-addressed references.

    `texts` caches the str each blob decodes to, so every reference to one blob, in this value
    or (shared by the caller) in any other, yields the same object."""

    __slots__ = ("_blobs", "_budget", "_buf", "_texts", "pos")

    def __init__(
        self,
        buf: bytes | memoryview,
        blobs: dict[bytes, bytes] | None = None,
        *,
        texts: dict[bytes, str] | None = None,
    ) -> None:
        self._buf = buf
        self._blobs = blobs if blobs is not None else {}
        self._texts = texts if texts is not None else {}
        self._budget = DECODE_FACTOR * len(buf) + DECODE_BASE
        self.pos = 0

    def _charge(self, value: Any) -> Any:
        self._budget -= sys.getsizeof(value) + _POINTER
        if self._budget < 0:
            raise CodecError("a value decodes past its memory budget")
        return value

    def varint(self) -> int:
        buf, pos, shift, result = self._buf, self.pos, 0, 0
        while True:
            if pos >= len(buf):
                raise CodecError("value cut short inside a length")
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
            if shift > 70:
                raise CodecError("length too long")
        self.pos = pos
        return result

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self._buf):
            raise CodecError("value cut short")
        raw = bytes(self._buf[self.pos : end])
        self.pos = end
        return raw

    def decode(self) -> Any:
        """One value from the current position; CodecError for any malformed input."""
        try:
            return self._decode(0)
        except MALFORMED as exc:
            raise malformed("a recorded value", exc) from exc

    def _decode(self, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise CodecError("nested too deeply")
        tag = self.take(1)[0]
        if tag == T_NONE:
            return None
        if tag == T_FALSE:
            return False
        if tag == T_TRUE:
            return True
        if tag == T_INT:
            z = self.varint()
            return self._charge((z >> 1) ^ -(z & 1))
        if tag == T_BIGINT:
            return self._charge(int.from_bytes(self.take(self.varint()), "little", signed=True))
        if tag == T_FLOAT:
            return self._charge(_DOUBLE.unpack(self.take(8))[0])
        if tag == T_COMPLEX:
            real, imag = _COMPLEX.unpack(self.take(16))
            return self._charge(complex(real, imag))
        if tag == T_STR:
            return self._charge(self._str(self.take(self.varint())))
        if tag == T_BYTES:
            return self._charge(self.take(self.varint()))
        if tag == T_BYTEARRAY:
            return self._charge(bytearray(self.take(self.varint())))
        if tag in (T_BLOB_BYTES, T_BLOB_STR):
            return self._blob(tag)
        if tag in (T_TUPLE, T_LIST, T_SET, T_FROZENSET):
            items = [self._decode(depth + 1) for _ in range(self._count())]
            if tag == T_TUPLE:
                return self._charge(tuple(items))
            if tag == T_LIST:
                return self._charge(items)
            try:
                return self._charge(set(items) if tag == T_SET else frozenset(items))
            except TypeError:
                raise CodecError("unhashable item in a set") from None
        if tag == T_DICT:
            result = {}
            for _ in range(self._count()):
                key = self._decode(depth + 1)
                try:
                    result[key] = self._decode(depth + 1)
                except TypeError:
                    raise CodecError("unhashable dict key") from None
            return self._charge(result)
        if tag == T_EXCEPTION:
            return self._charge(self._exception(depth))
        if tag == T_EXTENSION:
            name = self._decode(depth + 1)
            data = self._decode(depth + 1)
            entry = _EXT_BY_NAME.get(name) if isinstance(name, str) else None
            if entry is None:
                raise CodecError(f"unknown extension type {name!r}")
            try:
                return self._charge(entry[2](data))
            except (TypeError, ValueError) as exc:
                raise CodecError(f"bad {name} value: {exc}") from None
        raise CodecError(f"unknown type tag {tag}")

    def _blob(self, tag: int) -> Any:
        digest = self.take(32)
        self._budget -= _POINTER
        if self._budget < 0:
            raise CodecError("a value decodes past its memory budget")
        raw = self._blobs.get(digest)
        if raw is None:
            raise CodecError(f"reference to a missing blob {digest.hex()[:16]}")
        if tag == T_BLOB_BYTES:
            return raw
        text = self._texts.get(digest)
        if text is None:
            text = self._texts[digest] = self._str(raw)
        return text

    def _count(self) -> int:
        n = self.varint()
        if n > len(self._buf) - self.pos:
            raise CodecError("container longer than the data left")
        return n

    @staticmethod
    def _str(raw: bytes) -> str:
        try:
            return raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise CodecError("invalid text") from None

    def _exception(self, depth: int) -> BaseException:
        qualified = self._decode(depth + 1)
        args = self._decode(depth + 1)
        extra = self._decode(depth + 1)
        if not isinstance(qualified, str) or not isinstance(args, tuple):
            raise CodecError("malformed exception")
        cls = _exception_class(qualified)
        exc: BaseException
        if cls is None:
            exc = RecordedException(qualified, *args)
        elif issubclass(cls, OSError) and len(args) == 5:
            errno, strerror, filename, _, filename2 = args
            if filename is None:
                exc = cls(errno, strerror) if errno is not None else cls()
            else:
                exc = cls(errno, strerror, filename, None, filename2)
        else:
            exc = cls.__new__(cls, *args)
            exc.args = args
            init = cls.__init__
            if not isinstance(init, types.FunctionType):
                # A built-in __init__ sets derived fields (SystemExit.code, StopIteration.value);
                # one written in Python is the application's code and is not run here.
                with contextlib.suppress(TypeError, ValueError):
                    init(exc, *args)
        if isinstance(extra, dict):
            for key, value in extra.items():
                if isinstance(key, str):
                    with contextlib.suppress(AttributeError, TypeError):
                        setattr(exc, key, value)
        return exc


def _exception_class(qualified: str) -> type[BaseException] | None:
    # Only classes of modules the process has already loaded: decoding never imports.
    module_name, _, qualname = qualified.partition(":")
    obj: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        if obj is None:
            return None
        obj = getattr(obj, part, None)
    if isinstance(obj, type) and issubclass(obj, BaseException):
        return obj
    return None


def encode_value(value: Any, blob: Callable[[bytes, bytes], None] | None = None) -> bytes:
    out = bytearray()
    Encoder(blob).encode(out, value)
    return bytes(out)


def decode_value(
    data: bytes,
    blobs: dict[bytes, bytes] | None = None,
    *,
    texts: dict[bytes, str] | None = None,
) -> Any:
    decoder = Decoder(data, blobs, texts=texts)
    value = decoder.decode()
    if decoder.pos != len(data):
        raise CodecError("trailing bytes after a value")
    return value


def _register_builtin_extensions() -> None:
    import datetime as dt
    import os
    import time
    import uuid

    def tz_value(tz: dt.tzinfo | None) -> Any:
        if tz is None:
            return None
        if isinstance(tz, dt.timezone):
            return (tz.utcoffset(None), tz.tzname(None))
        raise UnencodableError(f"tzinfo {type(tz).__qualname__} has no encoding")

    def tz_from(value: Any) -> dt.tzinfo | None:
        if value is None:
            return None
        offset, name = value
        if offset == dt.timedelta(0) and name == "UTC":
            return dt.UTC
        return dt.timezone(offset, name)

    register_extension(
        "timedelta",
        dt.timedelta,
        lambda v: (v.days, v.seconds, v.microseconds),
        lambda v: dt.timedelta(v[0], v[1], v[2]),
    )
    register_extension("date", dt.date, lambda v: (v.year, v.month, v.day), lambda v: dt.date(*v))
    register_extension(
        "datetime",
        dt.datetime,
        lambda v: (
            v.year,
            v.month,
            v.day,
            v.hour,
            v.minute,
            v.second,
            v.microsecond,
            tz_value(v.tzinfo),
            v.fold,
        ),
        lambda v: dt.datetime(
            v[0], v[1], v[2], v[3], v[4], v[5], v[6], tzinfo=tz_from(v[7]), fold=v[8]
        ),
    )
    register_extension(
        "time",
        dt.time,
        lambda v: (v.hour, v.minute, v.second, v.microsecond, tz_value(v.tzinfo), v.fold),
        lambda v: dt.time(v[0], v[1], v[2], v[3], tzinfo=tz_from(v[4]), fold=v[5]),
    )
    register_extension("timezone", dt.timezone, tz_value, tz_from)
    register_extension("uuid", uuid.UUID, lambda v: v.int, lambda v: uuid.UUID(int=v))
    register_extension(
        "stat_result",
        os.stat_result,
        lambda v: (tuple(v), {k: getattr(v, k) for k in _STAT_EXTRA if hasattr(v, k)}),
        lambda v: os.stat_result(v[0], v[1]),
    )
    register_extension(
        "struct_time",
        time.struct_time,
        lambda v: (tuple(v), v.tm_zone, v.tm_gmtoff),
        lambda v: time.struct_time(v[0], {"tm_zone": v[1], "tm_gmtoff": v[2]}),
    )
    for name, cls in (("times_result", os.times_result), ("uname_result", os.uname_result)):
        register_extension(name, cls, tuple, cls)
    if hasattr(os, "waitid_result"):  # os.waitid, not on every platform
        register_extension("waitid_result", os.waitid_result, tuple, os.waitid_result)
    register_extension(
        "terminal_size",
        os.terminal_size,
        tuple,
        os.terminal_size,
    )


_STAT_EXTRA = (
    "st_atime",
    "st_mtime",
    "st_ctime",
    "st_atime_ns",
    "st_mtime_ns",
    "st_ctime_ns",
    "st_blksize",
    "st_blocks",
    "st_rdev",
)

_register_builtin_extensions()
