"""A session object that read a session before it was deleted never writes into the
session created anew under the same id (issue 28, findings 4, 12 and 13).

Row keys and versions restart when a session is deleted and created again. Without a
check, a pop staged against the old history removes a *different* item of the new one,
``commit(expected_version=)`` applies over commits the object never saw, and a late
commit after ``delete_user`` brings the session back without its owner, hidden from
``count_sessions(user_id=)`` and from a second ``delete_user``. Each commit carries the
life of the session its object read (``Batch.incarnation``): once that life is over the
commit is refused with :class:`~sessions.errors.SessionDeletedError`, nothing applied,
until ``rollback()``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sessions import Store
from sessions.errors import CommitConflictError, SessionDeletedError
from tests.conftest import BACKENDS, Target, make_target
from tests.helpers import commit_each, msg


async def texts(store: Store[Any], sid: str) -> list[str]:
    return [item["content"] for item in await store.session(sid).get_items()]


async def _read_a_b(store: Store[Any], sid: str) -> Any:
    """A session object that committed "a" and "b" (one commit each), then read them."""
    old = store.session(sid)
    await commit_each(old, ("a", "b"))
    await old.get_items()
    return old


async def _deleted_then_x_y(store: Store[Any], sid: str) -> None:
    """Delete the session; a new object then commits "x" and "y" (one commit each)."""
    assert await store.delete_session(sid)
    await commit_each(store.session(sid), ("x", "y"))


async def test_a_pop_staged_before_a_deletion_never_removes_an_item_of_the_new_history(
    tstore: Store[Any], sid: str
) -> None:
    old = tstore.session(sid)
    await old.add_items([msg("a"), msg("b")])
    await old.commit()
    assert (await old.pop_item())["content"] == "b"  # staged: key 2 of the old history
    assert await tstore.delete_session(sid)
    new = tstore.session(sid)
    await new.add_items([msg("x"), msg("y")])  # keys restart: y is key 2 now
    await new.commit()
    with pytest.raises(SessionDeletedError, match="was deleted") as caught:
        await old.commit()
    assert isinstance(caught.value, CommitConflictError) and caught.value.outcome_known
    assert await texts(tstore, sid) == ["x", "y"]
    assert old.has_pending  # nothing applied, still staged
    with pytest.raises(SessionDeletedError):
        await old.commit()  # refused again: the object still holds the old history
    await old.rollback()


async def test_expected_version_read_before_a_deletion_is_refused_after_it(
    tstore: Store[Any], sid: str
) -> None:
    old = await _read_a_b(tstore, sid)
    assert old.version == 2
    await _deleted_then_x_y(tstore, sid)  # the new history reaches version 2 again
    await old.add_items([msg("late")])
    with pytest.raises(SessionDeletedError):
        await old.commit(expected_version=2)
    assert await texts(tstore, sid) == ["x", "y"]
    info = await tstore.session_info(sid)
    assert info is not None and info.version == 2
    await old.rollback()


async def test_a_late_commit_after_delete_user_is_refused_and_nothing_escapes_the_erasure(
    tstore: Store[Any], sid: str
) -> None:
    alice = f"alice-{sid}"  # PostgreSQL runs share a schema
    hers = tstore.session(sid)
    hers.set_info(user_id=alice)
    await hers.add_items([msg("hello")])
    await hers.commit()
    await hers.get_items()  # what a Runner does before every turn
    assert await tstore.delete_user(alice) == [sid]
    await hers.add_items([msg("more of hers")])
    with pytest.raises(SessionDeletedError):
        await hers.commit()
    assert await tstore.session_info(sid) is None  # not brought back without its owner
    assert await tstore.count_sessions(user_id=alice) == 0
    assert await tstore.delete_user(alice) == []
    # rollback() forgets the deleted history: the object may then start a new session.
    await hers.rollback()
    await hers.add_items([msg("new start")])
    await hers.commit()
    assert await texts(tstore, sid) == ["new start"]


async def test_rewind_and_undo_from_an_object_that_read_the_deleted_history_are_refused(
    tstore: Store[Any], sid: str
) -> None:
    old = await _read_a_b(tstore, sid)
    await _deleted_then_x_y(tstore, sid)
    with pytest.raises(SessionDeletedError):
        await old.rewind(1)
    with pytest.raises(SessionDeletedError):
        await old.undo_rewind()
    assert await texts(tstore, sid) == ["x", "y"]
    await old.rollback()
    assert await old.rewind(1) == 1  # a read after rollback learns the new history


async def test_objects_that_did_not_read_the_deleted_history_commit_as_before(
    tstore: Store[Any], sid: str
) -> None:
    writer = tstore.session(sid)
    await writer.add_items([msg("a")])
    await writer.commit()  # committed, never read: it knows no history to protect
    assert await tstore.delete_session(sid)
    await writer.add_items([msg("b")])
    await writer.commit()
    reader = tstore.session(sid)
    assert await texts(tstore, sid) == ["b"]
    await reader.get_items()
    await reader.add_items([msg("c")])
    await reader.commit()  # read the present history: commits normally
    assert await texts(tstore, sid) == ["b", "c"]


async def test_a_read_with_nothing_staged_learns_the_new_history(
    tstore: Store[Any], sid: str
) -> None:
    old = tstore.session(sid)
    await old.add_items([msg("a")])
    await old.commit()
    await old.get_items()
    assert await tstore.delete_session(sid)
    assert await old.get_items() == []  # nothing staged: the read adopts the new life
    await old.add_items([msg("b")])
    await old.commit()
    assert await texts(tstore, sid) == ["b"]


@pytest.mark.parametrize("kind", BACKENDS)
async def test_grouped_commits_refuse_only_the_sessions_deleted_under_them(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two stores on one database (two app servers); commits sent together share a
    transaction (group commit): each deleted session's commit is refused alone."""
    target: Target = make_target(kind, tmp_path, request)
    try:
        first, second = await target.open(), await target.open()
        ids = [f"g{i}-{request.node.name[-12:]}" for i in range(8)]
        objects = [first.session(sid) for sid in ids]
        for session in objects:
            await session.add_items([msg("a")])
            await session.commit()
            await session.get_items()
        for sid in ids[::2]:
            assert await second.delete_session(sid)
        for session in objects:
            await session.add_items([msg("b")])
        results = await asyncio.gather(
            *(session.commit() for session in objects), return_exceptions=True
        )
        for index, result in enumerate(results):
            if index % 2 == 0:
                assert isinstance(result, SessionDeletedError), result
            else:
                assert result is None, result
        for index, sid in enumerate(ids):
            assert await texts(second, sid) == ([] if index % 2 == 0 else ["a", "b"])
            assert (await second.session_info(sid) is None) == (index % 2 == 0)
        for session in objects:
            await session.rollback()
    finally:
        await target.close_all()
