"""The wire format of Confluent's serializers and Kafka Connect converters (Avro, JSON Schema,
Protobuf): byte 0 is the magic byte 0, bytes 1-4 the schema id (big-endian), then the encoded value;
Protobuf puts the message indexes (zig-zag varints: a count, then the path of the message in its
file; a single 0 for the first message) between the id and the message.

Anything else is not a framed record: the caller sends it to the DLQ with the reason given here.
"""

from __future__ import annotations

from typing import NamedTuple

MAGIC = 0
HEADER = 5  # magic byte + 4-byte id


class WireError(ValueError):
    """Bytes that are not a Schema Registry frame; the message says what was found."""


class Framed(NamedTuple):
    schema_id: int
    body: memoryview  # the encoded value after the header (and after Protobuf's message indexes)
    indexes: tuple[int, ...] = ()


def frame(data: bytes, side: str = "value") -> Framed:
    """The schema id and body of a framed ``key``/``value`` (``side`` names it in the error)."""
    if len(data) < HEADER:
        raise WireError(f"{side} of {len(data)} bytes is too short for a Schema Registry frame (a magic byte 0 "
                        "and a 4-byte schema id before the encoded value)")
    if data[0] != MAGIC:
        raise WireError(f"{side} does not start with the Schema Registry magic byte 0 (found 0x{data[0]:02x}: "
                        f"not written by a registry serializer or converter; starts {bytes(data[:16])!r})")
    return Framed(int.from_bytes(data[1:HEADER], "big"), memoryview(data)[HEADER:])


def protobuf_frame(data: bytes, side: str = "value") -> Framed:
    """A Protobuf frame: the message indexes follow the id (ProtobufSerializer's ``_encode_varints``:
    zig-zag varints, a count then the indexes; ``[0]`` is written as the single byte 0)."""
    framed = frame(data, side)
    body = framed.body
    count, pos = _zigzag(body, 0, side)
    if count < 0 or count > 64:
        raise WireError(f"{side}: a Protobuf frame's message-index count {count} is not a count")
    indexes = []
    for _ in range(count):
        index, pos = _zigzag(body, pos, side)
        indexes.append(index)
    return Framed(framed.schema_id, body[pos:], tuple(indexes) or (0,))


def _zigzag(buf: memoryview, pos: int, side: str) -> tuple[int, int]:
    """One zig-zag varint at ``pos``: (value, the position after it)."""
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise WireError(f"{side}: the Protobuf message indexes end before the message")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise WireError(f"{side}: a Protobuf message index is not a varint")


def header(schema_id: int) -> bytes:
    """The frame's header for ``schema_id`` (tests and tools that write frames)."""
    return bytes([MAGIC]) + schema_id.to_bytes(4, "big")
