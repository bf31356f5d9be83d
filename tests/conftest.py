"""Marks every test by its tier: tests/unit -> unit (no processes), tests/e2e -> e2e (real cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(str(item.fspath)).relative_to(HERE).parts[0]
        if tier in ("unit", "e2e"):
            item.add_marker(getattr(pytest.mark, tier))
