"""Fixtures of the Temporal tests: one dev server for the whole test session (started
on a free port, its own database file, killed at the end), a client per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.temporal.need import missing


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address of a ``temporal server start-dev`` running for this test session."""
    if missing() is not None:
        pytest.skip("needs the temporal extra")  # the modules already skipped or failed
    from tests.temporal.server import DevServer

    server = DevServer(tmp_path_factory.mktemp("temporal")).start()
    try:
        yield server.address
    finally:
        server.stop()


@pytest.fixture
async def client(temporal_address: str) -> AsyncIterator[Any]:
    from tests.temporal.harness import connect

    yield await connect(temporal_address)


@pytest.fixture
def worker_log(tmp_path: Path) -> Path:
    return tmp_path / "workers.log"
