"""The in-memory reference backend for tests: stores share one ``MemoryBackend``; no raw
SQL and no fault injection (its methods say so when asked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessions import BufferedSession, MemoryBackend, MemorySession, MemoryStore, Store
from tests.provision.base import Provision


class MemoryProvision(Provision):
    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.backend = MemoryBackend()
        self.url = "memory://"

    @classmethod
    def for_test(cls, tmp_path: Path, request: pytest.FixtureRequest) -> MemoryProvision:
        return cls()

    @classmethod
    def new(
        cls, directory: str | None = None, *, name: str = "txs_rel", schema: str | None = None
    ) -> MemoryProvision:
        return cls()

    async def open_store(self, **options: Any) -> Store[Any]:
        return await MemoryStore.open(self.backend, **options)

    def session(self, session_id: str, **options: Any) -> BufferedSession:
        return MemorySession(session_id, backend=self.backend, **options)

    def fresh(self, directory: Path) -> MemoryProvision:
        fresh = MemoryProvision()
        fresh.opened = self.opened  # closed with this one's stores
        return fresh
