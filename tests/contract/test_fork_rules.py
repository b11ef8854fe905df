"""A fork's target must be fresh, and an undo with nothing hidden writes nothing (issue 28,
findings 3, 5, 6 and 14; the rules are in docs/turns.md).

Every test runs on SQLite, PostgreSQL and the memory backend; "two stores" are two
connections to one database (for the memory backend: two stores over one
``MemoryBackend``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sessions import MemoryStore, Store
from sessions.errors import CommitConflictError
from sessions.memory import MemoryBackend
from tests.conftest import BACKENDS, make_target
from tests.helpers import msg

Opener = Callable[[], Awaitable[Store[Any]]]


@pytest.fixture(params=[*BACKENDS, "memory"])
async def opener(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens another store on the one database of the test."""
    if request.param == "memory":
        backend = MemoryBackend()
        opened: list[Store[Any]] = []

        async def open_memory() -> Store[Any]:
            opened.append(await MemoryStore.open(backend))
            return opened[-1]

        yield open_memory
        for each in opened:
            await each.close()
        return
    target = make_target(request.param, tmp_path, request)
    yield target.open
    await target.close_all()


@pytest.fixture
async def db(opener: Opener) -> Store[Any]:
    return await opener()


async def commit_turns(store: Store[Any], session_id: str, count: int, tag: str = "t") -> None:
    """``count`` commits of two items each into ``session_id``."""
    session = store.session(session_id)
    for n in range(count):
        await session.add_items([msg(f"{tag}{n}.a"), msg(f"{tag}{n}.b")])
        await session.commit()


async def committed(
    store: Store[Any], session_id: str, *, clear: bool = False, pop: bool = False
) -> None:
    """A clear or a pop of ``session_id``, committed."""
    session = store.session(session_id)
    if clear:
        await session.clear_session()
    if pop:
        await session.pop_item()
    await session.commit()


async def turn_count(store: Store[Any], session_id: str) -> int:
    return len(await store.session(session_id).turns())


async def branch_of(store: Store[Any], source: str, target: str) -> list[int]:
    return [b.at_turn for b in await store.session(source).branches() if b.session_id == target]


# ------------------------------------------------------------------ undo with nothing hidden


async def with_turns(db: Store[Any], sid: str, turns: int) -> str:
    """Commit ``turns`` turns to ``sid``; the id of a fork target."""
    await commit_turns(db, sid, turns)
    return f"{sid}-dst"


async def forked(db: Store[Any], sid: str, turns: int, at_turn: int | None = None) -> str:
    """``turns`` turns forked into a new target (its id), the fork's count checked."""
    dst = await with_turns(db, sid, turns)
    options = {} if at_turn is None else {"at_turn": at_turn}
    assert await db.session(sid).fork(dst, **options) == turns
    return dst


async def test_undo_with_nothing_hidden_of_a_session_that_does_not_exist_creates_nothing(
    db: Store[Any], sid: str
) -> None:
    assert await db.session(sid).undo_rewind() == 0
    assert await db.session_info(sid) is None
    listed = await db.list_sessions(limit=1, after=sid[:-1])  # sid would come first
    assert sid not in [info.session_id for info in listed]


async def test_undo_with_nothing_hidden_leaves_version_and_updated_at_unchanged(
    db: Store[Any], sid: str
) -> None:
    await commit_turns(db, sid, 2)
    before = await db.session_info(sid)
    assert before is not None
    session = db.session(sid)
    assert await session.undo_rewind() == 0
    after = await db.session_info(sid)
    assert after is not None
    assert (after.version, after.updated_at) == (before.version, before.updated_at)
    # so a writer that read the version before the undo commits without a conflict
    await session.add_items([msg("next")])
    await session.commit(expected_version=before.version)


async def test_undo_after_every_rewind_was_undone_writes_nothing(db: Store[Any], sid: str) -> None:
    await commit_turns(db, sid, 3)
    session = db.session(sid)
    assert await session.rewind(to_turn=1) == 2
    assert await session.undo_rewind() == 2
    before = await db.session_info(sid)
    assert await session.undo_rewind() == 0
    assert await db.session_info(sid) == before


