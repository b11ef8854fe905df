"""A pass-through backend with hooks, to put a test exactly at a suspension point."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sessions import AdminBackend, Batch, CatalogueBackend, Store

Hook = Callable[[], Awaitable[None]]


class ProxyBackend:
    """Delegates to the real backend; ``before_*`` / ``after_*`` hooks run around calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.atomic = inner.atomic
        self.idempotent = inner.idempotent
        self.before_apply: Hook | None = None
        self.after_apply: Hook | None = None
        self.before_load: Hook | None = None
        self.before_applied: Hook | None = None
        self.apply_calls = 0

    async def load(self, session_id: str, limit: int | None) -> Any:
        if self.before_load is not None:
            await self.before_load()
        return await self.inner.load(session_id, limit)

    async def apply(self, session_id: str, batches: Sequence[Batch]) -> None:
        self.apply_calls += 1
        if self.before_apply is not None:
            await self.before_apply()
        await self.inner.apply(session_id, batches)
        if self.after_apply is not None:
            await self.after_apply()

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> set[str]:
        if self.before_applied is not None:
            await self.before_applied()
        result: set[str] = await self.inner.applied(session_id, batch_ids)
        return result

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class AdminProxyBackend(ProxyBackend):
    """A ProxyBackend over a backend with store operations, which are real methods here:
    since Python 3.12, ``isinstance()`` against a runtime-checkable protocol (how the store
    finds them) looks attributes up statically, so ``__getattr__`` no longer counts."""


def _delegate(name: str) -> Callable[..., Awaitable[Any]]:
    async def method(self: ProxyBackend, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.inner, name)(*args, **kwargs)

    method.__name__ = name
    return method


for _name in [name for name in vars(AdminBackend) if not name.startswith("_")]:
    setattr(AdminProxyBackend, _name, _delegate(_name))


class CatalogueProxyBackend(AdminProxyBackend):
    """An AdminProxyBackend over a backend that keeps the session catalogue too."""


for _name in [name for name in vars(CatalogueBackend) if not name.startswith("_")]:
    setattr(CatalogueProxyBackend, _name, _delegate(_name))


def install_proxy(store: Store[Any]) -> ProxyBackend:
    inner = store.backend
    kind = ProxyBackend
    if isinstance(inner, CatalogueBackend) and isinstance(inner, AdminBackend):
        kind = CatalogueProxyBackend
    elif isinstance(inner, AdminBackend):
        kind = AdminProxyBackend
    proxy = kind(inner)
    store._backend = proxy
    return proxy


def gate_apply(proxy: ProxyBackend) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold every ``apply`` at its start: ``entered`` is set there, ``release`` lets it go."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def gate() -> None:
        entered.set()
        await release.wait()

    proxy.before_apply = gate
    return entered, release
