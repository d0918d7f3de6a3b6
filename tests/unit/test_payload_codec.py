"""The payload codec (`service/codec.py`) and its keys (`schemas/payload_keys.py`): what
Temporal stores is sealed with the first key, opens with any, says which key sealed it,
and cannot be altered or opened without that key."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest
from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.exceptions import ApplicationError
from temporalio.service import GrpcCompression

from loopworks.schemas.payload_keys import new_payload_key, parse_payload_keys
from loopworks.schemas.run import RunRequest
from loopworks.schemas.settings import SECRET_FIELDS, Settings
from loopworks.service.codec import (
    ENCRYPTED,
    KEY_ID,
    EncryptionCodec,
    PayloadKeyError,
    is_encrypted,
)
from loopworks.service.connect import CONVERTER, compression, data_converter

pytestmark = pytest.mark.unit

K1 = bytes(range(32))
K2 = bytes(range(32, 64))
TASK = "Write the deploy guide; the staging password is hunter2-staging"


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def _plain(text: str = TASK) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


async def test_a_sealed_payload_says_its_key_and_holds_no_plaintext() -> None:
    codec = EncryptionCodec({"k1": K1})
    [sealed] = await codec.encode([_plain()])
    assert sealed.metadata["encoding"] == ENCRYPTED
    assert sealed.metadata[KEY_ID] == b"k1"
    assert set(sealed.metadata) == {"encoding", KEY_ID}  # json/plain is sealed inside
    assert b"hunter2" not in sealed.data and b"json/plain" not in sealed.data
    [opened] = await codec.decode([sealed])
    assert opened == _plain()


async def test_each_payload_gets_its_own_nonce() -> None:
    codec = EncryptionCodec({"k1": K1})
    first, second = await codec.encode([_plain(), _plain()])
    assert first.data != second.data


async def test_rotation_seals_with_the_first_key_and_opens_with_any() -> None:
    before = EncryptionCodec({"k1": K1})
    [old] = await before.encode([_plain("sealed before the rotation")])
    after = EncryptionCodec({"k2": K2, "k1": K1})
    [new] = await after.encode([_plain("sealed after")])
    assert new.metadata[KEY_ID] == b"k2"
    opened = await after.decode([old, new])
    assert [json.loads(p.data) for p in opened] == ["sealed before the rotation", "sealed after"]
    # The old key alone cannot open what the new one sealed, and says why.
    with pytest.raises(PayloadKeyError, match=r"'k2', which LOOPS_PAYLOAD_KEYS does not hold"):
        await before.decode([new])


async def test_an_altered_payload_or_a_wrong_key_under_the_right_id_is_refused() -> None:
    codec = EncryptionCodec({"k1": K1})
    [sealed] = await codec.encode([_plain()])
    flipped = bytearray(sealed.data)
    flipped[-1] ^= 1
    altered = Payload(metadata=dict(sealed.metadata), data=bytes(flipped))
    with pytest.raises(PayloadKeyError, match="altered"):
        await codec.decode([altered])
    # The id is bound to the ciphertext: relabelling a payload does not pass either.
    relabelled = Payload(metadata={**sealed.metadata, KEY_ID: b"k2"}, data=sealed.data)
    with pytest.raises(PayloadKeyError):
        await EncryptionCodec({"k2": K1}).decode([relabelled])
    with pytest.raises(PayloadKeyError, match="altered"):
        await EncryptionCodec({"k1": K2}).decode([sealed])


async def test_plain_payloads_pass_and_nothing_is_sealed_twice() -> None:
    """Histories written before encryption was turned on still decode; a payload handed
    back already sealed (the codec endpoint's /encode given its own output) stays one
    layer deep."""
    codec = EncryptionCodec({"k1": K1})
    assert await codec.decode([_plain()]) == [_plain()]
    [sealed] = await codec.encode([_plain()])
    [again] = await codec.encode([sealed])
    assert again is sealed
    [opened] = await codec.decode([again])
    assert not is_encrypted(opened) and opened == _plain()


def test_keys_parse_in_order_and_refuse_what_is_malformed_without_quoting_it() -> None:
    keys = parse_payload_keys(f" k2:{_b64(K2)} , k1:{_b64(K1)},")
    assert list(keys) == ["k2", "k1"] and keys["k1"] == K1
    assert parse_payload_keys(None) == {} == parse_payload_keys("  ")
    short = _b64(b"x" * 16)
    for raw, said in [
        (f"{_b64(K1)}", "expected id:base64key"),
        (f"bad id:{_b64(K1)}", "expected id:base64key"),
        (f"k1:{_b64(K1)},k1:{_b64(K2)}", "given twice"),
        ("k1:not-base64-at-all!", "not base64"),
        (f"k1:{short}", "16 bytes, not 32"),
    ]:
        with pytest.raises(ValueError, match=said) as caught:
            parse_payload_keys(raw)
        assert _b64(K1) not in str(caught.value) and short not in str(caught.value)
    # Settings refuse it at start, as every malformed setting.
    with pytest.raises(ValidationError):
        Settings(LOOPS_PAYLOAD_KEYS="k1:short")


def test_a_new_key_is_a_valid_entry_and_a_secret_setting() -> None:
    entry = new_payload_key("local-1")
    [(key_id, key)] = parse_payload_keys(entry).items()
    assert key_id == "local-1" and len(key) == 32
    assert new_payload_key("local-1") != entry
    assert "payload_keys" in SECRET_FIELDS  # its keys are redacted wherever text leaves


async def test_the_converter_encrypts_exactly_when_a_key_is_set() -> None:
    assert data_converter(Settings()) is CONVERTER
    converter = data_converter(Settings(LOOPS_PAYLOAD_KEYS=f"k2:{_b64(K2)},k1:{_b64(K1)}"))
    assert isinstance(converter.payload_codec, EncryptionCodec)
    assert converter.payload_codec.key_ids == ("k2", "k1")
    request = RunRequest(task=TASK)
    [payload] = await converter.encode([request])
    assert payload.metadata[KEY_ID] == b"k2" and b"hunter2" not in payload.data
    # One layer: inside is the pydantic converter's JSON, not a second seal.
    inner = EncryptionCodec({"k2": K2}).open(payload)
    assert inner.metadata["encoding"] == b"json/plain" and b"hunter2" in inner.data
    assert await converter.decode([payload], [RunRequest]) == [request]
    # A plain converter cannot read it; the keyed one still reads plain payloads.
    assert await converter.decode(await CONVERTER.encode([request]), [RunRequest]) == [request]


async def test_the_converters_the_sdk_makes_share_one_set_of_parts() -> None:
    """The SDK makes a data converter per workflow activation: each shares the first's
    pydantic JSON converter (its serializer and type adapters), and converts as before."""
    made = [dataclasses.replace(CONVERTER) for _ in range(3)]
    json_parts = {
        id(c.payload_converter._inner_payload_converter.converters[b"json/plain"]) for c in made
    }  # type: ignore[attr-defined]
    assert len(json_parts) == 1
    request = RunRequest(task=TASK)
    [payload] = await made[0].encode([request])
    assert payload.metadata["encoding"] == b"json/plain"
    assert await made[2].decode([payload], [RunRequest]) == [request]


def test_auto_compression_leaves_ciphertext_alone() -> None:
    keyed = Settings(LOOPS_PAYLOAD_KEYS=f"k1:{_b64(K1)}", LOOPS_TEMPORAL_COMPRESSION="auto")
    assert compression(keyed, tls=True) == GrpcCompression.NONE
    assert compression(Settings(LOOPS_TEMPORAL_COMPRESSION="auto"), tls=True) == (
        GrpcCompression.GZIP
    )
    asked = Settings(LOOPS_PAYLOAD_KEYS=f"k1:{_b64(K1)}", LOOPS_TEMPORAL_COMPRESSION="gzip")
    assert compression(asked, tls=True) == GrpcCompression.GZIP


async def test_a_failures_message_is_encrypted_too() -> None:
    """An error can quote what a run was working on: its message and stack trace travel
    in the failure's encoded attributes, through the codec."""
    converter = data_converter(Settings(LOOPS_PAYLOAD_KEYS=f"k1:{_b64(K1)}"))
    failure = Failure()
    await converter.encode_failure(ApplicationError(f"could not finish: {TASK}"), failure)
    assert "hunter2" not in failure.message and b"hunter2" not in failure.SerializeToString()
    assert is_encrypted(failure.encoded_attributes)
    decoded = await converter.decode_failure(failure)
    assert isinstance(decoded, ApplicationError) and "hunter2" in decoded.message
    # Without keys, failures stay as the SDK writes them.
    plain = Failure()
    await CONVERTER.encode_failure(ApplicationError("plain"), plain)
    assert plain.message == "plain"
