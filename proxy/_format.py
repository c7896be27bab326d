"""The sealed recording format, version 1: byte layouts and the crypto that binds them.

This module is the single definition of the format; docs/format.md explains it and lists the
invariants. Both the writer and the reader build every header, nonce and AAD here, so they
cannot disagree. Bump FORMAT_VERSION for any change to a layout or a derivation.

Objects of one recording (names relative to the recording's prefix or directory):
    header          RecordingHeader: suite, run id, chunk and segment sizes, HPKE-wrapped key
    seg-000000 ...  SegmentHeader followed by chunk records; each object written once
    proc-1-seg-000000 ...
                    the same, for a process the recorded one forked (process "1", its own
                    child "1.2", ...): its stream under its own body key (process_body_cipher)
    continues       a run the recorder rotated to (a continuation): which run, process and
                    location it goes on from, and that run's recording key, sealed under a
                    key derived from this run's (seal_continuation); absent from other runs

A chunk record is CHUNK_PREFIX (ciphertext length, flags) then AES-256-GCM ciphertext+tag.
Chunk counters run across segments; the nonce is STREAM-style (counter, final flag); the AAD
binds the header digest, the segment index and the flags.

Every HPKE recipe of sealtrace is here and nowhere else, each a safe operation on a recording
key (nobody outside this module touches HPKE_SUITE):
    wrap_recording_key / unwrap_recording_key   to a run's public key (the header's wrapped key),
                                                run id and format version bound in `info`
    seal_session_key / open_session_key         to an agent's public key for one session (what
                                                crosses Redis), session and run ids bound in `info`

A recording key that comes out of a recipe is a `Secret` (sealtrace.proxy._secret) its caller
wipes; the body key exists only inside body_cipher(), between its derivation and the AESGCM
object built from it. cryptography's HPKE returns the key as bytes, and AESGCM keeps its own
copy of the body key: those copies are out of reach (freed, never wiped; docs/platform.md).
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hpke import AEAD, KDF, KEM, Suite
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ._errors import TamperedError, UnsupportedFormatError, WrongIdentityError
from ._keys import Identity, Recipient
from ._secret import Secret

Key = Secret | bytes | bytearray | memoryview  # what the recipes take a key as

FORMAT_VERSION = 1

# RFC 9180 identifiers of the one suite version 1 uses.
KEM_ID_X25519_HKDF_SHA256 = 0x0020
KDF_ID_HKDF_SHA256 = 0x0001
AEAD_ID_AES_256_GCM = 0x0002
HPKE_SUITE = Suite(KEM.X25519, KDF.HKDF_SHA256, AEAD.AES_256_GCM)

RECORDING_KEY_SIZE = 32
TAG_SIZE = 16
DIGEST_SIZE = 32
ENC_SIZE = 32
WRAPPED_KEY_SIZE = RECORDING_KEY_SIZE + TAG_SIZE

DEFAULT_CHUNK_SIZE = 64 * 1024
DEFAULT_SEGMENT_SIZE = 8 * 1024 * 1024
MIN_CHUNK_SIZE = 16
MAX_CHUNK_SIZE = 16 * 1024 * 1024
# A reader holds one whole segment (it walks a segment's structure before it releases any of
# its plaintext), so the largest segment is the reader's memory budget: 8 x the default and 64 x
# the recorder's 1 MiB, and refused in a header (it used to allow 1 GiB, which nothing wrote).
MAX_SEGMENT_SIZE = 64 * 1024 * 1024
MAX_RUN_ID_BYTES = 200

HEADER_OBJECT = "header"
CONTINUES_OBJECT = "continues"
SEGMENT_PREFIX = "seg-"
PROCESS_PREFIX = "proc-"
# A process path: the root process is "", its first child "1", that child's second "1.2".
_PROCESS_PATH = re.compile(r"[1-9][0-9]{0,5}(?:\.[1-9][0-9]{0,5}){0,15}")
MAX_PROCESS_PATH = 64

HEADER_MAGIC = b"SEALTRH\x00"
SEGMENT_MAGIC = b"SEALTRS\x00"

# header: magic, version, kem, kdf, aead, chunk_size, segment_size, created_unix_ms, run_id_len
_HEADER_FIXED = struct.Struct(">8sHHHHIIQH")
# segment: magic, version, segment index, first chunk counter, header digest
SEGMENT_HEADER = struct.Struct(">8sHIQ32s")
# chunk record prefix: ciphertext length (plaintext + tag), flags
CHUNK_PREFIX = struct.Struct(">IB")
# nonce: 3 zero bytes, 64-bit chunk counter, final flag  (STREAM construction)
NONCE = struct.Struct(">3xQB")
# AAD: header digest, segment index, flags
AAD = struct.Struct(">32sIB")

FLAG_FINAL = 0x01  # last chunk of the recording
FLAG_SEGMENT_END = 0x02  # last chunk of its segment
KNOWN_FLAGS = FLAG_FINAL | FLAG_SEGMENT_END

HPKE_INFO_LABEL = b"sealtrace/recording-key"
SESSION_INFO_LABEL = b"sealtrace-session-key-v2\x00"
SESSION_BLOB_SIZE = ENC_SIZE + WRAPPED_KEY_SIZE  # enc || ciphertext || tag
BODY_KEY_LABEL = b"sealtrace/body-key"
CONTINUES_KEY_LABEL = b"sealtrace/continues-key"
CONTINUES_MAGIC = b"SEALTRC\x00"
MAX_CONTINUES_BYTES = 1024
PROCESS_KEY_LABEL = b"/process/"


def segment_name(index: int, process: str = "") -> str:
    """Segment `index` of the root process's stream, or of forked process `process`'s."""
    own = f"{SEGMENT_PREFIX}{index:06d}"
    return f"{PROCESS_PREFIX}{process}-{own}" if process else own


def valid_process_path(path: str) -> bool:
    """ "" (the recorded process) or a forked one's path: "1", "1.2", ... (at most 16 deep)."""
    return path == "" or (
        len(path) <= MAX_PROCESS_PATH and _PROCESS_PATH.fullmatch(path) is not None
    )


