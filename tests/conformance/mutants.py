"""Sessions and backends that each break one promise: the suite must catch every one.

``ListSession`` is a correct, minimal SDK session over a dict its handles share; each
mutant changes one method of it, or of ``MemoryBackend``, or of a buffered session.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sessions import Batch, MemoryBackend, MemoryStore
from sessions.testing import Spawn, Subject, WriteHooks, store_subject


class ListSession:
    """Correct: the SDK ``Session`` protocol over ``data[session_id]``, copying items."""

    def __init__(self, session_id: str, data: dict[str, list[Any]]) -> None:
        self.session_id = session_id
        self._data = data

    @property
    def history(self) -> list[Any]:
        return self._data.setdefault(self.session_id, [])

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items = self.history if limit is None else self.history[-limit:] if limit else []
        return copy.deepcopy(items)

    async def add_items(self, items: list[Any]) -> None:
        self.history.extend(copy.deepcopy(items))

    async def pop_item(self) -> Any:
        return self.history.pop() if self.history else None

    async def clear_session(self) -> None:
        self.history.clear()


class LimitFromTheStart(ListSession):
    async def get_items(self, limit: int | None = None) -> list[Any]:
        return copy.deepcopy(self.history[:limit])


class PopsTheOldest(ListSession):
    async def pop_item(self) -> Any:
        return self.history.pop(0) if self.history else None


class ClearsEverySession(ListSession):
    async def clear_session(self) -> None:
        self._data.clear()


class KeepsTheCallersDicts(ListSession):
    async def add_items(self, items: list[Any]) -> None:
        self.history.extend(items)


class InterleavesItems(ListSession):
    """Appends one item at a time, yielding in between, like a driver doing one
    INSERT per item outside a transaction."""

    async def add_items(self, items: list[Any]) -> None:
        for item in copy.deepcopy(items):
            await asyncio.sleep(0)
            self.history.append(item)


class WritesThrough(ListSession):
    """Has the buffered API, but every write is stored at once."""

    has_pending = False

    async def commit(self) -> None:
        pass

    async def rollback(self) -> None:
        pass

    def transaction(self) -> Any:
        return _Nothing()


class _Nothing:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def list_subject(session_class: type[ListSession] = ListSession) -> Subject:
    data: dict[str, list[Any]] = {}

    async def sessions(session_id: str) -> AsyncIterator[Any]:
        yield session_class(session_id, data)

    return Subject(session_class.__name__, sessions)


# ------------------------------------------------------------------ backends


class NonAtomicBackend(MemoryBackend):
    """Claims atomic=True but applies batch by batch: a later failure keeps the earlier."""

    async def apply(self, session_id: str, batches: Sequence[Batch]) -> None:
        for batch in batches:
            await super().apply(session_id, [batch])


class ForgetfulBackend(MemoryBackend):
    """Claims idempotent=True but forgets batch ids."""

    async def apply(self, session_id: str, batches: Sequence[Batch]) -> None:
        fresh = [dataclasses.replace(b, batch_id=uuid.uuid4().hex) for b in batches]
        await super().apply(session_id, fresh)

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> set[str]:
        return set()


class HonestNonAtomicBackend(MemoryBackend):
    """Declares what it does not offer."""

    atomic = False
    idempotent = False


def backend_subject(backend: MemoryBackend) -> Subject:
    return store_subject(type(backend).__name__, lambda: MemoryStore.open(backend))


# ------------------------------------------------------------------ buffered sessions


class UnshieldedCommit:
    """A real buffered session whose commit() leaves as soon as its caller is cancelled."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def commit(self) -> None:
        await asyncio.shield(asyncio.ensure_future(self._inner.commit()))


def unshielded_subject() -> Subject:
    backend = MemoryBackend()
    real = store_subject("memory", lambda: MemoryStore.open(backend))

    async def sessions(session_id: str) -> AsyncIterator[Any]:
        async with real.open(session_id) as session:
            yield UnshieldedCommit(session)

    async def hooked(session_id: str, hooks: WriteHooks) -> AsyncIterator[Any]:
        async with real.open_hooked(session_id, hooks) as session:
            yield UnshieldedCommit(session)

    return Subject("UnshieldedCommit", sessions, hooked)


def without_hooks(subject: Subject) -> Subject:
    return Subject(f"{subject.name} without hooks", subject.sessions)


# ------------------------------------------------------------------ processes


def broken_child() -> Subject:
    """What a child process builds: a subject whose sessions cannot be opened."""

    async def sessions(session_id: str) -> AsyncIterator[Any]:
        raise RuntimeError("this subject cannot be opened in another process")
        yield  # an async generator, as a subject's factory must be

    return Subject("broken child", sessions)


def spawning_subject() -> Subject:
    """Correct in this process; every child it spawns fails to open the session."""
    base = backend_subject(MemoryBackend())
    return Subject("broken children", base.sessions, base.hooked, Spawn(f"{__name__}:broken_child"))
