"""Fixtures of the reliability suite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import Target, make_target


@pytest.fixture
async def pg(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    """The PostgreSQL target alone, for scenarios that only exist there (rather than a
    ``target`` parametrized over every backend and skipped for SQLite)."""
    target = make_target("postgres", tmp_path, request)
    yield target
    await target.close_all()
