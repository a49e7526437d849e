"""The Schema Registry framing, against the bytes confluent-kafka's serializers write."""

from __future__ import annotations

import io

import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

from connectors.registry import wire


def test_a_frame_gives_the_big_endian_schema_id_and_the_body() -> None:
    framed = wire.frame(b"\x00\x00\x01\x00\x07body")
    assert (framed.schema_id, bytes(framed.body), framed.indexes) == (65543, b"body", ())
    assert wire.header(65543) == b"\x00\x00\x01\x00\x07"


@pytest.mark.parametrize(("data", "reason"), [
    (b'{"schema":{}}', "value does not start with the Schema Registry magic byte 0 (found 0x7b: not written by a "
                       "registry serializer or converter; starts b'{\"schema\":{}}')"),
    (b"\x00\x00\x01", "value of 3 bytes is too short for a Schema Registry frame (a magic byte 0 and a 4-byte schema "
                      "id before the encoded value)"),
    (b"\x01\x00\x00\x00\x01x", "value does not start with the Schema Registry magic byte 0 (found 0x01"),
])
def test_bytes_that_are_not_a_frame_say_what_was_found(data: bytes, reason: str) -> None:
    with pytest.raises(wire.WireError) as exc:
        wire.frame(data)
    assert str(exc.value).startswith(reason)


@pytest.mark.parametrize("indexes", [[0], [1], [0, 2], [3, 1, 4], [70]])
def test_protobuf_message_indexes_read_as_the_serializer_writes_them(indexes: list[int]) -> None:
    """ProtobufSerializer._encode_varints: [0] is the single byte 0, anything else a zig-zag count
    and the zig-zag indexes."""
    buf = io.BytesIO()
    ProtobufSerializer._encode_varints(buf, indexes)
    framed = wire.protobuf_frame(wire.header(9) + buf.getvalue() + b"\x08\x01")
    assert (framed.schema_id, framed.indexes, bytes(framed.body)) == (9, tuple(indexes), b"\x08\x01")


def test_protobuf_indexes_that_end_before_the_message_are_refused() -> None:
    with pytest.raises(wire.WireError, match="the Protobuf message indexes end before the message"):
        wire.protobuf_frame(wire.header(1) + b"\x04")
