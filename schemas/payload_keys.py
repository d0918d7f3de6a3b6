"""The keys Temporal payloads are encrypted with (LOOPS_PAYLOAD_KEYS), parsed.

The setting is comma-separated `id:key` pairs, each key 32 random bytes in base64:

    LOOPS_PAYLOAD_KEYS=k2:<base64>,k1:<base64>

The first key encrypts; every key decrypts, found by the id each encrypted payload
carries. Rotating is adding a key in front and, once no history needs the old one,
dropping it (docs/operations.md#rotating-the-payload-key). Kept free of the codec itself
(`loopworks.service.codec`), so that Settings can refuse a malformed value at start
without loading a cipher library.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets

ENV_VAR = "LOOPS_PAYLOAD_KEYS"
# AES-256: the only size generated and accepted. A shorter AES key would also work, but
# one size is one less thing to get wrong.
KEY_BYTES = 32
# An id travels in every payload's metadata and in logs: short, and nothing that could
# be confused with the list's separators.
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")


def parse_payload_keys(text: str | None) -> dict[str, bytes]:
    """The keys of a LOOPS_PAYLOAD_KEYS value by id, the encrypting one first; empty when
    unset. A ValueError saying what is wrong (never quoting a key) otherwise."""
    keys: dict[str, bytes] = {}
    for n, entry in enumerate((part.strip() for part in (text or "").split(",")), 1):
        if not entry:
            continue
        key_id, sep, encoded = entry.partition(":")
        key_id = key_id.strip()
        if not sep or not _ID.fullmatch(key_id):
            raise ValueError(
                f"{ENV_VAR} entry {n}: expected id:base64key, the id letters, digits, '.',"
                " '_' or '-' (at most 32)"
            )
        if key_id in keys:
            raise ValueError(f"{ENV_VAR}: the key id {key_id!r} is given twice")
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{ENV_VAR}: the key {key_id!r} is not base64") from None
        if len(key) != KEY_BYTES:
            raise ValueError(
                f"{ENV_VAR}: the key {key_id!r} is {len(key)} bytes, not {KEY_BYTES}"
                f" (make one with `{GENERATE_COMMAND}`)"
            )
        keys[key_id] = key
    return keys


GENERATE_COMMAND = "openssl rand -base64 32"


def new_payload_key(key_id: str) -> str:
    """A fresh `id:base64key` entry for LOOPS_PAYLOAD_KEYS."""
    if not _ID.fullmatch(key_id):
        raise ValueError(f"not a payload key id: {key_id!r}")
    return f"{key_id}:{base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()}"
