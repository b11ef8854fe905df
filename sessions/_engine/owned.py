"""The stores a one-liner session opens for itself: one per event loop.

``SQLiteSession(session_id, "chat.db")`` and ``PostgresSession(session_id, dsn)`` own
their database handle. A database handle belongs to one event loop (an asyncpg pool,
the futures a SQLite worker completes), but such a session object may be shared by
threads that each run an event loop of their own (a sync web framework calling
``Runner.run_sync`` from a thread pool). So the session opens one store per loop, on
first use there. Each store is closed:

* when its loop shuts down its async generators, if the store was opened before the
  loop first did so: at the end of ``asyncio.run()``, and at the end of the first
  ``Runner.run_sync()`` call of a thread (which flushes them). So a thread's pool or
  connection does not outlive the ``asyncio.run()`` it was made in; the next use on a
  loop whose store was closed this way opens a new one;
* otherwise by the session's ``close()``: on the calling loop directly; on a loop that
  is running in another thread, by scheduling the close there; on an idle loop (a
  thread between two ``run_sync`` calls), by running that loop in a helper thread for
  the close; on a closed loop, from the calling loop as well as the backend can
  (SQLite fully; an asyncpg pool is only terminated, its sockets closed when freed).

A store that must not be duplicated (a private in-memory database) is opened once and
refuses every other loop with :class:`~sessions.errors.WrongEventLoopError`.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from ..errors import WrongEventLoopError
from .locks import CrossLoopLock
from .resource import call_name, loop_name
from .store import Store

__all__ = ["OwnedStores"]

logger = logging.getLogger("sessions")


async def _until_shutdown(close: Callable[[], Awaitable[None]]) -> AsyncGenerator[None, None]:
    """Suspended at its ``yield`` until its loop shuts down its async generators."""
    try:
        yield
    finally:
        await close()


class OwnedStores:
    """Stores opened by ``factory``, one per event loop (or one in all, ``single_loop``)."""

    def __init__(
        self,
        factory: Callable[[], Awaitable[Store[Any]]],
        *,
        describe: Callable[[], str],
        single_loop: str | None = None,
        close_timeout: float,
    ) -> None:
        self._factory = factory
        self._describe = describe
        #: Why one store must serve every use (``None``: one store per loop is fine).
        self._single_loop = single_loop
        self._close_timeout = close_timeout
        self._stores: dict[asyncio.AbstractEventLoop, Store[Any]] = {}
        self._hooks: dict[asyncio.AbstractEventLoop, AsyncGenerator[None, None]] = {}
        self._mutex = threading.Lock()
        self._opening = CrossLoopLock()

    def current(self) -> Store[Any] | None:
        """The store of the running loop (any, outside a loop); no I/O."""
        with self._mutex:
            try:
                return self._stores.get(asyncio.get_running_loop())
            except RuntimeError:
                return next(iter(self._stores.values()), None)

    def all(self) -> list[Store[Any]]:
        with self._mutex:
            return list(self._stores.values())

    async def get(self, operation: str) -> Store[Any]:
        """The running loop's store, opened on first use."""
        loop = asyncio.get_running_loop()
        store = self._stores.get(loop)
        if store is not None:
            return store
        async with self._opening:
            store = self._stores.get(loop)
            if store is None:
                self._refuse_other_loop(operation, loop)
                store = await self._factory()
                with self._mutex:
                    self._stores[loop] = store
                # A loop that already shut its async generators down (run_sync's loop
                # after its first call) warns about new ones: no hook there.
                if self._single_loop is None and not getattr(
                    loop, "_asyncgens_shutdown_called", False
                ):
                    await self._watch(loop)
        return store

    def _refuse_other_loop(self, operation: str, loop: asyncio.AbstractEventLoop) -> None:
        if self._single_loop is None or not self._stores:
            return
        (first,) = self._stores
        raise WrongEventLoopError(
            f"{call_name(operation)} on {self._describe()} from event loop {loop_name(loop)}, but "
            f"{self._single_loop} was opened on event loop {loop_name(first)} and cannot be "
            "shared with another loop"
        )

    async def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Close ``loop``'s store when the loop shuts down its async generators."""
        hook = _until_shutdown(lambda: self._close_on(loop))
        # Started here, so the loop knows it (its firstiter hook). Its finalizer is ours:
        # the loop's would fail if the generator is collected after the loop closed.
        previous = sys.get_asyncgen_hooks()
        sys.set_asyncgen_hooks(firstiter=previous.firstiter, finalizer=_finalizer(loop))
        try:
            started = hook.asend(None)
        finally:
            sys.set_asyncgen_hooks(*previous)
        await started
        with self._mutex:
            self._hooks[loop] = hook

    async def _close_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """The hook's work: close ``loop``'s store, unless ``close_all`` took it."""
        with self._mutex:
            store = self._stores.pop(loop, None)
            self._hooks.pop(loop, None)
        if store is not None:
            await store.close()

    async def close_all(self) -> None:
        """Close every store (see the module docstring for where each one is closed)."""
        with self._mutex:
            stores = list(self._stores.items())
            hooks = dict(self._hooks)
            self._stores.clear()
            self._hooks.clear()
        for loop, store in stores:
            try:
                await self._close(loop, store, hooks.get(loop))
            except Exception as exc:  # noqa: BLE001 - logged; the other stores still close
                logger.warning(
                    "%s: closing its store of event loop %s failed: %s: %s",
                    self._describe(),
                    loop_name(loop),
                    type(exc).__name__,
                    exc,
                )

    async def _close(
        self,
        loop: asyncio.AbstractEventLoop,
        store: Store[Any],
        hook: AsyncGenerator[None, None] | None,
    ) -> None:
        """Close ``store`` (and finish its hook) where it can be closed."""
        if loop is asyncio.get_running_loop() or loop.is_closed():
            await _finish(store, hook)
        elif loop.is_running():
            done = asyncio.run_coroutine_threadsafe(_finish(store, hook), loop)
            await asyncio.wait_for(asyncio.wrap_future(done), self._close_timeout)
        else:  # idle: run it for the close, in a helper thread
            await asyncio.wait_for(
                asyncio.to_thread(loop.run_until_complete, _finish(store, hook)),
                self._close_timeout,
            )


async def _finish(store: Store[Any], hook: AsyncGenerator[None, None] | None) -> None:
    if hook is not None:
        await hook.aclose()  # runs _close_on, which finds the store no longer listed
    await store.close()


def _finalizer(loop: asyncio.AbstractEventLoop) -> Callable[[Any], None]:
    """What to do with a watching generator collected while still waiting."""

    def finalize(generator: Any) -> None:
        if loop.is_closed():
            return  # nothing can run it any more; its store is left to close()
        try:
            loop.call_soon_threadsafe(lambda: loop.create_task(generator.aclose()))
        except RuntimeError:  # closed meanwhile
            pass

    return finalize