def parse_segment_name(name: str, process: str = "") -> int | None:
    """The index a canonical segment name of `process`'s stream encodes, or None for any other
    name (another process's segment too)."""
    prefix = f"{PROCESS_PREFIX}{process}-{SEGMENT_PREFIX}" if process else SEGMENT_PREFIX
    digits = name[len(prefix) :]
    if not name.startswith(prefix) or len(digits) < 6 or not digits.isdigit():
        return None
    index = int(digits)
    return index if segment_name(index, process) == name else None


def segment_process(name: str) -> str | None:
    """The process whose segment `name` is ("" the recorded one's), or None if it is none."""
    if parse_segment_name(name) is not None:
        return ""
    if not name.startswith(PROCESS_PREFIX):
        return None
    path = name[len(PROCESS_PREFIX) :].partition("-")[0]
    if not valid_process_path(path) or not path:
        return None
    return path if parse_segment_name(name, path) is not None else None


def segment_capacity(chunk_size: int, segment_size: int) -> int:
    """How many full chunk records fit in one segment object (at least one)."""
    room = segment_size - SEGMENT_HEADER.size
    return max(1, room // (CHUNK_PREFIX.size + chunk_size + TAG_SIZE))


def check_sizes(chunk_size: int, segment_size: int) -> None:
    if not MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE:
        raise ValueError(f"chunk size must be in [{MIN_CHUNK_SIZE}, {MAX_CHUNK_SIZE}]")
    if not 0 < segment_size <= MAX_SEGMENT_SIZE:
        raise ValueError(f"segment size must be in (0, {MAX_SEGMENT_SIZE}]")


def hpke_info(run_id: str) -> bytes:
    """HPKE `info`: binds the wrapped key to this format version and this run."""
    rid = run_id.encode("utf-8")
    return HPKE_INFO_LABEL + struct.pack(">HH", FORMAT_VERSION, len(rid)) + rid


def _view(key: Key) -> bytes | bytearray | memoryview:
    return key.view() if isinstance(key, Secret) else key


def _taken(plaintext: bytes) -> Secret:
    """HPKE's decrypted key, moved into a Secret: cryptography returns it as bytes, a copy
    that is dropped here (freed, not wiped; nothing in Python can wipe bytes)."""
    return Secret.copy_of(plaintext)


def wrap_recording_key(recording_key: Key, recipient: Recipient, run_id: str) -> bytes:
    """enc || ciphertext of the recording key, single-shot HPKE base mode."""
    sealed = HPKE_SUITE.encrypt(_view(recording_key), recipient.public_key, info=hpke_info(run_id))
    assert len(sealed) == ENC_SIZE + WRAPPED_KEY_SIZE
    return sealed


def unwrap_recording_key(sealed: bytes, identity: Identity, run_id: str) -> Secret:
    """The recording key, for the caller to wipe (`with unwrap_recording_key(...) as key`)."""
    try:
        key = _taken(HPKE_SUITE.decrypt(sealed, identity.private_key, info=hpke_info(run_id)))
    except InvalidTag:
        raise WrongIdentityError(
            "cannot unwrap the recording key: wrong identity, or the header was altered"
        ) from None
    if len(key) != RECORDING_KEY_SIZE:
        key.wipe()
        raise TamperedError("the unwrapped recording key has the wrong length")
    return key


def session_info(session_id: str, run_id: str, store: str, wrapped_key: bytes) -> bytes:
    """HPKE `info` of a session key: binds the sealed key to one session of one run, to the
    store location the agent is told to read, and to the recording header registered for the
    run (the SHA-256 of its wrapped key). An assignment pointing at another store, or a store
    holding another header (a recording forged with the run's public key), opens nothing."""
    sid, rid, where = session_id.encode(), run_id.encode(), store.encode()
    lengths = struct.pack(">HHH", len(sid), len(rid), len(where))
    return SESSION_INFO_LABEL + lengths + sid + rid + where + hashlib.sha256(wrapped_key).digest()


def seal_session_key(
    recording_key: Key,
    agent: Recipient,
    *,
    session_id: str,
    run_id: str,
    store: str,
    wrapped_key: bytes,
) -> bytes:
    """The recording key sealed (single-shot HPKE base mode) to the agent, for this session
    of this run, read from `store`, whose header carries `wrapped_key` (session_info)."""
    if len(recording_key) != RECORDING_KEY_SIZE:
        raise ValueError("a recording key is 32 bytes")
    info = session_info(session_id, run_id, store, wrapped_key)
    return HPKE_SUITE.encrypt(_view(recording_key), agent.public_key, info=info)


def open_session_key(
    blob: bytes, agent: Identity, *, session_id: str, run_id: str, store: str, wrapped_key: bytes
) -> Secret:
    """The recording key, for the caller to wipe; or WrongIdentityError (another agent's
    blob, another session's or run's, another store's, a header other than the registered
    one, or altered)."""
    info = session_info(session_id, run_id, store, wrapped_key)
    try:
        key = _taken(HPKE_SUITE.decrypt(blob, agent.private_key, info=info))
    except (InvalidTag, ValueError):
        raise WrongIdentityError(
            "cannot open the session key: not this agent's, this session's or this store's, "
            "the recording's header is not the one registered for the run, or it was altered"
        ) from None
    if len(key) != RECORDING_KEY_SIZE:
        key.wipe()
        raise WrongIdentityError("the session key has the wrong length")
    return key


def body_cipher(recording_key: Key, header_digest: bytes, process: str = "") -> AESGCM:
    """AES-256-GCM for the chunks, under the body key: HKDF of the recording key, bound to the
    whole header, not just the run. The body key is derived into a Secret and wiped as soon as
    AESGCM has taken it (AESGCM keeps its own copy, out of reach, while it lives).

    A forked process's stream (`process` "1", "1.2", ...) has a body key of its own, bound to
    its path too: its chunk counters start from 0 as every stream's do, so no nonce is ever
    used twice under one key, and no segment of one process's stream opens as another's."""
    info = BODY_KEY_LABEL + header_digest
    if process:
        if not valid_process_path(process):
            raise ValueError(f"not a forked process's path: {process!r}")
        info += PROCESS_KEY_LABEL + process.encode()
    return _derived_cipher(recording_key, info)


def _derived_cipher(recording_key: Key, info: bytes) -> AESGCM:
    """AES-256-GCM under HKDF-SHA256(recording key, info): the derived key lives in a Secret
    wiped as soon as AESGCM has taken it (AESGCM keeps its own copy while it lives)."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info)
    with Secret(32) as key:
        hkdf.derive_into(_view(recording_key), key.view())
        return AESGCM(key.view())


@dataclass(frozen=True)
class RecordingHeader:
    run_id: str
    chunk_size: int
    segment_size: int
    created_unix_ms: int
    wrapped_key: bytes  # enc || HPKE ciphertext
    version: int = FORMAT_VERSION

    def encode(self) -> bytes:
        rid = self.run_id.encode("utf-8")
        fixed = _HEADER_FIXED.pack(
            HEADER_MAGIC,
            self.version,
            KEM_ID_X25519_HKDF_SHA256,
            KDF_ID_HKDF_SHA256,
            AEAD_ID_AES_256_GCM,
            self.chunk_size,
            self.segment_size,
            self.created_unix_ms,
            len(rid),
        )
        return fixed + rid + self.wrapped_key

    @classmethod
    def decode(cls, raw: bytes) -> RecordingHeader:
        if len(raw) < _HEADER_FIXED.size or raw[:8] != HEADER_MAGIC:
            raise UnsupportedFormatError("not a sealtrace recording (bad header magic)")
        _, version, kem, kdf, aead, chunk, segment, created, rid_len = _HEADER_FIXED.unpack_from(
            raw
        )
        if version != FORMAT_VERSION:
            raise UnsupportedFormatError(
                f"recording format version {version} is not supported (this build reads "
                f"version {FORMAT_VERSION})"
            )
        if (kem, kdf, aead) != (KEM_ID_X25519_HKDF_SHA256, KDF_ID_HKDF_SHA256, AEAD_ID_AES_256_GCM):
            raise UnsupportedFormatError(
                f"unsupported HPKE suite {kem:#06x}/{kdf:#06x}/{aead:#06x}"
            )
        expected = _HEADER_FIXED.size + rid_len + ENC_SIZE + WRAPPED_KEY_SIZE
        if rid_len > MAX_RUN_ID_BYTES or len(raw) != expected:
            raise TamperedError("header has the wrong length")
        try:
            check_sizes(chunk, segment)
            run_id = raw[_HEADER_FIXED.size : _HEADER_FIXED.size + rid_len].decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            raise TamperedError("header fields are out of range") from None
        return cls(
            run_id=run_id,
            chunk_size=chunk,
            segment_size=segment,
            created_unix_ms=created,
            wrapped_key=raw[_HEADER_FIXED.size + rid_len :],
            version=version,
        )


def header_digest(encoded_header: bytes) -> bytes:
    return hashlib.sha256(encoded_header).digest()


def validate_run_id(run_id: str) -> None:
    raw = run_id.encode("utf-8")
    if not raw or len(raw) > MAX_RUN_ID_BYTES or not run_id.isprintable():
        raise ValueError(f"a run id is 1..{MAX_RUN_ID_BYTES} bytes of printable text")


def valid_location_name(name: str) -> bool:
    """A run's location as its continuation names it: one path component (a directory's or a
    key prefix's last part) beside the continuation's own, never a path elsewhere."""
    return (
        0 < len(name.encode("utf-8")) <= MAX_RUN_ID_BYTES
        and name.isprintable()
        and "/" not in name
        and "\\" not in name
        and name not in (".", "..")
    )


@dataclass(frozen=True)
class Continuation:
    """What a rotated-to run says of the run it goes on from (the `continues` object): that
    run's id, its location's name beside this one's, the process whose stream goes on here,
    its header digest and its recording key (a Secret the caller wipes)."""

    run_id: str
    location: str
    process: str
    header_digest: bytes
    key: Secret


def _continues_cipher(recording_key: Key, header_digest: bytes) -> AESGCM:
    return _derived_cipher(recording_key, CONTINUES_KEY_LABEL + header_digest)


def _text_field(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(">H", len(raw)) + raw


def seal_continuation(recording_key: Key, header_digest: bytes, previous: Continuation) -> bytes:
    """The `continues` object of the run whose key and header these are. The previous run's key
    is sealed under a key derived from this run's (one use: the nonce is fixed), bound to this
    run's header, so it opens exactly for whoever may open this run (who must replay the
    previous one to replay this one)."""
    validate_run_id(previous.run_id)
    if not (
        valid_location_name(previous.location)
        and valid_process_path(previous.process)
        and len(previous.header_digest) == DIGEST_SIZE
        and len(previous.key) == RECORDING_KEY_SIZE
    ):
        raise ValueError("malformed continuation")
    plain = bytearray(previous.header_digest)
    plain += previous.key.view()
    for text in (previous.run_id, previous.location, previous.process):
        plain += _text_field(text)
    try:
        sealed = _continues_cipher(recording_key, header_digest).encrypt(
            bytes(NONCE.size), bytes(plain), CONTINUES_MAGIC + header_digest
        )
    finally:
        plain[:] = bytes(len(plain))
    return CONTINUES_MAGIC + sealed


def open_continuation(raw: bytes, recording_key: Key, header_digest: bytes) -> Continuation:
    """The run a continuation goes on from; TamperedError if the object is not this run's
    (another run's, altered, cut) or malformed."""
    if len(raw) > MAX_CONTINUES_BYTES or not raw.startswith(CONTINUES_MAGIC):
        raise TamperedError("the continues object is malformed")
    try:
        plain = bytearray(
            _continues_cipher(recording_key, header_digest).decrypt(
                bytes(NONCE.size), raw[len(CONTINUES_MAGIC) :], CONTINUES_MAGIC + header_digest
            )
        )
    except InvalidTag:
        raise TamperedError(
            "the continues object failed authentication: another run's, or altered"
        ) from None
    try:
        digest = bytes(plain[:DIGEST_SIZE])
        key = Secret.copy_of(memoryview(plain)[DIGEST_SIZE : DIGEST_SIZE + RECORDING_KEY_SIZE])
        pos, texts = DIGEST_SIZE + RECORDING_KEY_SIZE, []
        for _ in range(3):
            (length,) = struct.unpack_from(">H", plain, pos)
            texts.append(bytes(plain[pos + 2 : pos + 2 + length]).decode("utf-8"))
            pos += 2 + length
            if pos > len(plain):
                raise ValueError
    except (struct.error, ValueError, UnicodeDecodeError):
        raise TamperedError("the continues object is malformed") from None
    finally:
        plain[:] = bytes(len(plain))
    run_id, location, process = texts
    if pos != len(plain) or not valid_location_name(location) or not valid_process_path(process):
        key.wipe()
        raise TamperedError("the continues object is malformed")
    try:
        validate_run_id(run_id)
    except ValueError:
        key.wipe()
        raise TamperedError("the continues object is malformed") from None
    return Continuation(run_id, location, process, digest, key)
