"""The audit key's two implementations behave alike (the seam's conformance test): KMS's
HMAC key on moto's server and the local key.

- a MAC verifies for its own message only, and not under another key;
- KMS refusing (a key it does not have, or a key that is not an HMAC key) is one clear
  error, never a MAC that "does not verify";
- production refuses to start without a KMS key for the audit chain.
"""

from __future__ import annotations

from typing import Any

import pytest

from sealtrace.server import KeyServiceError
from sealtrace.server._audit_key import AuditKey, KmsAuditKey, LocalAuditKey
from sealtrace.server._settings import ServerSettings


@pytest.fixture(params=["kms", "local"])
def keys(request: pytest.FixtureRequest) -> tuple[AuditKey, AuditKey]:
    """Two keys of one implementation."""
    if request.param == "local":
        return LocalAuditKey(b"one"), LocalAuditKey(b"two")
    client, _ = request.getfixturevalue("kms")
    made = [client.create_key(KeySpec="HMAC_256", KeyUsage="GENERATE_VERIFY_MAC")
            for _ in range(2)]  # fmt: skip
    one, two = (KmsAuditKey(client, m["KeyMetadata"]["KeyId"]) for m in made)
    return one, two


def test_a_mac_verifies_its_own_message_under_its_own_key(
    keys: tuple[AuditKey, AuditKey],
) -> None:
    one, two = keys
    mac = one.mac(b"head")
    assert len(mac) == 32 and one.mac(b"head") == mac  # HMAC-SHA256: deterministic
    assert one.verify(b"head", mac)
    assert not one.verify(b"heads", mac)
    assert not one.verify(b"head", bytes(32))
    assert not two.verify(b"head", mac)


def test_kms_refusing_is_one_clear_error(kms: tuple[Any, str]) -> None:
    client, symmetric = kms
    for key_id in ("alias/nothing-here", symmetric):  # none; and not an HMAC key
        key = KmsAuditKey(client, key_id)
        with pytest.raises(KeyServiceError, match="KMS refused"):
            key.mac(b"head")
        with pytest.raises(KeyServiceError, match="KMS refused"):
            key.verify(b"head", bytes(32))


def test_production_needs_a_kms_audit_key() -> None:
    settings = {"environment": "production", "secret_key": "s" * 32,
                "database_url": "postgresql+psycopg://db/sealtrace"}  # fmt: skip
    with pytest.raises(ValueError, match="AUDIT_KEY_ID"):
        ServerSettings(**settings).check()  # type: ignore[arg-type]
    ServerSettings(**settings, audit_key_id="alias/sealtrace-audit").check()  # type: ignore[arg-type]
