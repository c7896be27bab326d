"""Key material in one mutable buffer that is zeroed after use, as far as Python allows.

A `Secret` holds key bytes (a recording key, a body key, a run's unwrapped private key, a
session's digest key) in one bytearray, which its holder wipes when done: `wipe()`, or leaving
a `with` block, in a `finally`. Collecting a Secret wipes it too, as a backstop, but nothing
should rely on that. A wiped Secret reads as zeros through every view of it.

What Python does not allow, and so what this does not claim: an immutable `bytes` cannot be
wiped, and a library that hands a key out as `bytes`, or keeps one, holds a copy out of reach.
Each is named where it happens: cryptography's HPKE returns a decrypted key as bytes; its key
objects (X25519, AESGCM) keep their own copy in OpenSSL or Rust memory for their lifetime;
botocore hands KMS's plaintext over as bytes, parsed from a base64 JSON body. Such a copy is
taken into a Secret at once and dropped: freed, not wiped. A Secret never makes one itself.

It must never hand out an immutable copy of its bytes (no `bytes()` of it, no `__bytes__`,
no key bytes in `repr()`), and is never pickled or copied: `view()` is the only way in.
"""

from __future__ import annotations

import os
from types import TracebackType

__all__ = ["Secret"]

Bytes = bytes | bytearray | memoryview


class Secret:
    """`size` bytes of key material in one bytearray; `view()` reads and fills it."""

    __slots__ = ("_buffer",)

    def __init__(self, size: int) -> None:
        self._buffer = bytearray(size)

    @classmethod
    def copy_of(cls, data: Bytes) -> Secret:
        """A Secret holding a copy of `data` (whose own copy, if it is `bytes`, the caller
        drops: it cannot be wiped)."""
        secret = cls(len(data))
        secret._buffer[:] = data
        return secret

    @classmethod
    def random(cls, size: int) -> Secret:
        """`size` random bytes read straight into the buffer (os.urandom would return them as
        bytes first); os.urandom, copied in, where /dev/urandom cannot be opened."""
        secret = cls(size)
        try:
            with open("/dev/urandom", "rb", buffering=0) as source:
                filled = source.readinto(secret._buffer)
        except OSError:
            filled = None
        if filled != size:
            secret._buffer[:] = os.urandom(size)
        return secret

    def view(self) -> memoryview:
        """A view of the buffer itself (never a copy): what cryptography's and hashlib's
        functions take as a key, and how a caller fills a Secret it made empty."""
        return memoryview(self._buffer)

    def wipe(self) -> None:
        """Zero the buffer in place (its size stays, so every view of it reads zeros)."""
        self._buffer[:] = bytes(len(self._buffer))

    def __len__(self) -> int:
        return len(self._buffer)

    def __enter__(self) -> Secret:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.wipe()

    def __del__(self) -> None:
        if hasattr(self, "_buffer"):  # not when __init__ itself failed
            self.wipe()

    def __repr__(self) -> str:
        return f"Secret({len(self._buffer)} bytes)"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a Secret is never pickled")

    def __copy__(self) -> Secret:
        raise TypeError("a Secret is never copied")

    def __deepcopy__(self, memo: object) -> Secret:
        raise TypeError("a Secret is never copied")
