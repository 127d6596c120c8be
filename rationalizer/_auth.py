"""Authenticated admin records: HMAC-SHA256 tags on ReleaseGroup and admin Heartbeats.

A group may have an admin key (configuration, never in the log or in snapshots). Replayers
given the key accept a ReleaseGroup of the group, and the pausing admin's position
heartbeats, only with a valid tag (PROTOCOL.md, "Authenticated admin").

The tag is ``HMAC-SHA256(key, value)`` where ``value`` is the canonical encoding of the
message with an empty tag (its tag length byte 0, see ``codec.unsigned_value``). The encoding starts with the version and type bytes and contains
every field (ids, group, expiry or position, heartbeat interval), so a tag is bound to
exactly one record content and cannot be moved to another type, group or partition.
Pure computation (stdlib ``hmac``/``hashlib``), like the rest of the rationalizer.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import TypeVar

import attrs

from ._codec import encode
from ._messages import AUTH_TAG_BYTES, Heartbeat, ReleaseGroup, valid_id

__all__ = ["MIN_KEY_BYTES", "sign", "tag_for_value", "valid_key", "validate_admin_keys", "verify"]

#: Shortest admin key accepted (use 32 random bytes; shorter keys are guessable).
MIN_KEY_BYTES = 16

_Signed = TypeVar("_Signed", Heartbeat, ReleaseGroup)


def valid_key(key: object) -> bool:
    return type(key) is bytes and len(key) >= MIN_KEY_BYTES


def validate_admin_keys(admin_keys: Mapping[str, bytes] | None) -> dict[str, bytes]:
    """Copy of ``admin_keys`` (group id -> key) after checking it; ``{}`` for None."""
    if admin_keys is None:
        return {}
    if not isinstance(admin_keys, Mapping):
        raise ValueError(
            f"admin_keys must be a mapping of group id to key bytes, got {admin_keys!r}"
        )
    out = {}
    for group, key in admin_keys.items():
        if not valid_id(group):
            raise ValueError(f"admin_keys: invalid group id {group!r}")
        if not valid_key(key):
            # never echo the key itself
            raise ValueError(
                f"admin_keys[{group!r}] must be bytes of at least {MIN_KEY_BYTES} bytes"
            )
        out[group] = key
    return out


def tag_for_value(key: bytes, unsigned_value: bytes) -> bytes:
    """HMAC-SHA256 of an encoded value whose tag field is empty."""
    return hmac.new(key, unsigned_value, hashlib.sha256).digest()


def _unsigned_value(msg: Heartbeat | ReleaseGroup) -> bytes:
    if type(msg) not in (Heartbeat, ReleaseGroup):
        raise TypeError(f"only Heartbeat and ReleaseGroup carry an auth tag, got {msg!r}")
    if msg.auth_tag is not None:
        msg = attrs.evolve(msg, auth_tag=None)
    return encode(msg)[1]


def sign(msg: _Signed, key: bytes) -> _Signed:
    """A copy of ``msg`` carrying the tag for ``key`` (any previous tag is replaced)."""
    if not valid_key(key):
        raise ValueError(f"an admin key must be bytes of at least {MIN_KEY_BYTES} bytes")
    tag = tag_for_value(key, _unsigned_value(msg))
    assert len(tag) == AUTH_TAG_BYTES
    return attrs.evolve(msg, auth_tag=tag)


def verify(msg: Heartbeat | ReleaseGroup, key: bytes) -> bool:
    """True iff ``msg`` carries the valid tag for ``key`` (constant-time comparison)."""
    unsigned = _unsigned_value(msg)  # TypeError for the types without a tag
    if msg.auth_tag is None:
        return False
    return hmac.compare_digest(tag_for_value(key, unsigned), msg.auth_tag)
