"""scripts/test.sh starts the services the selected tests need (tests/conftest.py): what a test's
``pytest.mark.services`` marker asks for."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import SERVICE_PORTS, needed_services


class _Item:
    nodeid = "tests/integration/test_x.py::test_y"

    def __init__(self, marker: Any) -> None:
        self.marker = marker

    def get_closest_marker(self, name: str) -> Any:
        return self.marker.mark if name == "services" and self.marker is not None else None


def test_a_marker_names_the_services_and_a_bare_one_means_all() -> None:
    assert needed_services(_Item(pytest.mark.services("mysql"))) == ["mysql"]  # type: ignore[arg-type]
    assert needed_services(_Item(pytest.mark.services)) == list(SERVICE_PORTS)  # type: ignore[arg-type]
    assert needed_services(_Item(None)) == []  # type: ignore[arg-type]
    assert set(SERVICE_PORTS) == {"kafka", "mysql", "elasticsearch", "spark"}


def test_an_unknown_service_is_a_usage_error_naming_the_test() -> None:
    with pytest.raises(pytest.UsageError, match=r"test_x.py::test_y.*'mariadb'.*expected some of"):
        needed_services(_Item(pytest.mark.services("mariadb")))  # type: ignore[arg-type]


def test_every_test_that_uses_a_service_says_so(request: pytest.FixtureRequest) -> None:
    """Each integration/faults module carries the marker (a module without it would start nothing)."""
    from pathlib import Path  # noqa: PLC0415

    root = Path(request.config.rootpath) / "tests"
    modules = [p for folder in ("integration", "faults") for p in (root / folder).rglob("test_*.py")]
    unmarked = [str(p.relative_to(root)) for p in modules if "pytest.mark.services" not in p.read_text()]
    assert not unmarked, f"integration test modules without pytest.mark.services: {unmarked}"
