"""What the suite runs against: a way to open sessions on one storage, and optional extras."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from .._engine.session import BufferedSession
from .._engine.store import Store
from .._model.backend import Backend, Batch

__all__ = ["Spawn", "Subject", "WriteHooks", "store_subject", "wrapper_subject"]

Hook = Callable[[], Awaitable[None]]
SessionFactory = Callable[[str], AsyncIterator[Any]]
HookedFactory = Callable[[str, "WriteHooks"], AsyncIterator[Any]]
Row = tuple[int, str]


@dataclass(frozen=True)
class WriteHooks:
    """Run around every write a session sends to its storage (set by the suite).

    ``before`` can hold a write in flight (to cancel its caller there); ``after`` runs
    once the write is applied and can raise, so that the caller sees a failure whose
    outcome it cannot know (a reply lost after the commit).
    """

    before: Hook | None = None
    after: Hook | None = None


@dataclass(frozen=True)
class Spawn:
    """How a child process opens the same subject: ``factory(*args)`` returns it.

    ``factory`` is ``"package.module:function"``, importable in a child started with
    this interpreter and this ``sys.path``; ``args`` are strings (a file path, a DSN).
    """

    factory: str
    args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        module, _, attr = self.factory.partition(":")
        if not module or not attr:
            raise ValueError(f"Spawn.factory must be 'module:function', got {self.factory!r}")
        if not all(isinstance(arg, str) for arg in self.args):
            raise TypeError(f"Spawn.args must be strings, got {self.args!r}")


@dataclass(frozen=True)
class Subject:
    """A session implementation under test, on one storage that persists for the run.

    ``sessions`` is an async generator function: given a session id it opens a *fresh
    handle* on the subject's storage (its own connection, as another process would have),
    yields a session object, and closes what it opened after the ``yield``. Two handles
    on one id must see the same stored history.

    ``hooked`` does the same with :class:`WriteHooks` called around each write; checks
    that need to hold a commit in flight or lose its reply run only when it is given
    (:func:`store_subject` and :func:`wrapper_subject` provide it). ``spawn`` says how a
    child process opens the subject; without it cross-process ordering is not offered.
    """

    name: str
    sessions: SessionFactory
    hooked: HookedFactory | None = None
    spawn: Spawn | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Subject name must be a non-empty str, got {self.name!r}")
        if not callable(self.sessions):
            raise TypeError(f"Subject sessions must be an async generator function: {self.name}")
        if self.hooked is not None and not callable(self.hooked):
            raise TypeError(f"Subject hooked must be an async generator function: {self.name}")
        if self.spawn is not None and not isinstance(self.spawn, Spawn):
            raise TypeError(f"Subject spawn must be a Spawn, got {type(self.spawn).__name__}")

    def open(self, session_id: str) -> AbstractAsyncContextManager[Any]:
        """A fresh handle on ``session_id`` (``async with subject.open(id) as session``)."""
        return asynccontextmanager(self.sessions)(session_id)

    def open_hooked(self, session_id: str, hooks: WriteHooks) -> AbstractAsyncContextManager[Any]:
        """A fresh handle whose writes run ``hooks``; only when ``hooked`` is given."""
        if self.hooked is None:
            raise TypeError(f"subject {self.name!r} has no hooked factory")
        return asynccontextmanager(self.hooked)(session_id, hooks)


# --------------------------------------------------------------- our Backend protocol


class _HookedBackend:
    """A backend that runs :class:`WriteHooks` around ``apply`` of the one it wraps."""

    def __init__(self, inner: Backend, hooks: WriteHooks) -> None:
        self._inner = inner
        self._hooks = hooks
        self.atomic = inner.atomic
        self.idempotent = inner.idempotent
        self.system = getattr(inner, "system", "other")

    async def load(self, session_id: str, limit: int | None) -> list[Row]:
        return await self._inner.load(session_id, limit)

    async def apply(self, session_id: str, batches: Sequence[Batch]) -> None:
        if self._hooks.before is not None:
            await self._hooks.before()
        await self._inner.apply(session_id, batches)
        if self._hooks.after is not None:
            await self._hooks.after()

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> set[str]:
        return await self._inner.applied(session_id, batch_ids)

    async def close(self) -> None:
        """The wrapped backend belongs to its own store, which closes it."""


class _HookedStore(Store[BufferedSession]):
    session_class = BufferedSession


def store_subject(
    name: str,
    open_store: Callable[[], Awaitable[Store[Any]]],
    *,
    spawn: Spawn | None = None,
    description: str = "",
) -> Subject:
    """A subject for a :class:`~sessions.Store` (any backend on the ``Backend`` protocol).

    ``open_store()`` opens a new store on the subject's storage; each handle gets one
    and closes it. Hooked handles are plain :class:`~sessions.BufferedSession` objects on
    a store around the same backend, with the hooks around ``Backend.apply``.
    """

    async def sessions(session_id: str) -> AsyncIterator[Any]:
        store = await open_store()
        try:
            session = store.session(session_id)
            try:
                yield session
            finally:
                await session.close()
        finally:
            await store.close()

    async def hooked(session_id: str, hooks: WriteHooks) -> AsyncIterator[Any]:
        store = await open_store()
        try:
            around = _HookedStore(
                _HookedBackend(store.backend, hooks),
                retry=store.retry,
                commit_timeout=store.commit_timeout,
            )
            session = around.session(session_id)
            try:
                yield session
            finally:
                await session.close()
                await around.close()
        finally:
            await store.close()

    return Subject(name, sessions, hooked, spawn, description)


# --------------------------------------------------------------- any SDK session, wrapped


class _HookedInner:
    """An SDK session whose mutating calls run :class:`WriteHooks` around them."""

    def __init__(self, inner: Any, hooks: WriteHooks) -> None:
        self._inner = inner
        self._hooks = hooks
        self.session_id: str = inner.session_id
        self.session_settings = getattr(inner, "session_settings", None)

    async def _write(self, call: Callable[[], Awaitable[Any]]) -> Any:
        if self._hooks.before is not None:
            await self._hooks.before()
        result = await call()
        if self._hooks.after is not None:
            await self._hooks.after()
        return result

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items: list[Any] = await self._inner.get_items(limit)
        return items

    async def add_items(self, items: list[Any]) -> None:
        await self._write(lambda: self._inner.add_items(items))

    async def pop_item(self) -> Any:
        return await self._write(self._inner.pop_item)

    async def clear_session(self) -> None:
        await self._write(self._inner.clear_session)


def wrapper_subject(
    name: str,
    open_inner: SessionFactory,
    *,
    spawn: Spawn | None = None,
    description: str = "",
) -> Subject:
    """A subject for :class:`~sessions.TransactionalSession` over any SDK session.

    ``open_inner`` is an async generator function that opens (and afterwards closes) the
    wrapped session for a session id. Hooked handles wrap it in a proxy that runs the
    hooks around ``add_items``, ``pop_item`` and ``clear_session``.
    """
    from ..wrapper import TransactionalSession

    inner_cm = asynccontextmanager(open_inner)

    async def sessions(session_id: str) -> AsyncIterator[Any]:
        async with inner_cm(session_id) as inner:
            session = TransactionalSession(inner)
            try:
                yield session
            finally:
                await session.close()

    async def hooked(session_id: str, hooks: WriteHooks) -> AsyncIterator[Any]:
        async with inner_cm(session_id) as inner:
            session = TransactionalSession(_HookedInner(inner, hooks))
            try:
                yield session
            finally:
                await session.close()

    return Subject(name, sessions, hooked, spawn, description)
