"""``sessions.memory``: what the conformance suite does not cover (constructors, sharing,
store operations, bad arguments). Its session semantics are checked by
``tests/conformance/`` like every other backend's."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sessions import MemoryBackend, MemorySession, MemoryStore
from sessions.errors import SessionClosedError
from tests.helpers import msg


async def test_a_memory_session_alone_commits_reads_and_is_closed_for_good() -> None:
    async with MemorySession("alone") as session:
        await session.add_items([msg("1")])
        await session.commit()
        assert await session.get_items() == [msg("1")]
    with pytest.raises(SessionClosedError):
        await session.get_items()


async def test_sessions_and_stores_on_one_backend_share_its_history() -> None:
    backend = MemoryBackend()
    writer = MemorySession("shared", backend=backend)
    await writer.add_items([msg("1")])
    await writer.commit()
    await writer.close()
    store = await MemoryStore.open(backend)
    assert await store.session("shared").get_items() == [msg("1")]
    await store.close()  # releases nothing: the backend still holds the history
    assert await MemorySession("shared", backend=backend).get_items() == [msg("1")]
    assert await MemorySession("shared").get_items() == []  # a backend of its own


async def test_store_operations_list_delete_purge_and_prune() -> None:
    store = await MemoryStore.open()
    for sid in ("b", "a", "c"):
        session = store.session(sid)
        await session.add_items([msg(sid), msg(sid)])
        await session.commit()
    assert [i.session_id async for i in store.iter_sessions(page_size=2)] == ["a", "b", "c"]
    info = await store.session_info("b")
    assert info is not None and info.item_count == 2
    assert await store.delete_session("b") is True
    assert await store.delete_session("b") is False
    assert await store.purge(timedelta(days=1)) == []
    assert [i.session_id for i in await store.purge(timedelta(0), dry_run=True)] == ["a", "c"]
    assert [i.session_id for i in await store.purge(timedelta(0), page_size=1)] == ["a", "c"]
    assert await store.list_sessions() == []
    assert await store.prune_batch_records(timedelta(hours=1)) == 0  # their sessions are gone


async def test_pruned_batch_records_leave_history_alone() -> None:
    store = await MemoryStore.open()
    session = store.session("s")
    await session.add_items([msg("1")])
    await session.commit()
    assert await store.prune_batch_records(timedelta(days=1)) == 0
    backend = store.backend
    assert isinstance(backend, MemoryBackend)
    for history in backend._sessions.values():  # two days pass
        history.batches = {b: at - timedelta(days=2) for b, at in history.batches.items()}
    assert await store.prune_batch_records(timedelta(days=1)) == 1
    assert await session.get_items() == [msg("1")]


async def test_read_range_pages_through_a_history() -> None:
    backend = MemoryBackend()
    session = MemorySession("s", backend=backend)
    await session.add_items([msg(str(i)) for i in range(5)])
    await session.commit()
    first = await backend.read_range("s", after=None, limit=2)
    rest = await backend.read_range("s", after=first[-1][0], limit=10)
    assert [text for _, text in first + rest] == [
        f'{{"role":"user","content":"{i}"}}' for i in range(5)
    ]
    assert await backend.read_range("missing", after=None, limit=10) == []


def test_bad_arguments_are_refused_by_name() -> None:
    with pytest.raises(TypeError, match="backend must be a MemoryBackend, got dict"):
        MemoryStore({})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="backend must be a MemoryBackend, got str"):
        MemorySession("s", backend="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store must be a MemoryStore"):
        MemorySession("s", store="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="MemorySession: backend cannot be combined with store="):
        MemorySession("s", backend=MemoryBackend(), store=MemoryStore(MemoryBackend()))
