"""Recipient (public) and identity (private) X25519 keys and their one-line file forms.

A recipient file may be copied anywhere; an identity file is written 0600 and never logged.
Key bytes never appear in repr() or error messages. An identity file is read into a buffer
and decoded into another (sealtrace.proxy._secret), both wiped once cryptography's key object
has taken the key: its text never becomes a str or bytes. The key object keeps its own copy,
in OpenSSL, while it lives. (Writing a key pair goes through cryptography's
private_bytes_raw(), which returns bytes: that path, `sealtrace keygen`, makes one copy that is
freed, not wiped.)
"""

from __future__ import annotations

import base64
import binascii
import os
import string
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from ._errors import UsageError
from ._secret import Secret

__all__ = ["Identity", "Recipient", "generate_identity", "write_keypair"]

RECIPIENT_PREFIX = "sealtrace-recipient-x25519-v1:"
IDENTITY_PREFIX = "SEALTRACE-IDENTITY-X25519-V1:"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str, what: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise UsageError(f"{what} is not valid base64url") from None
    if len(raw) != 32:
        raise UsageError(f"{what} must hold 32 key bytes, found {len(raw)}")
    return raw


_ALPHABET = string.ascii_uppercase + string.ascii_lowercase + string.digits + "-_"  # base64url
_B64URL = {c: i for i, c in enumerate(_ALPHABET.encode())}
_MAX_IDENTITY_FILE = 256  # its one line is 72 bytes
_SPACE = b" \t\r\n"


def _read_into(path: Path, buffer: memoryview, what: str) -> memoryview:
    """The file's bytes, stripped of surrounding white space, read into `buffer` (no copy on
    the way: unbuffered readinto); UsageError if it does not fit."""
    try:
        with open(path, "rb", buffering=0) as file:
            filled = 0
            while filled < len(buffer) and (got := file.readinto(buffer[filled:])):
                filled += got
    except FileNotFoundError:
        raise UsageError(f"{what} file not found: {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {what} file {path}: {exc.__class__.__name__}") from None
    if filled == len(buffer):
        raise UsageError(f"{path} is not a sealtrace {what} file")
    start, end = 0, filled
    while start < end and buffer[start] in _SPACE:
        start += 1
    while end > start and buffer[end - 1] in _SPACE:
        end -= 1
    return buffer[start:end]


def _unb64_into(text: memoryview, out: memoryview, what: str) -> None:
    """Decode base64url `text` into exactly len(out) bytes, byte by byte into `out` (the
    standard decoders return bytes; a few transient ints hold bits on the way)."""
    end = len(text)
    while end and text[end - 1] == ord("="):
        end -= 1
    acc = bits = filled = 0
    for index in range(end):
        value = _B64URL.get(text[index])
        if value is None:
            raise UsageError(f"{what} is not valid base64url")
        acc, bits = ((acc << 6) | value) & 0x3FFF, bits + 6
        if bits >= 8:
            bits -= 8
            if filled < len(out):
                out[filled] = (acc >> bits) & 0xFF
            filled += 1
    if filled != len(out):
        raise UsageError(f"{what} must hold {len(out)} key bytes, found {filled}")


def _read_key_text(path: Path, prefix: str, what: str) -> str:
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise UsageError(f"{what} file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {what} file {path}: {exc.__class__.__name__}") from None
    if not text.startswith(prefix):
        raise UsageError(f"{path} is not a sealtrace {what} file")
    return text[len(prefix) :]


@dataclass(frozen=True, repr=False)
class Recipient:
    """A public key recordings are sealed to."""

    public_key: X25519PublicKey

    @property
    def raw(self) -> bytes:
        return self.public_key.public_bytes_raw()

    def to_text(self) -> str:
        return RECIPIENT_PREFIX + _b64(self.raw)

    @classmethod
    def from_raw(cls, raw: bytes) -> Recipient:
        return cls(X25519PublicKey.from_public_bytes(raw))

    @classmethod
    def from_text(cls, text: str) -> Recipient:
        if not text.startswith(RECIPIENT_PREFIX):
            raise UsageError("not a sealtrace recipient key")
        return cls.from_raw(_unb64(text[len(RECIPIENT_PREFIX) :], "recipient key"))

    @classmethod
    def load(cls, path: Path) -> Recipient:
        body = _read_key_text(path, RECIPIENT_PREFIX, "recipient")
        return cls.from_raw(_unb64(body, f"recipient file {path}"))

    def __repr__(self) -> str:
        return f"Recipient({self.to_text()})"


@dataclass(frozen=True, repr=False)
class Identity:
    """A private key that opens recordings sealed to its recipient."""

    private_key: X25519PrivateKey

    @property
    def recipient(self) -> Recipient:
        return Recipient(self.private_key.public_key())

    def to_text(self) -> str:
        return IDENTITY_PREFIX + _b64(self.private_key.private_bytes_raw())

    @classmethod
    def from_raw(cls, raw: bytes) -> Identity:
        return cls(X25519PrivateKey.from_private_bytes(raw))

    @classmethod
    def load(cls, path: Path) -> Identity:
        """The identity in a key file; the file's text and the key's bytes are held only in
        buffers wiped before this returns."""
        prefix = IDENTITY_PREFIX.encode("ascii")
        with Secret(_MAX_IDENTITY_FILE) as text, Secret(32) as raw:
            line = _read_into(path, text.view(), "identity")
            if line[: len(prefix)] != prefix:
                raise UsageError(f"{path} is not a sealtrace identity file")
            _unb64_into(line[len(prefix) :], raw.view(), f"identity file {path}")
            return cls(X25519PrivateKey.from_private_bytes(raw.view()))

    def __repr__(self) -> str:
        return f"Identity(recipient={self.recipient.to_text()})"


def generate_identity() -> Identity:
    return Identity(X25519PrivateKey.generate())


def write_keypair(directory: Path, name: str) -> tuple[Path, Path]:
    """Write NAME.pub and NAME.key (0600) into directory; refuse to overwrite either."""
    if not name or "/" in name or name.startswith("."):
        raise UsageError(f"invalid key name {name!r}")
    directory.mkdir(parents=True, exist_ok=True)
    identity = generate_identity()
    pub_path, key_path = directory / f"{name}.pub", directory / f"{name}.key"
    for path in (pub_path, key_path):
        if path.exists():
            raise UsageError(f"refusing to overwrite {path}")
    # O_EXCL + mode at creation: the private key is never readable by others, not even briefly.
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(identity.to_text() + "\n")
    pub_path.write_text(identity.recipient.to_text() + "\n", encoding="ascii")
    return pub_path, key_path
