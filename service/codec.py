"""Temporal payloads encrypted before they leave the process: AES-256-GCM, each payload
carrying the id of the key that sealed it.

Every payload a loopworks client hands Temporal (workflow and activity inputs and results,
signals, updates, queries' answers, memos, the UI's summaries, failures' details) holds
the task, prompts, plans and events of a run: whoever reads Temporal's database or its
UI would read them all. With LOOPS_PAYLOAD_KEYS set, each is sealed here instead, and
only a process holding the key (a worker, the API, the API's codec endpoint for the UI
and the `temporal` CLI) reads it again. What stays in the clear is Temporal's own:
workflow ids and types, search attributes, activity names, timings (SECURITY.md).

A sealed payload is `Payload(metadata={"encoding": "binary/encrypted",
"encryption-key-id": <id>}, data=nonce + AES-GCM(serialized payload))`, the key id bound
in as associated data. The first key encrypts; every key decrypts, so a new key goes in
front and the old one stays until no history needs it
(docs/operations.md#rotating-the-payload-key). A payload not sealed (written before
encryption was turned on) decodes as it is; one already sealed is never sealed twice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from loopworks.schemas.payload_keys import ENV_VAR

ENCODING_KEY = "encoding"
ENCRYPTED = b"binary/encrypted"
KEY_ID = "encryption-key-id"
# GCM's standard nonce: random per payload, which keeps a key safe for 2^32 payloads;
# rotate long before (docs/operations.md#rotating-the-payload-key).
NONCE_BYTES = 12


class PayloadKeyError(ValueError):
    """A sealed payload this process cannot open: its key is not held, or it was altered."""


def is_encrypted(payload: Payload) -> bool:
    return payload.metadata.get(ENCODING_KEY) == ENCRYPTED


def key_id_of(payload: Payload) -> str:
    return payload.metadata.get(KEY_ID, b"").decode(errors="replace")


class EncryptionCodec(PayloadCodec):
    """Seals payloads with the first of `keys` (by id) and opens them with any."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        if not keys:
            raise ValueError("an encryption codec needs at least one key")
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self.encrypting_key = next(iter(keys))

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._ciphers)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.seal(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.open(payload) for payload in payloads]

    def seal(self, payload: Payload) -> Payload:
        if is_encrypted(payload):
            return payload
        key_id = self.encrypting_key
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[key_id].encrypt(nonce, payload.SerializeToString(), key_id.encode())
        return Payload(
            metadata={ENCODING_KEY: ENCRYPTED, KEY_ID: key_id.encode()}, data=nonce + sealed
        )

    def open(self, payload: Payload) -> Payload:
        if not is_encrypted(payload):
            return payload
        key_id = key_id_of(payload)
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise PayloadKeyError(
                f"a payload is encrypted with the key {key_id[:40]!r}, which {ENV_VAR} does"
                f" not hold (it holds {', '.join(self.key_ids)})"
            )
        data = payload.data
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], key_id.encode())
        except InvalidTag:
            raise PayloadKeyError(
                f"a payload does not decrypt with the key {key_id!r}: it was altered, or"
                " another key was given that id"
            ) from None
        return Payload.FromString(plain)
