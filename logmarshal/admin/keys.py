"""Admin key files: the per-group HMAC keys that authenticate ReleaseGroup and the admin's
position heartbeats (PROTOCOL.md, "Authenticated admin"; :mod:`rationalizer._auth`).

A key is a secret, so it is only ever read from a file, never taken on a command line (where
``ps`` and shell history would show it), and the file must be private to its owner, as ssh
insists for private keys.

Format (UTF-8 text, one entry per line; blank lines and lines starting with ``#`` ignored)::

    # group <TAB or spaces> key
    orders      hex:3f1c...            (or bare hex, an even number of hex digits)
    billing     base64:q83v...=        (or bare base64)
    *           9a0b...                the key of every group not listed

A file holding a single line with only a key (no group) is the same as ``* key``. A key is
``hex:``/``base64:`` prefixed, or bare: bare text made only of hex digits (even length) is
hex, anything else is strict base64. Keys must be at least
:data:`rationalizer.MIN_KEY_BYTES` bytes; use 32 random bytes (``openssl rand -hex 32``).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
from collections.abc import Iterable, Mapping

import attrs

from rationalizer import MIN_KEY_BYTES
from rationalizer._messages import valid_id

from ..errors import LogmarshalError

__all__ = ["AdminKeyError", "AdminKeys", "load_admin_keys", "parse_admin_keys"]

WILDCARD = "*"
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})+\Z")
#: how much of a key file is read (its keys are a few lines)
_MAX_KEY_FILE = 1 << 20


class AdminKeyError(LogmarshalError, ValueError):
    """The key file is unusable (unreadable, too open, malformed). Never contains key bytes."""


@attrs.frozen
class AdminKeys:
    """Keys by group, plus an optional key for every other group.

    ``WorldState(admin_keys=...)`` needs a plain mapping of the groups it will meet, so a
    wildcard key is expanded with :meth:`for_groups` once the groups are known.
    """

    by_group: Mapping[str, bytes] = attrs.field(factory=dict)
    default: bytes | None = None

    def key_for(self, group: str) -> bytes | None:
        return self.by_group.get(group, self.default)

    def for_group(self, group: str) -> dict[str, bytes]:
        """``admin_keys`` for a Marshaler of ``group`` (empty when the group has no key)."""
        key = self.key_for(group)
        return {} if key is None else {group: key}

    def for_groups(self, groups: Iterable[str]) -> dict[str, bytes]:
        """``admin_keys`` for a replayer that meets ``groups`` (explicit keys always kept)."""
        out = dict(self.by_group)
        if self.default is not None:
            for group in groups:
                out.setdefault(group, self.default)
        return out

    def __bool__(self) -> bool:
        return bool(self.by_group) or self.default is not None

    def __repr__(self) -> str:  # never show key material
        return f"AdminKeys(groups={sorted(self.by_group)!r}, default={self.default is not None})"


def _decode_key(text: str, where: str) -> bytes:
    if text.startswith("hex:"):
        body, kind = text[4:], "hex"
    elif text.startswith("base64:"):
        body, kind = text[7:], "base64"
    else:
        body, kind = text, "hex" if _HEX.match(text) else "base64"
    try:
        key = bytes.fromhex(body) if kind == "hex" else base64.b64decode(body, validate=True)
    except (ValueError, binascii.Error):
        raise AdminKeyError(f"{where}: the key is not valid {kind}") from None
    if len(key) < MIN_KEY_BYTES:
        raise AdminKeyError(
            f"{where}: the key has {len(key)} bytes, at least {MIN_KEY_BYTES} are required "
            "(use 32 random bytes, e.g. 'openssl rand -hex 32')"
        )
    return key


def parse_admin_keys(text: str, source: str = "admin key file") -> AdminKeys:
    """Parse the key file format (module docstring); errors name the line, never the key."""
    by_group: dict[str, bytes] = {}
    default: bytes | None = None
    entries = [
        (n, line.strip())
        for n, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    for n, line in entries:
        where = f"{source}:{n}"
        fields = line.split()
        if len(fields) == 1 and len(entries) == 1:
            group, key_text = WILDCARD, fields[0]
        elif len(fields) == 2:
            group, key_text = fields
        else:
            raise AdminKeyError(
                f"{where}: expected 'GROUP KEY' (a group id, whitespace, a hex or base64 key)"
            )
        key = _decode_key(key_text, where)
        if group == WILDCARD:
            if default is not None:
                raise AdminKeyError(f"{where}: a second '*' (default) key")
            default = key
            continue
        if not valid_id(group):
            raise AdminKeyError(f"{where}: {group!r} is not a valid group id")
        if group in by_group:
            raise AdminKeyError(f"{where}: a second key for group {group!r}")
        by_group[group] = key
    if not by_group and default is None:
        raise AdminKeyError(f"{source}: no keys in the file")
    return AdminKeys(by_group, default)


def load_admin_keys(path: str | os.PathLike[str]) -> AdminKeys:
    """Read a key file, refusing one that others may read or write (like ssh does)."""
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY)
    except OSError as exc:
        raise AdminKeyError(f"cannot open admin key file {name}: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # (before fdopen: a directory's error named the fd)
        os.close(fd)
        raise AdminKeyError(f"admin key file {name} is not a regular file")
    with os.fdopen(fd, "rb") as f:
        if os.name == "posix" and st.st_mode & 0o077:
            raise AdminKeyError(
                f"admin key file {name} is accessible by others (mode "
                f"{stat.S_IMODE(st.st_mode):04o}); keys must be private: chmod 600 {name}"
            )
        data = f.read(_MAX_KEY_FILE)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AdminKeyError(f"admin key file {name} is not UTF-8 text") from None
    return parse_admin_keys(text, name)
