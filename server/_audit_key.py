"""The audit log's MAC key: the one secret that makes a chain's head unforgeable by anyone who
can only write the database. A SHA-256 chain alone is not: whoever rewrites a row can
recompute every digest after it. Each audit row also carries a MAC of its chain position and
digest under this key, and verification checks the head's MAC with the key, never with
anything the database holds.

Seams: `AuditKey` is the MAC. KmsAuditKey (a KMS HMAC_256 key: GenerateMac and VerifyMac;
the key never leaves KMS) in production and in the local stack; LocalAuditKey (HMAC-SHA256
under a key derived from the server's secret key, held only in this process) for
development without KMS, refused in production by ServerSettings.check(). Neither ever
writes its key anywhere.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Any, Protocol

from ._errors import KeyServiceError
from ._key_service import _reason

if TYPE_CHECKING:
    from ._settings import ServerSettings

__all__ = ["AuditKey", "KmsAuditKey", "LocalAuditKey", "audit_key"]


class AuditKey(Protocol):
    def mac(self, message: bytes) -> bytes: ...
    def verify(self, message: bytes, mac: bytes) -> bool: ...


class KmsAuditKey:
    """A KMS HMAC key (KeySpec HMAC_256, KeyUsage GENERATE_VERIFY_MAC)."""

    ALGORITHM = "HMAC_SHA_256"

    def __init__(self, client: Any, key_id: str) -> None:
        self.client = client
        self.key_id = key_id

    def mac(self, message: bytes) -> bytes:
        try:
            out = self.client.generate_mac(
                KeyId=self.key_id, Message=message, MacAlgorithm=self.ALGORITHM
            )
        except Exception as exc:  # botocore's ClientError and connection errors alike
            raise KeyServiceError(f"KMS refused to MAC an audit row: {_reason(exc)}") from None
        return bytes(out["Mac"])

    def verify(self, message: bytes, mac: bytes) -> bool:
        try:
            out = self.client.verify_mac(
                KeyId=self.key_id, Message=message, Mac=mac, MacAlgorithm=self.ALGORITHM
            )
        except Exception as exc:
            if _reason(exc) == "KMSInvalidMacException":  # KMS's answer to a wrong MAC
                return False
            raise KeyServiceError(f"KMS refused to check the audit chain: {_reason(exc)}") from None
        return bool(out["MacValid"])


class LocalAuditKey:
    """HMAC-SHA256 in this process, under a key derived from `secret` (the server's secret
    key, which the database does not hold either)."""

    def __init__(self, secret: bytes) -> None:
        self._key = hmac.digest(secret, b"sealtrace audit chain mac v1", hashlib.sha256)

    def mac(self, message: bytes) -> bytes:
        return hmac.digest(self._key, message, hashlib.sha256)

    def verify(self, message: bytes, mac: bytes) -> bool:
        return hmac.compare_digest(self.mac(message), mac)


def audit_key(settings: ServerSettings) -> AuditKey:
    """KMS's HMAC key when SEALTRACE_SERVER_AUDIT_KEY_ID names one, else the local key
    (development only: check() refuses production without a KMS key)."""
    if settings.audit_key_id:
        import boto3

        client = boto3.client("kms", region_name=settings.aws_region)
        return KmsAuditKey(client, settings.audit_key_id)
    return LocalAuditKey(settings.secret_key.get_secret_value().encode())
