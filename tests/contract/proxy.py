"""A pass-through backend with hooks, to put a test exactly at a suspension point."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sessions import AdminBackend, Batch, CatalogueBackend, Store
from sessions._model.backend import BranchBackend, RunStateBackend, TurnBackend

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


def _delegate(name: str) -> Callable[..., Awaitable[Any]]:
    async def method(self: ProxyBackend, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.inner, name)(*args, **kwargs)

    method.__name__ = name
    return method


#: The optional protocols a store looks for with ``isinstance()``. Since Python 3.12 that
#: looks attributes up statically, so ``__getattr__`` no longer counts: a proxy gets real
#: delegating methods for each protocol its inner backend implements.
OPTIONAL_PROTOCOLS: tuple[type, ...] = (
    AdminBackend,
    CatalogueBackend,
    RunStateBackend,
    TurnBackend,
    BranchBackend,
)


def proxy_class(inner: Any) -> type[ProxyBackend]:
    """A :class:`ProxyBackend` subclass implementing every optional protocol of ``inner``."""
    protocols = [p for p in OPTIONAL_PROTOCOLS if isinstance(inner, p)]
    if not protocols:
        return ProxyBackend
    methods = {
        name: _delegate(name)
        for protocol in protocols
        for name, value in vars(protocol).items()
        if not name.startswith("_") and callable(value)
    }
    name = "ProxyBackend_" + "_".join(p.__name__ for p in protocols)
    return type(name, (ProxyBackend,), methods)


def install_proxy(store: Store[Any]) -> ProxyBackend:
    inner = store.backend
    proxy = proxy_class(inner)(inner)
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
