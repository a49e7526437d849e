"""connectors/base64_columns.py against the standard library, value for value."""

from __future__ import annotations

import base64
import binascii
import random

import pyarrow as pa
import pytest

from connectors import base64_columns


def _values(seed: int, n: int = 300) -> list[bytes | None]:
    rng = random.Random(seed)
    return [None if rng.random() < 0.1 else bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 2, 3, 4, 5, 21, 64])))
            for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_encode_and_decode_are_the_standard_librarys(seed: int) -> None:
    values = _values(seed)
    texts = [None if v is None else base64.b64encode(v).decode("ascii") for v in values]
    assert base64_columns.encode(pa.array(values, pa.binary())).to_pylist() == texts
    assert base64_columns.decode(pa.array(texts, pa.string())).to_pylist() == values
    sliced = pa.array(texts, pa.string()).slice(7, 50)  # a slice reads its own values only
    assert base64_columns.decode(sliced).to_pylist() == values[7:57]
    assert base64_columns.encode(pa.array(values, pa.binary()).slice(3, 20)).to_pylist() == texts[3:23]
    assert base64_columns.decode(pa.chunked_array([texts[:10], texts[10:]], pa.string())).to_pylist() == values


@pytest.mark.parametrize("text", ["QQ=", "Q===", "QQ=A", "QQ==QQ==", "QU*D", "QUJD\n", "=QUJ", "QUJDRA=="[:-1]])
def test_what_is_not_padded_standard_base64_is_left_to_the_caller(text: str) -> None:
    """None, where the standard library's strict reading refuses it (the caller reads value by value
    and says which value is wrong); "QR==" (non-zero unused bits) both accept."""
    with pytest.raises((binascii.Error, ValueError)):
        base64.b64decode(text, validate=True)
    assert base64_columns.decode(pa.array(["QUJD", text], pa.string())) is None
    assert base64_columns.decode(pa.array(["QR=="])).to_pylist() == [base64.b64decode("QR==", validate=True)]
