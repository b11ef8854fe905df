"""``TransactionalSession`` over the SDK's own ``SQLiteSession`` (a file), for tests: sessions
only (the wrapper has no store, no raw SQL of ours)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessions import BufferedSession, Store, TransactionalSession
from tests.provision.base import Provision


class WrapperProvision(Provision):
    kind = "wrapper"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.url = f"sqlite:///{path}"  # the SDK's file, not a store of ours
        self.inners: list[Any] = []

    @classmethod
    def for_test(cls, tmp_path: Path, request: pytest.FixtureRequest) -> WrapperProvision:
        return cls(tmp_path / "sdk.db")

    @classmethod
    def new(
        cls, directory: str | None = None, *, name: str = "txs_rel", schema: str | None = None
    ) -> WrapperProvision:
        raise NotImplementedError("wrapper: tests make it for_test() only")

    async def prepare(self) -> None:
        return None  # the SDK session creates its tables itself

    async def open_store(self, **options: Any) -> Store[Any]:
        raise NotImplementedError("wrapper: a session wraps an SDK session; there is no store")

    def session(self, session_id: str, **options: Any) -> BufferedSession:
        from agents import SQLiteSession as SDKSQLiteSession

        inner = SDKSQLiteSession(session_id, self.path)
        self.inners.append(inner)
        return TransactionalSession(inner, **options)

    def fresh(self, directory: Path) -> WrapperProvision:
        return WrapperProvision(directory / "sdk-fresh.db")

    async def close_all(self) -> None:
        await super().close_all()
        for inner in self.inners:
            inner.close()
        self.inners.clear()
