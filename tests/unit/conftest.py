"""Unit tests need no service and no JVM (``pytest tests/unit`` runs in under a minute): a test that
needs an in-process Spark belongs under tests/spark (marker ``spark``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark() -> None:
    pytest.fail("a unit test asked for Spark: unit tests run without a JVM; move it to tests/spark", pytrace=False)