# ------------------------------------------------------------------ the four findings


async def test_two_concurrent_forks_at_different_turns_into_one_target_leave_one_winner(
    opener: Opener, sid: str
) -> None:
    first, second = await opener(), await opener()
    await commit_turns(first, sid, 3)
    dst = f"{sid}-dst"
    results = await asyncio.gather(
        first.session(sid).fork(dst, at_turn=2),
        second.session(sid).fork(dst, at_turn=3),
        return_exceptions=True,
    )
    won = [r for r in results if isinstance(r, int)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1 and len(lost) == 1, results
    assert isinstance(lost[0], CommitConflictError) and dst in str(lost[0])
    assert await turn_count(first, dst) == won[0]
    assert await branch_of(first, sid, dst) == won[0:1]


async def test_forking_again_after_the_fork_was_cleared_is_refused_not_reported_done(
    db: Store[Any], sid: str
) -> None:
    dst = await forked(db, sid, 2)
    await committed(db, dst, clear=True)
    with pytest.raises(CommitConflictError, match="no longer holds its turns"):
        await db.session(sid).fork(dst)
    assert await db.session(dst).get_items() == []


async def test_an_earlier_fork_into_the_target_of_a_later_one_is_refused(
    db: Store[Any], sid: str
) -> None:
    dst = await forked(db, sid, 3, at_turn=3)
    with pytest.raises(CommitConflictError, match="already a fork of session .* at turn 3"):
        await db.session(sid).fork(dst, at_turn=2)
    assert await turn_count(db, dst) == 3
    assert await branch_of(db, sid, dst) == [3]


async def test_a_fork_of_a_changed_history_into_an_emptied_earlier_fork_is_refused(
    db: Store[Any], sid: str
) -> None:
    dst = await forked(db, sid, 2)
    await committed(db, dst, clear=True)
    source = db.session(sid)
    await source.pop_item()
    await source.add_items([msg("changed")])
    await source.commit()
    with pytest.raises(CommitConflictError, match="already a fork"):
        await source.fork(dst)
    assert await db.session(dst).get_items() == []
    assert await branch_of(db, sid, dst) == [2]


# ------------------------------------------------------------------ fresh targets


async def test_identical_concurrent_forks_all_return_the_turn_count_and_write_once(
    opener: Opener, sid: str
) -> None:
    stores = [await opener() for _ in range(3)]
    await commit_turns(stores[0], sid, 2)
    dst = f"{sid}-dst"
    results = await asyncio.gather(*(s.session(sid).fork(dst, at_turn=2) for s in stores))
    assert results == [2, 2, 2]
    assert len(await stores[0].session(dst).get_items()) == 4
    info = await stores[0].session_info(dst)
    assert info is not None and info.version == 2  # one batch per turn, written once


async def test_running_the_same_fork_again_returns_its_count_while_the_target_holds_it(
    db: Store[Any], sid: str
) -> None:
    dst = await forked(db, sid, 2)
    await commit_turns(db, dst, 1, tag="own")  # the fork went on: it still holds turns 1-2
    before = await db.session_info(dst)
    assert await db.session(sid).fork(dst) == 2
    assert await db.session_info(dst) == before


async def test_running_the_same_fork_again_after_the_target_lost_a_turn_is_refused(
    db: Store[Any], sid: str
) -> None:
    dst = await forked(db, sid, 2)
    assert await db.session(dst).rewind(to_turn=1) == 1
    with pytest.raises(CommitConflictError, match="no longer holds its turns"):
        await db.session(sid).fork(dst)
    assert await db.session(dst).undo_rewind() == 1
    await committed(db, dst, pop=True)
    with pytest.raises(CommitConflictError, match="no longer holds its turns"):
        await db.session(sid).fork(dst)


async def test_a_fork_into_a_session_with_a_catalogue_entry_keeps_the_entry(
    db: Store[Any], sid: str
) -> None:
    dst = await with_turns(db, sid, 2)
    target = db.session(dst)
    target.set_info(title="Edited", tags=["x"], user_id="ada")
    await target.commit()
    assert await db.session(sid).fork(dst) == 2
    info = await db.session_info(dst)
    assert info is not None and (info.title, info.tags, info.user_id) == ("Edited", ("x",), "ada")
    assert info.item_count == 4


async def test_a_fork_into_a_cleared_ordinary_session_is_allowed(db: Store[Any], sid: str) -> None:
    dst = await with_turns(db, sid, 2)
    await commit_turns(db, dst, 1, tag="old")
    await committed(db, dst, clear=True)
    assert await db.session(sid).fork(dst) == 2
    assert await turn_count(db, dst) == 2 and await branch_of(db, sid, dst) == [2]


async def test_a_fork_into_a_session_with_hidden_turns_is_refused(db: Store[Any], sid: str) -> None:
    dst = await with_turns(db, sid, 2)
    await commit_turns(db, dst, 1, tag="old")
    assert await db.session(dst).rewind(to_turn=0) == 1
    with pytest.raises(CommitConflictError, match="hidden"):
        await db.session(sid).fork(dst)
    assert await db.session(dst).get_items() == []
    assert await db.session(dst).undo_rewind() == 1  # the hidden turn is still there


async def test_a_fork_into_a_session_holding_items_names_the_target_and_the_reason(
    db: Store[Any], sid: str
) -> None:
    dst = await with_turns(db, sid, 2)
    await commit_turns(db, dst, 1, tag="old")
    with pytest.raises(CommitConflictError, match=f"into session '{dst}' refused: it already"):
        await db.session(sid).fork(dst)
    assert await turn_count(db, dst) == 1 and await branch_of(db, sid, dst) == []


@pytest.mark.parametrize("how", ["delete_session", "delete_user", "purge"])
async def test_a_fork_into_the_id_of_a_deleted_fork_is_allowed(
    db: Store[Any], sid: str, how: str
) -> None:
    dst = await forked(db, sid, 3, at_turn=3)
    fork = db.session(dst)
    fork.set_info(user_id=f"{sid}-user", ttl=timedelta(milliseconds=1))
    await fork.commit()
    if how == "delete_session":
        assert await db.delete_session(dst)
    elif how == "delete_user":
        assert await db.delete_user(f"{sid}-user") == [dst]
    else:
        for _ in range(500):  # until its 1 ms TTL has elapsed (no other session has one)
            if dst in [info.session_id for info in await db.purge()]:
                break
            await asyncio.sleep(0.01)
    assert await db.session_info(dst) is None
    assert await db.session(sid).fork(dst, at_turn=2) == 2
    assert await turn_count(db, dst) == 2 and await branch_of(db, sid, dst) == [2]


async def test_concurrent_forks_of_two_sources_into_one_target_leave_exactly_the_winners_turns(
    opener: Opener, sid: str
) -> None:
    stores = [await opener() for _ in range(3)]
    one, two, dst = f"{sid}-one", f"{sid}-two", f"{sid}-dst"
    await commit_turns(stores[0], one, 3, tag="one")
    await commit_turns(stores[0], two, 2, tag="two")
    plans = [(one, 2), (one, 3), (two, 2)]
    results = await asyncio.gather(
        *(s.session(src).fork(dst, at_turn=n) for s, (src, n) in zip(stores, plans, strict=True)),
        return_exceptions=True,
    )
    winners = [plan for plan, r in zip(plans, results, strict=True) if isinstance(r, int)]
    assert len(winners) == 1, results
    assert all(isinstance(r, (int, CommitConflictError)) for r in results), results
    source, n = winners[0]
    expected = (await stores[0].session(source).get_items())[: 2 * n]
    assert await stores[1].session(dst).get_items() == expected
    assert await branch_of(stores[2], source, dst) == [n]
    assert await branch_of(stores[2], two if source == one else one, dst) == []


async def test_deleting_a_source_drops_the_fork_records_naming_it_on_every_backend(
    db: Store[Any], sid: str
) -> None:
    dst = await forked(db, sid, 2)
    assert await db.delete_session(sid)
    await commit_turns(db, sid, 1, tag="new")  # the same id, a new session
    assert await db.session(sid).branches() == []
    assert await turn_count(db, dst) == 2  # the fork keeps its items
