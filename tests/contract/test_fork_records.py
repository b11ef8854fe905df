"""Fork records on every backend that forks (docs/turns.md): identical forks made at
once apply once, and `import --mode replace` of a source keeps its forks' records."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sessions import MemoryStore, Store
from sessions._tools.transfer import export_sessions, import_sessions
from tests.conftest import BACKENDS, make_target
from tests.helpers import msg

Opener = Callable[[], Awaitable[Store[Any]]]


@pytest.fixture(params=[*BACKENDS, "memory"])
async def opener(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens stores on one database (memory: one store, the only way to share it)."""
    if request.param == "memory":
        memory = await MemoryStore.open()

        async def same() -> Store[Any]:
            return memory

        yield same
        await memory.close()
        return
    target = make_target(request.param, tmp_path, request)
    yield target.open
    await target.close_all()


async def commit_turns(store: Store[Any], session_id: str, *sizes: int) -> None:
    session = store.session(session_id)
    for n, size in enumerate(sizes, start=1):
        await session.add_items([msg(f"t{n}.{i}") for i in range(size)])
        await session.commit()


async def test_identical_forks_made_at_once_from_two_stores_apply_once(
    opener: Opener, sid: str
) -> None:
    first, second = await opener(), await opener()
    await commit_turns(first, sid, 2, 1, 3)
    dst = f"{sid}-fork"
    # 12 session objects over two stores on the same database, all forking at once.
    forks = [(first if n % 2 else second).session(sid).fork(dst, at_turn=2) for n in range(12)]
    assert await asyncio.gather(*forks) == [2] * 12
    fork = first.session(dst)
    assert await fork.get_items() == [msg("t1.0"), msg("t1.1"), msg("t2.0")]
    assert [t.items for t in await fork.turns()] == [2, 1]
    for store in (first, second):
        branches = await store.session(sid).branches()
        assert [(b.session_id, b.at_turn) for b in branches] == [(dst, 2)]
    info = await second.session_info(dst)
    assert info is not None and info.item_count == 3


async def test_import_replace_of_a_source_keeps_the_records_of_its_forks(
    opener: Opener, sid: str, tmp_path: Path
) -> None:
    store = await opener()
    await commit_turns(store, sid, 1, 2)
    path = str(tmp_path / "backup.jsonl")
    await export_sessions(store, path, [sid])
    source = store.session(sid)
    assert await source.fork(f"{sid}-a", at_turn=1) == 1
    assert await source.fork(f"{sid}-b") == 2
    result = await import_sessions(store, path, mode="replace")
    assert result.replaced == [sid]
    assert await store.session(sid).get_items() == [msg("t1.0"), msg("t2.0"), msg("t2.1")]
    branches = await store.session(sid).branches()
    assert [(b.session_id, b.at_turn) for b in branches] == [(f"{sid}-a", 1), (f"{sid}-b", 2)]
    assert len(await store.session(f"{sid}-b").get_items()) == 3  # the forks are untouched
    # A plain delete still forgets them (the forks stay, with no source to list them).
    assert await store.delete_session(sid)
    assert await store.session(sid).branches() == []
    assert len(await store.session(f"{sid}-a").get_items()) == 1


async def test_import_replace_of_a_fork_drops_its_own_record(
    opener: Opener, sid: str, tmp_path: Path
) -> None:
    """The export carries no fork record: the replaced session holds the file's
    history, not a copy of its source's turns, so its source no longer lists it."""
    store = await opener()
    await commit_turns(store, sid, 1, 1)
    fork = f"{sid}-f"
    await commit_turns(store, fork, 3)
    path = str(tmp_path / "backup.jsonl")
    await export_sessions(store, path, [fork])
    assert await store.delete_session(fork)
    assert await store.session(sid).fork(fork) == 2
    assert [b.session_id for b in await store.session(sid).branches()] == [fork]
    result = await import_sessions(store, path, mode="replace")
    assert result.replaced == [fork]
    assert [t.items for t in await store.session(fork).turns()] == [3]
    assert await store.session(sid).branches() == []


async def test_delete_session_refuses_a_keep_forks_that_is_not_a_bool(
    opener: Opener, sid: str
) -> None:
    store = await opener()
    with pytest.raises(TypeError, match="keep_forks must be a bool, got str"):
        await store.delete_session(sid, keep_forks="yes")  # type: ignore[arg-type]
