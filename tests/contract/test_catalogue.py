"""The session catalogue on every backend: set_info() with commits, filtered listing and
counts, versions and commit(expected_version=), TTL purge, delete_user (docs/catalogue.md)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from sessions import Store
from sessions.errors import (
    CommitConflictError,
    CommitVersionConflictError,
    SessionError,
    StorageError,
)
from tests.conftest import Target
from tests.contract import raw
from tests.helpers import age, commit_one, msg

# ----------------------------------------------------------------------------- set_info


async def test_set_info_is_staged_and_applied_by_the_next_commit_with_the_items(
    store: Store[Any], sid: str
) -> None:
    session = store.session(sid)
    session.set_info(
        user_id="alice", title="Trip", tags=["travel", "b", "travel"], metadata={"k": 1}
    )
    await session.add_items([msg("hi")])
    assert session.pending.info and session.pending.items == 1
    assert await store.session_info(sid) is None  # staged only
    await session.commit()
    info = await store.session_info(sid)
    assert info is not None and info.item_count == 1
    assert (info.user_id, info.title, info.tags, info.metadata) == (
        "alice",
        "Trip",
        ("b", "travel"),
        {"k": 1},
    )


async def test_set_info_alone_is_a_commit_and_fields_not_given_stay(
    store: Store[Any], sid: str
) -> None:
    session = store.session(sid)
    session.set_info(user_id="bob", title="First", tags={"x"}, ttl=timedelta(hours=2))
    await session.commit()  # nothing but the info
    info = await store.session_info(sid)
    assert info is not None and info.item_count == 0 and info.user_id == "bob"
    session.set_info(title="Second")
    session.set_info(tags=None, metadata={"n": [1, 2]})  # merged with the staged change
    await session.commit()
    info = await store.session_info(sid)
    assert info is not None
    assert (info.user_id, info.title, info.tags, info.metadata, info.ttl) == (
        "bob",
        "Second",
        (),
        {"n": [1, 2]},
        timedelta(hours=2),
    )
    assert await store.list_sessions(tag="x", user_id="bob") == []
    session.set_info(user_id=None, title=None, metadata=None, ttl=None)
    await session.commit()
    info = await store.session_info(sid)
    assert info is not None and (info.user_id, info.title, info.metadata, info.ttl) == (
        None,
        None,
        None,
        None,
    )


async def test_a_version_conflict_applies_neither_the_entry_nor_the_items_and_keeps_both_staged(
    store: Store[Any], sid: str
) -> None:
    """The condition is checked before anything is written: this shows the staging,
    not atomicity (``test_atomic_with_the_turn.py`` fails the transaction mid-write)."""
    await commit_one(store, sid, user_id="carol")
    stale = store.session(sid)
    await stale.get_items()
    await commit_one(store, sid)  # another writer moves the version on
    stale.set_info(user_id="mallory", tags={"t"})
    await stale.add_items([msg("late")])
    with pytest.raises(CommitVersionConflictError):
        await stale.commit(expected_version=stale.version)
    info = await store.session_info(sid)
    assert info is not None and info.user_id == "carol" and info.tags == () and info.item_count == 2
    assert stale.pending.info  # still staged
    await stale.rollback()


async def test_rollback_discards_a_staged_set_info(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    session.set_info(user_id="dave")
    await session.rollback()
    assert not session.has_pending
    await session.commit()
    assert await store.session_info(sid) is None


@pytest.mark.parametrize(
    ("fields", "error", "words"),
    [
        ({}, TypeError, "at least one"),
        ({"user_id": 5}, TypeError, "user_id must be a str"),
        ({"user_id": ""}, ValueError, "user_id must not be empty"),
        ({"user_id": "u" * 256}, ValueError, "at most 255"),
        ({"title": "a\x00b"}, ValueError, "title must not contain NUL"),
        ({"tags": "one"}, TypeError, "tags must be a collection"),
        ({"tags": ["x" * 65]}, ValueError, "each tag is 65 characters"),
        ({"tags": [str(i) for i in range(33)]}, ValueError, "at most 32"),
        ({"metadata": [1]}, TypeError, "metadata must be a dict"),
        ({"metadata": {"f": float("nan")}}, ValueError, "metadata is not JSON"),
        ({"metadata": {"o": object()}}, ValueError, "metadata is not JSON"),
        ({"metadata": {"big": "x" * 70000}}, ValueError, "at most 65536"),
        ({"ttl": 30}, TypeError, "ttl must be a timedelta"),
        ({"ttl": timedelta(0)}, ValueError, "ttl must be a positive"),
    ],
)
async def test_set_info_refuses_bad_values_naming_them_and_stages_nothing(
    store: Store[Any], sid: str, fields: dict[str, Any], error: type[Exception], words: str
) -> None:
    session = store.session(sid)
    with pytest.raises(error, match=words):
        session.set_info(**fields)
    assert not session.has_pending


# ----------------------------------------------------------------------------- listing


async def test_list_and_count_filter_by_user_tag_and_updated_after_page_by_page(
    store: Store[Any], target: Target, sid: str
) -> None:
    user, other = f"{sid}-u", f"{sid}-o"
    ids = [f"{sid}-{i}" for i in range(6)]
    for i, session_id in enumerate(ids):
        tags = {"even"} if i % 2 == 0 else {"odd"}
        await commit_one(store, session_id, user_id=user if i < 5 else other, tags=tags | {sid})
    await age(target, ids[0], 3600)
    mine = await store.list_sessions(user_id=user, limit=2)
    assert [i.session_id for i in mine] == ids[:2]
    rest = await store.list_sessions(user_id=user, limit=10, after=mine[-1].session_id)
    assert [i.session_id for i in rest] == ids[2:5]
    assert await store.count_sessions(user_id=user) == 5
    even = await store.list_sessions(user_id=user, tag="even")
    assert [i.session_id for i in even] == [ids[0], ids[2], ids[4]]
    assert await store.count_sessions(tag=sid) == 6
    recent = datetime.now(timezone.utc) - timedelta(minutes=30)
    fresh = await store.list_sessions(tag=sid, updated_after=recent)
    assert [i.session_id for i in fresh] == ids[1:]
    assert await store.count_sessions(user_id=user, tag="even", updated_after=recent) == 2
    assert await store.list_sessions(user_id=f"{sid}-nobody") == []
    with pytest.raises(ValueError, match="tag must not be empty"):
        await store.list_sessions(tag="")
    with pytest.raises(TypeError, match="updated_after must be a datetime"):
        await store.count_sessions(updated_after="yesterday")  # type: ignore[arg-type]


async def test_a_new_owner_or_new_tags_move_the_session_between_user_and_tag_listings(
    store: Store[Any], sid: str
) -> None:
    old, new, tag = f"{sid}-old", f"{sid}-new", f"{sid}-t"
    session = store.session(sid)
    session.set_info(tags={tag})
    await session.commit()  # tags before any owner
    session.set_info(user_id=old)
    await session.commit()
    assert [i.session_id for i in await store.list_sessions(user_id=old, tag=tag)] == [sid]
    session.set_info(user_id=new)  # the owner changes, the tags stay
    await session.commit()
    assert await store.list_sessions(user_id=old, tag=tag) == []
    assert [i.session_id for i in await store.list_sessions(user_id=new, tag=tag)] == [sid]
    session.set_info(tags={f"{tag}2"})
    await session.commit()
    assert await store.count_sessions(user_id=new, tag=tag) == 0
    assert await store.count_sessions(user_id=new, tag=f"{tag}2") == 1


async def test_list_sessions_without_filters_still_shows_catalogue_fields(
    store: Store[Any], sid: str
) -> None:
    await commit_one(store, sid, user_id="erin", title="T")
    page = await store.list_sessions(after=sid[:-1] + chr(ord(sid[-1]) - 1), limit=1000)
    (info,) = [i for i in page if i.session_id == sid]
    assert info.user_id == "erin" and info.title == "T" and info.version == 1


# ----------------------------------------------------------------------------- versions


async def test_version_advances_with_each_commit_and_reads_record_it(
    store: Store[Any], sid: str
) -> None:
    session = store.session(sid)
    await session.get_items()
    assert session.version == 0  # never committed to
    for n in (1, 2, 3):
        await session.add_items([msg(str(n))])
        await session.commit()
        assert session.version is None  # unconditional: others may have committed too
        await session.get_items()
        assert session.version == n
    info = await store.session_info(sid)
    assert info is not None and info.version == 3


async def test_commit_with_the_current_version_applies_and_knows_the_next_one(
    store: Store[Any], sid: str
) -> None:
    session = store.session(sid)
    await session.get_items()
    await session.add_items([msg("a")])
    await session.commit(expected_version=0)
    assert session.version == 1
    await session.add_items([msg("b")])
    await session.commit(expected_version=session.version)
    assert session.version == 2
    assert await session.get_items() == [msg("a"), msg("b")]


async def test_commit_with_a_stale_version_raises_and_applies_nothing(
    store: Store[Any], sid: str
) -> None:
    await commit_one(store, sid)
    mine, theirs = store.session(sid), store.session(sid)
    await mine.get_items()
    seen = mine.version
    await theirs.add_items([msg("theirs")])
    await theirs.commit()
    await mine.pop_item()
    await mine.add_items([msg("mine")])
    with pytest.raises(CommitVersionConflictError) as caught:
        await mine.commit(expected_version=seen)
    assert isinstance(caught.value, CommitConflictError)
    assert (caught.value.expected_version, caught.value.current_version) == (1, 2)
    assert caught.value.outcome_known
    assert await store.session(sid).get_items() == [msg(sid), msg("theirs")]
    assert mine.pending.items == 1 and mine.pending.pops == 1  # still staged
    await mine.rollback()


async def test_concurrent_conditional_commits_of_one_session_let_exactly_one_win(
    store: Store[Any], sid: str
) -> None:
    await commit_one(store, sid)
    writers = [store.session(sid) for _ in range(4)]
    for n, writer in enumerate(writers):
        await writer.get_items()
        await writer.add_items([msg(f"w{n}")])
    results = await asyncio.gather(
        *(w.commit(expected_version=w.version) for w in writers), return_exceptions=True
    )
    assert sum(r is None for r in results) == 1
    assert all(isinstance(r, CommitVersionConflictError) for r in results if r is not None)
    assert len(await store.session(sid).get_items()) == 2
    for writer in writers:
        await writer.rollback()


async def test_expected_version_is_validated(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    await session.add_items([msg("x")])
    with pytest.raises(TypeError, match="expected_version must be an int"):
        await session.commit(expected_version="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected_version must be >= 0"):
        await session.commit(expected_version=-1)
    await session.rollback()


# ----------------------------------------------------------------------------- retention


async def test_purge_without_older_than_deletes_sessions_whose_ttl_elapsed(
    target: Target, sid: str
) -> None:
    store = await target.open(ttl=timedelta(hours=1))
    assert store.ttl == timedelta(hours=1)
    own_short, own_long, by_default, fresh = (f"{sid}-{n}" for n in ("a", "b", "c", "d"))
    await commit_one(store, own_short, ttl=timedelta(minutes=10))
    await commit_one(store, own_long, ttl=timedelta(days=2))
    await commit_one(store, by_default)
    await commit_one(store, fresh)
    for session_id in (own_short, own_long, by_default):
        await age(target, session_id, 2 * 3600)
    would = await store.purge(dry_run=True)
    assert sorted(i.session_id for i in would if i.session_id.startswith(sid)) == [
        own_short,
        by_default,
    ]
    assert await store.session_info(own_short) is not None  # dry run
    gone = await store.purge()
    assert sorted(i.session_id for i in gone if i.session_id.startswith(sid)) == [
        own_short,
        by_default,
    ]
    assert await store.session_info(own_long) is not None
    assert await store.session_info(fresh) is not None
    info = await store.session_info(own_long)
    assert info is not None and info.expires_at() == info.updated_at + timedelta(days=2)


async def test_purge_by_ttl_keeps_a_session_written_after_it_was_listed(
    target: Target, sid: str
) -> None:
    store = await target.open(ttl=timedelta(hours=1))
    await commit_one(store, sid)
    await age(target, sid, 2 * 3600)
    backend: Any = store.backend
    now = datetime.now(timezone.utc)
    listed = await backend.expired_sessions(now, 3600.0, limit=1000, after=None)
    assert sid in {i.session_id for i in listed}
    await commit_one(store, sid)  # written meanwhile
    assert await backend.delete_expired([sid], now, 3600.0) == []
    assert await store.session_info(sid) is not None


async def test_a_store_without_ttl_purges_only_sessions_with_their_own(
    store: Store[Any], target: Target, sid: str
) -> None:
    assert store.ttl is None
    await commit_one(store, f"{sid}-own", ttl=timedelta(seconds=30))
    await commit_one(store, f"{sid}-none")
    await age(target, f"{sid}-own", 3600)
    await age(target, f"{sid}-none", 10 * 365 * 86400)
    gone = await store.purge()
    assert [i.session_id for i in gone if i.session_id.startswith(sid)] == [f"{sid}-own"]


async def test_delete_user_erases_every_row_of_that_user_and_nothing_else(
    store: Store[Any], target: Target, sid: str
) -> None:
    user = f"{sid}-user"
    mine = [f"{sid}-{i}" for i in range(3)]
    for session_id in mine:
        await commit_one(store, session_id, user_id=user, tags={"t"})
    await commit_one(store, f"{sid}-other", user_id=f"{sid}-else", tags={"t"})
    session = store.session(mine[0])
    await session.run_state_record()
    session.stage_run_state("{}", label="x")  # a run-state row too
    await session.commit()
    assert sorted(await store.delete_user(user)) == mine
    left = {"txs_sessions": 1, "txs_items": 1, "txs_batches": 1, "txs_session_tags": 1}
    left["txs_turns"] = 1  # the other user's commit recorded a turn (docs/turns.md)
    for table in target.session_tables():  # only the other user's rows are left
        rows = await target.fetch_value(
            f"SELECT count(*) FROM {table} WHERE session_id LIKE {target.param(1)}",
            f"{sid}-%",
        )
        assert rows == left.get(table, 0), table
    assert await store.count_sessions(user_id=user) == 0
    assert await store.delete_user(user) == []


async def test_delete_user_failing_at_its_last_session_deletes_none_of_its_sessions(
    store: Store[Any], target: Target, sid: str
) -> None:
    """One transaction: the database rejects deleting the user's last session row (after
    every other table's rows and the other sessions' rows were deleted in it)."""
    user = f"{sid}-user"
    mine = [f"{sid}-{i}" for i in range(3)]
    for session_id in mine:
        await commit_one(store, session_id, user_id=user, tags={"t"})
    await target.add_failing_trigger("txs_sessions", mine[-1], event="DELETE")
    try:
        with pytest.raises(StorageError, match="injected failure on txs_sessions"):
            await store.delete_user(user)
    finally:
        await target.drop_failing_trigger("txs_sessions")
    assert await store.count_sessions(user_id=user) == 3
    for session_id in mine:
        assert await raw.stored_rows(target, session_id) == 1
        assert await store.session(session_id).get_items() == [msg(session_id)]
    assert sorted(await store.delete_user(user)) == mine


async def test_session_tables_name_every_table_with_a_session_id_column(
    target: Target, tmp_path: Path
) -> None:
    own = target.fresh(tmp_path)  # tables of this test's own (tests share the PostgreSQL schema)
    await own.open()
    names = await own.tables_with_column("session_id")
    assert sorted(names) == sorted(own.session_tables())


async def test_memory_keeps_a_catalogue_and_a_wrapped_sdk_session_refuses_one() -> None:
    from sessions import MemoryStore

    store = await MemoryStore.open()
    session = store.session("m")
    session.set_info(user_id="u")  # the memory backend keeps a catalogue
    await session.commit()
    assert [i.session_id for i in await store.list_sessions(user_id="u")] == ["m"]
    from agents import SQLiteSession as SDKSQLiteSession

    from sessions import TransactionalSession

    wrapped = TransactionalSession(SDKSQLiteSession("w"))
    with pytest.raises(SessionError, match="keeps no session catalogue"):
        wrapped.set_info(user_id="u")
    await wrapped.add_items([msg("x")])
    with pytest.raises(SessionError, match="keeps no session versions"):
        await wrapped.commit(expected_version=0)
    await wrapped.rollback()
    await wrapped.close()
    await store.close()
